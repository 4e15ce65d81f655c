"""Retention of the run log and lineage: what the summary task prunes after every run.

Lineage is one row per (run, item), so it grows with every run (about 560 bytes a row in
SQLite, ``benchmarks/state_growth.py``: 5-6 MiB per 10k-item run) while the item state stays the
size of the source. SQLite reuses the pages of deleted rows, so with retention the file stops
growing once it holds the retained runs; it does not shrink (``VACUUM`` would). The summary task
deletes finished runs that are both older than ``retention_days`` (default 90) and not among
the ``retention_keep_runs`` (default 20) most recent runs of the source, with their lineage
rows, and removes the staging that failed runs left behind once they are older than
``TRIBUTARY_FAILED_STAGING_HOURS`` (default 24: time to clear and retry their tasks). A source
with events on also forgets its consumed change events after ``EVENT_MEMORY`` (7 days).

Settings, most specific first: the source's ``options`` (``retention_days``,
``retention_keep_runs``), then ``TRIBUTARY_RETENTION_DAYS`` / ``TRIBUTARY_RETENTION_KEEP_RUNS``,
then the defaults. ``retention_days: 0`` prunes everything beyond the kept runs.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from typing import Any

from include.config import SourceConfig
from include.staging import StagingArea
from include.stores.events import EVENT_MEMORY, EventStore
from plugins.engine.context import log

__all__ = ["Retention", "prune_source"]

DEFAULT_DAYS = 90
DEFAULT_KEEP_RUNS = 20
_FAILED_STAGING_HOURS = 24.0


def _setting(source: SourceConfig, option: str, env_value: str | None, default: float) -> float:
    """The source's option, else the environment's value, else the default."""
    value = source.options.get(option)
    if value is None:
        value = env_value
    if value in (None, ""):
        return default
    number = float(value)
    if number < 0:
        raise ValueError(f"{source.source_id}: {option} must be >= 0, not {value!r}")
    return number


@dataclass(frozen=True, slots=True)
class Retention:
    days: float
    keep_runs: int

    @classmethod
    def for_source(cls, source: SourceConfig) -> Retention:
        days = _setting(source, "retention_days", os.environ.get("TRIBUTARY_RETENTION_DAYS"), DEFAULT_DAYS)
        keep = _setting(
            source, "retention_keep_runs", os.environ.get("TRIBUTARY_RETENTION_KEEP_RUNS"), DEFAULT_KEEP_RUNS
        )
        return cls(days=days, keep_runs=int(keep))


def _sweep_failed_staging(store: Any, source: SourceConfig, now: dt.datetime, keep_raw: bool) -> int:
    """Remove the staging areas failed runs of ``source`` left, once past the grace period."""
    hours = float(os.environ.get("TRIBUTARY_FAILED_STAGING_HOURS", _FAILED_STAGING_HOURS))
    removed = 0
    for run in store.failed_runs(source.source_id, ended_before=now - dt.timedelta(hours=hours)):
        staging = StagingArea(run.get("dag_id") or source.dag_id, run["run_id"])
        if staging.exists() and (not keep_raw or staging.holds_more_than_raw()):
            staging.cleanup(keep_raw=keep_raw)
            removed += 1
    return removed


def prune_source(store: Any, source: SourceConfig, keep_raw: bool, now: dt.datetime | None = None) -> dict[str, int]:
    """Apply the source's retention; the counts go into the run summary."""
    now = now or dt.datetime.now(dt.UTC)
    policy = Retention.for_source(source)
    runs, rows = store.prune_history(source.source_id, now - dt.timedelta(days=policy.days), policy.keep_runs)
    swept = _sweep_failed_staging(store, source, now, keep_raw)
    events = _prune_events(store, source, now)
    if runs or swept:
        log.info(
            "%s: retention (%g days, last %d runs kept) pruned %d runs, %d lineage rows; %d failed runs' staging removed",
            source.source_id,
            policy.days,
            policy.keep_runs,
            runs,
            rows,
            swept,
        )
    return {"pruned_runs": runs, "pruned_run_items": rows, "failed_staging_removed": swept, "pruned_events": events}


def _prune_events(store: Any, source: SourceConfig, now: dt.datetime) -> int:
    """Forget the source's consumed change events once past ``EVENT_MEMORY`` (the receivers
    refuse events older than that, so no replay of them can be taken for new)."""
    if not source.events.enabled:
        return 0
    return EventStore(store).prune(source.source_id, now - EVENT_MEMORY)
