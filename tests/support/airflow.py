"""Real Airflow for tests: a migrated metadata DB (once per session) and DAG runs via dag.test()."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

_MIGRATED: set[str] = set()

__all__ = ["ensure_airflow_db", "last_run", "run_dag", "write_sources"]


def ensure_airflow_db() -> None:
    """``airflow db migrate`` into this session's AIRFLOW_HOME (idempotent, done once)."""
    home = os.environ["AIRFLOW_HOME"]
    if home in _MIGRATED:
        return
    Path(home).mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True, env=dict(os.environ)
    )
    _MIGRATED.add(home)


def write_sources(path: Path, sources: list[dict[str, Any]]) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({"sources": sources}, allow_unicode=True), encoding="utf-8")
    return path


def run_dag(dag_id: str, conf: dict[str, Any] | None = None) -> Any:
    """Build the DAG from the configured sources and run it in real Airflow with dag.test()."""
    from plugins.tributary_airflow.dag_factory import build_dags

    ensure_airflow_db()
    dag = build_dags()[dag_id]
    return dag.test(run_conf=conf or {})


def last_run(source_id: str) -> dict[str, Any]:
    """The most recent run-log row of a source."""
    from include.stores import open_state_store

    store = open_state_store()
    try:
        return store.runs(source_id, limit=1)[0]
    finally:
        store.close()
