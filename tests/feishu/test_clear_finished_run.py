"""Clearing the Feishu export fetch of a finished run changes nothing, deferred or not.

Before the export fetch was built on the fetch step, it re-read the batch manifest that the
run's cleanup had deleted and failed. Now it is the fetch step's short-circuit, in ``execute``
and in ``execute_complete`` alike: no export task is created, nothing is downloaded, index,
state and run log stay as the run left them, and the task returns the fetched manifest's path
(as the first time) so parse, chunk and upsert line up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from include.staging import StagingArea
from plugins.connectors.feishu.exports import ExportTicket
from plugins.engine import get_source, run_pipeline
from plugins.tributary_airflow.operators.feishu import FeishuExportFetchOperator
from tests.simulators.feishu import FeishuSimulator
from tests.support.airflow import write_sources
from tests.support.finished_run import stores_dump, task_context

RUN = "manual__2026-12-01T09:00:00+00:00"
SID = "feishu:done"


@pytest.fixture
def finished(
    sim: FeishuSimulator, feishu_conn: str, tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    folder = sim.add_folder("已完成")
    tokens = [sim.add("docx", "文档一", folder, "# 一\n第一篇"), sim.add("docx", "文档二", folder, "# 二\n第二篇")]
    options = {"folders": [folder], "export_poll_interval": 0.05, "export_poll_max_interval": 0.1}
    spec = {"kind": "feishu", "name": "done", "schedule": None, "options": options, "batch_size": 10}
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "sources.yaml", [spec])))
    summary = run_pipeline(get_source(SID), run_id=RUN)
    assert summary.status == "success" and summary.counts["new"] == 2
    staging = StagingArea(get_source(SID).dag_id, RUN)
    assert not staging.exists()
    return {"staging": staging, "home": tributary_home, "tokens": tokens, "calls": dict(sim.counters)}


def _operator(finished: dict[str, Any], deferrable: bool) -> FeishuExportFetchOperator:
    batch = finished["staging"].stage_path("batch", 0)
    return FeishuExportFetchOperator(task_id="fetch", source=SID, batch=batch, deferrable=deferrable)


def _unchanged(finished: dict[str, Any], before: dict[str, list[str]], sim: FeishuSimulator) -> None:
    assert stores_dump(finished["home"]) == before
    assert not finished["staging"].exists()
    assert sim.counters["export_creations"] == finished["calls"]["export_creations"]
    assert sim.counters["export_downloads"] == finished["calls"]["export_downloads"]


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferrable", "in-task"])
def test_clearing_the_export_fetch_of_a_finished_run_changes_nothing(
    finished: dict[str, Any], sim: FeishuSimulator, deferrable: bool
) -> None:
    before = stores_dump(finished["home"])
    fetched = _operator(finished, deferrable).execute(task_context(RUN))  # no TaskDeferred either
    assert fetched == finished["staging"].stage_path("fetched", 0)
    _unchanged(finished, before, sim)


@pytest.mark.parametrize("status", ["done", "partial", "error"])
def test_resuming_a_deferred_export_fetch_of_a_finished_run_changes_nothing(
    finished: dict[str, Any], sim: FeishuSimulator, status: str
) -> None:
    """The run finished while this task was deferred (or its resumption is re-run): the trigger's
    event is not acted on: no download, no new deferral."""
    tickets = [
        ExportTicket(token, "docx", "docx", f"ticket-{n}", state="done" if n == 0 else "pending").to_dict()
        for n, token in enumerate(finished["tokens"])
    ]
    before = stores_dump(finished["home"])
    op = _operator(finished, deferrable=True)
    fetched = op.execute_complete(task_context(RUN), {"status": status, "tickets": tickets}, failures=[], staged=[])
    assert fetched == finished["staging"].stage_path("fetched", 0)
    _unchanged(finished, before, sim)
