"""A web source over several hosts in real Airflow 3 (dag.test()): start -> crawl (mapped, one
task per partition, labelled with its hosts) -> discover (merge + plan) -> the batch stages.
Three nginx hosts on 127.0.0.1; the run indexes every host's pages, and a page deleted on one
host leaves the index on the next run."""

from __future__ import annotations

from pathlib import Path

import pytest

from include.stores import open_state_store
from tests.support.airflow import last_run, run_dag, write_sources
from tests.web.nginx import requires_nginx
from tests.web.test_multi_host import HOSTS, PAGES, serve_sites

pytestmark = [pytest.mark.airflow, requires_nginx]


def _sources(path: Path, seeds: list[str], parallelism: int) -> Path:
    entry = {
        "kind": "web",
        "name": "hosts",
        "schedule": None,
        "delete_after_missing_runs": 1,
        "mass_delete_threshold": 0.9,
        "options": {
            "seeds": seeds,
            "delay_seconds": 0,
            "allowlist": ["127.0.0.1"],
            "use_sitemaps": False,
            "host_parallelism": parallelism,
            "redis_url": "",
        },
        "batch_size": 4,
    }
    return write_sources(path, [entry])


def test_a_multi_host_source_gets_a_mapped_crawl_task(tmp_path: Path) -> None:
    from plugins.tributary_airflow.dag_factory import build_dags

    seeds = ["https://a.example/", "https://b.example/", "https://c.example/x", "https://a.example/y"]
    dag = build_dags(_sources(tmp_path / "s.yaml", seeds, 2))["sync_web_hosts"]
    assert {"start", "crawl", "discover"} <= {t.task_id for t in dag.tasks}
    crawl = dag.get_task("crawl")
    assert getattr(crawl, "is_mapped", False) or type(crawl).__name__ == "MappedOperator"
    assert crawl.upstream_task_ids == {"start"} and dag.get_task("discover").upstream_task_ids == {"crawl"}
    assert dag.get_task("fetch").upstream_task_ids == {"discover"}
    # one host: the one discover task, exactly as before
    single = build_dags(_sources(tmp_path / "one.yaml", ["https://a.example/", "https://a.example/y"], 4))
    assert "crawl" not in {t.task_id for t in single["sync_web_hosts"].tasks}


def test_partitioned_dag_runs_in_airflow(tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with serve_sites(tmp_path) as servers:
        seeds = [s.base + "/" for s in servers]
        monkeypatch.setenv("TRIBUTARY_SOURCES", str(_sources(tmp_path / "sources.yaml", seeds, 4)))
        monkeypatch.setenv("TRIBUTARY_TASK_RETRIES", "0")
        dr = run_dag("sync_web_hosts")
        assert str(dr.state).endswith("success")
        run = last_run("web:hosts")
        counts = run["counts"]
        assert run["status"] == "success" and counts["new"] == HOSTS * (PAGES + 1) and counts["failed"] == 0
        parts = counts["source_stats"]["partitions"]
        assert [p["hosts"] for p in parts] == [[s.base.removeprefix("http://")] for s in servers]
        crawls = [ti for ti in dr.get_task_instances() if ti.task_id == "crawl"]
        assert sorted(ti.map_index for ti in crawls) == list(range(HOSTS))
        assert all(str(ti.state).endswith("success") for ti in crawls)

        (tmp_path / "www1" / "p2.html").unlink()
        dr = run_dag("sync_web_hosts")
        assert str(dr.state).endswith("success")
        assert last_run("web:hosts")["counts"]["deleted"] == 1
    store = open_state_store()
    try:
        assert store.get_item("web:hosts", f"{servers[1].base}/p2.html") is None
        assert store.get_item("web:hosts", f"{servers[0].base}/p2.html") is not None
    finally:
        store.close()
