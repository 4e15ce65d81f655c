"""sync_feishu_<name> in real Airflow 3 (dag.test()): the fetch task defers to
FeishuExportTrigger while exports render, and the run completes through the index."""

from __future__ import annotations

from pathlib import Path

import pytest

from include.index import open_index
from tests.simulators.feishu import FeishuSimulator, demo_drive
from tests.support.airflow import last_run, run_dag, write_sources

pytestmark = [pytest.mark.airflow, pytest.mark.slow]


def _task_states(dr) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for ti in dr.get_task_instances():
        out.setdefault(ti.task_id, []).append(str(ti.state).split(".")[-1].lower())
    return out


def test_sync_feishu_dag_defers_exports(
    sim: FeishuSimulator, feishu_conn: str, tributary_home: Path, tmp_path: Path, monkeypatch
) -> None:
    drive = demo_drive(sim)
    sim.export_pending_polls = 3
    failing = sim.add("docx", "无权限文档", drive["root"], "x")
    sim.set_export(failing, 110, pending_polls=1)
    options = {
        "folders": [drive["root"]],
        "export_poll_interval": 0.1,
        "export_poll_max_interval": 0.3,
        "deferrable": True,  # the source option overrides [operators] default_deferrable (False)
    }
    sources = write_sources(
        tmp_path / "sources.yaml",
        [
            {
                "kind": "feishu",
                "name": "drive",
                "schedule": None,
                "conn_id": "feishu_default",
                "options": options,
                "batch_size": 4,
            }
        ],
    )
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(sources))
    monkeypatch.setenv("TRIBUTARY_TASK_RETRIES", "0")

    dr = run_dag("sync_feishu_drive")
    assert str(dr.state).endswith("success"), _task_states(dr)
    assert set(_task_states(dr)["fetch"]) == {"success"} and len(_task_states(dr)["fetch"]) == 2
    run = last_run("feishu:drive")
    assert run["status"] == "partial"  # one export fails: the run says so
    assert (run["counts"]["new"], run["counts"]["failed"]) == (6, 1)
    assert sim.counters["export_creations"] == 5 and sim.counters["export_polls"] >= 5 * 3
    index = open_index()
    try:
        assert {h.title for h in index.search("甲公司")} == {"客户台账"}
        assert {h.title for h in index.search("增量更新")} == {"产品介绍"}
    finally:
        index.close()

    creations = sim.counters["export_creations"]
    dr = run_dag("sync_feishu_drive")
    assert str(dr.state).endswith("success")
    counts = last_run("feishu:drive")["counts"]
    assert (counts["new"], counts["changed"], counts["unchanged"]) == (0, 0, 6)
    # the failed export is retried (no stored version), nothing else is exported again
    assert sim.counters["export_creations"] == creations + 1
