"""sync_yuque_<name> in real Airflow 3 (dag.test()): connection from the environment, simulator
on 127.0.0.1, SQLite index. Asserts the run log's counts and the simulator's counters."""

from __future__ import annotations

from pathlib import Path

import pytest

from include.index import open_index
from tests.support.airflow import last_run, run_dag, write_sources
from tests.yuque.sheet_models import GOLDEN

pytestmark = [pytest.mark.airflow, pytest.mark.slow]


def test_sync_yuque_dag(sim, yuque_conn, tributary_home: Path, tmp_path: Path, monkeypatch) -> None:
    kb = sim.add_repo("alice", "kb", "知识库")
    sim.add_doc(kb, "入职指南", body="# 入职指南\n\n新同事第一天请到前台领取工牌。", toc_path=["入门"])
    sim.add_doc(kb, "销售表", format="lakesheet", sheets=GOLDEN)
    sources = write_sources(
        tmp_path / "sources.yaml",
        [
            {
                "kind": "yuque",
                "name": "kb",
                "schedule": None,
                "conn_id": "yuque_default",
                "options": {"namespaces": ["alice/kb"]},
            }
        ],
    )
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(sources))
    monkeypatch.setenv("TRIBUTARY_TASK_RETRIES", "0")

    dr = run_dag("sync_yuque_kb")
    assert str(dr.state).endswith("success")
    run = last_run("yuque:kb")
    assert run["status"] == "success" and run["counts"]["new"] == 2 and run["counts"]["failed"] == 0
    index = open_index()
    try:
        assert {h.title for h in index.search("苹果")} == {"销售表"}
        assert {h.title for h in index.search("工牌")} == {"入职指南"}
    finally:
        index.close()

    sim.reset_counters()
    dr = run_dag("sync_yuque_kb")
    assert str(dr.state).endswith("success")
    counts = last_run("yuque:kb")["counts"]
    assert (counts["new"], counts["changed"], counts["unchanged"], counts["fetched"]) == (0, 0, 2, 0)
    assert not any(name.startswith("doc:") for name in sim.counters)
