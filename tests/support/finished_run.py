"""Clearing a task of a finished run: what must not change, and the task context to re-run it with.

A finished run is closed: re-running any of its tasks (Airflow's "clear") must leave the index,
the item state and the run log exactly as they were. :func:`stores_dump` is every row of both
SQLite files, so any write at all (a heartbeat, a reopened run, a re-upserted chunk) shows.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from airflow.sdk import Context


def stores_dump(home: Path) -> dict[str, list[str]]:
    """Every row of the index and of the state store (item state, run log, run items)."""
    out = {}
    for name in ("index.db", "state.db"):
        db = sqlite3.connect(home / name)
        try:
            out[name] = list(db.iterdump())
        finally:
            db.close()
    return out


@dataclass
class RecordingTaskInstance:
    """The ``ti`` of a task context, as far as our operators use it: XCom pushes are recorded."""

    run_id: str
    pushed: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def task_context(run_id: str) -> Context:
    """The parts of an Airflow task context the sync operators read (``ti``: a recorder)."""
    return cast(Context, {"run_id": run_id, "params": {}, "ti": RecordingTaskInstance(run_id), "outlet_events": {}})
