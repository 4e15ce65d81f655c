"""Clearing any task of a finished run changes nothing: index, item state and run log stay as
the run left them, the task succeeds with what it returned the first time (so the tasks after it
line up), and the run's staging area, removed when the run finished, is not recreated.

The run is finished in-process (``run_pipeline``), then each operator is re-run as Airflow re-runs
a cleared task: the same run id, the same upstream XCom values (manifest paths whose files are
gone). The Feishu export fetch, deferred and not, is in ``tests/feishu/test_clear_finished_run.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from include.staging import StagingArea
from plugins.engine import get_source, run_pipeline
from plugins.tributary_airflow.operators.base import StepOperator
from plugins.tributary_airflow.operators.sync import (
    ChunkOperator,
    CommitStateOperator,
    DiscoverOperator,
    FetchOperator,
    ParseOperator,
    RunSummaryOperator,
    UpsertOperator,
)
from tests.support.airflow import write_sources
from tests.support.finished_run import RecordingTaskInstance, stores_dump, task_context

RUN = "manual__2026-12-01T08:00:00+00:00"
SID = "files:cleared"


@pytest.fixture
def finished(tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A files source of three notes in two batches, synced once by run ``RUN``."""
    root = tmp_path / "notes"
    root.mkdir()
    for i in range(3):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nLock keeper's note number {i}.\n", encoding="utf-8")
    spec = {"kind": "files", "name": "cleared", "schedule": None, "options": {"root": str(root)}, "batch_size": 2}
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "sources.yaml", [spec])))
    summary = run_pipeline(get_source(SID), run_id=RUN)
    assert summary.status == "success" and summary.counts["new"] == 3 and summary.counts["batches"] == 2
    staging = StagingArea(get_source(SID).dag_id, RUN)
    assert not staging.exists()  # cleaned up when the run finished
    return {"counts": summary.counts, "staging": staging, "home": tributary_home}


def _path(staging: StagingArea, stage: str) -> str:
    return staging.stage_path(stage, 1)  # the second batch's manifests


# stage -> (the cleared task, built from the staging area; what it returns given the run's counts)
Case = tuple[Callable[[StagingArea], StepOperator], Callable[[StagingArea, dict[str, Any]], Any]]
CASES: dict[str, Case] = {
    "discover": (
        lambda st: DiscoverOperator(task_id="discover", source=SID),
        lambda st, counts: [st.stage_path("batch", 0), st.stage_path("batch", 1)],
    ),
    "fetch": (
        lambda st: FetchOperator(task_id="fetch", source=SID, batch=_path(st, "batch")),
        lambda st, counts: _path(st, "fetched"),
    ),
    "parse": (
        lambda st: ParseOperator(task_id="parse", source=SID, manifest=_path(st, "fetched")),
        lambda st, counts: _path(st, "parsed"),
    ),
    "chunk": (
        lambda st: ChunkOperator(task_id="chunk", source=SID, manifest=_path(st, "parsed")),
        lambda st, counts: _path(st, "chunked"),
    ),
    "upsert": (
        lambda st: UpsertOperator(task_id="upsert", source=SID, manifest=_path(st, "chunked")),
        lambda st, counts: _path(st, "upserted"),
    ),
    "commit": (
        lambda st: CommitStateOperator(task_id="commit", source=SID),
        lambda st, counts: counts,
    ),
    # commit's XCom would be re-read on a clear; whatever it holds, the closed run's counts stand
    "summary": (
        lambda st: RunSummaryOperator(task_id="summary", source=SID, counts={"new": 99}),
        lambda st, counts: counts,
    ),
}


@pytest.mark.parametrize("stage", list(CASES))
def test_clearing_a_task_of_a_finished_run_changes_nothing(finished: dict[str, Any], stage: str) -> None:
    build, expected = CASES[stage]
    staging, counts = finished["staging"], finished["counts"]
    before = stores_dump(finished["home"])
    operator = build(staging)
    context = task_context(RUN)

    assert operator.execute(context) == expected(staging, counts)

    assert stores_dump(finished["home"]) == before
    assert not staging.exists()
    facets = operator.get_openlineage_facets_on_complete(context["ti"])
    assert facets.run_facets["tributary"].tributaryRunId == RUN


def test_discover_of_a_finished_run_names_its_plan(finished: dict[str, Any]) -> None:
    context = task_context(RUN)
    DiscoverOperator(task_id="discover", source=SID).execute(context)
    ti = context["ti"]
    assert isinstance(ti, RecordingTaskInstance)
    assert ti.pushed == {"plan": str(finished["staging"].path("discover.json"))}


def test_running_a_finished_run_again_in_process_changes_nothing(finished: dict[str, Any]) -> None:
    before = stores_dump(finished["home"])
    again = run_pipeline(get_source(SID), run_id=RUN)
    assert (again.status, again.counts) == ("success", finished["counts"])
    assert stores_dump(finished["home"]) == before
    assert not finished["staging"].exists()
