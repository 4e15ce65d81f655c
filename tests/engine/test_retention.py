"""Run-log and lineage retention, applied by the summary (issue 19, point 11).

Lineage is one row per (run, item): before, it grew with every run without bound. The summary
now deletes finished runs older than ``retention_days`` (default 90) that are not among the
``retention_keep_runs`` (default 20) newest of their source, with their lineage rows, and counts
what it pruned in the run summary; staging that failed runs left is removed after a grace period.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import sqlalchemy as sa

from include.config import SourceConfig
from include.stores import open_state_store
from include.stores.state import run_items_table, runs_table
from plugins.engine import RunContext, run_pipeline


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(3):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nSluices of canal {i}.\n", encoding="utf-8")
    return root


def _source(docs: Path, name: str = "keep", **options: object) -> SourceConfig:
    return SourceConfig(kind="files", name=name, options={"root": str(docs), **options})


def _runs_and_rows(store, source: str) -> tuple[list[str], int]:
    with store.engine.connect() as conn:
        runs = conn.execute(
            sa.select(runs_table.c.run_id).where(runs_table.c.source == source).order_by(runs_table.c.started_at)
        )
        rows = conn.execute(
            sa.select(sa.func.count()).select_from(run_items_table).where(run_items_table.c.source == source)
        )
        return [r.run_id for r in runs], rows.scalar_one()


def _age(store, source: str, run_id: str, days: float, **extra: object) -> None:
    when = dt.datetime.now(dt.UTC) - dt.timedelta(days=days)
    with store.engine.begin() as conn:
        conn.execute(
            runs_table.update()
            .where(runs_table.c.source == source, runs_table.c.run_id == run_id)
            .values(started_at=when, **extra)
        )


def test_only_the_newest_runs_are_kept_when_every_run_is_past_the_age(docs: Path, tributary_home: Path) -> None:
    src = _source(docs, retention_days=0, retention_keep_runs=3)
    summaries = [run_pipeline(src, run_id=f"r{i}") for i in range(5)]
    assert [s.counts["pruned_runs"] for s in summaries] == [0, 0, 0, 1, 1]
    assert [s.counts["pruned_run_items"] for s in summaries] == [0, 0, 0, 3, 3]
    store = open_state_store()
    assert _runs_and_rows(store, "files:keep") == (["r2", "r3", "r4"], 9)
    assert store.get_run("r4", "files:keep")["counts"]["pruned_runs"] == 1  # in the run log too
    store.close()


def test_runs_go_when_both_old_and_beyond_the_kept_ones(docs: Path, tributary_home: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRIBUTARY_RETENTION_KEEP_RUNS", "2")  # days: the default, 90
    src, other = _source(docs), _source(docs, name="other", retention_days=0, retention_keep_runs=0)
    for i in range(4):
        run_pipeline(src, run_id=f"r{i}")
    run_pipeline(other, run_id="o0")
    store = open_state_store()
    _age(store, "files:keep", "r0", 100)
    _age(store, "files:keep", "r1", 95)
    _age(store, "files:keep", "r2", 10)  # beyond the newest 2, but young: kept
    store.start_run("stuck", "files:keep", run_type="inline")  # running: the reaper's, not retention's
    _age(store, "files:keep", "stuck", 200)
    summary = run_pipeline(src, run_id="r4")
    assert (summary.counts["pruned_runs"], summary.counts["pruned_run_items"]) == (2, 6)
    assert _runs_and_rows(store, "files:keep")[0] == ["stuck", "r2", "r3", "r4"]
    assert _runs_and_rows(store, "files:other") == (["o0"], 3)  # another source's policy, another source's runs
    store.close()


def test_staging_left_by_a_failed_run_is_removed_after_the_grace_period(docs: Path, tributary_home: Path) -> None:
    src = _source(docs)
    store = open_state_store()
    for run_id, ended_hours_ago in (("old-failure", 30), ("fresh-failure", 1)):
        store.start_run(run_id, "files:keep", run_type="inline")
        store.finish_run(run_id, "failed", {}, error="RuntimeError: boom", source="files:keep")
        ended = dt.datetime.now(dt.UTC) - dt.timedelta(hours=ended_hours_ago)
        _age(store, "files:keep", run_id, 2, ended_at=ended)
        RunContext(source=src, run_id=run_id).staging.write_bytes("raw/x.md", b"# left behind\n")
    summary = run_pipeline(src)
    assert summary.counts["failed_staging_removed"] == 1
    assert not RunContext(source=src, run_id="old-failure").staging.exists()
    assert RunContext(source=src, run_id="fresh-failure").staging.exists()  # may still be cleared and retried
    store.close()
