"""The permissions DAG (``perms_<kind>_<name>``): built only for sources with permissions to keep
current, on their ``permission_sync_minutes``, and run end to end in real Airflow (dag.test())
after an in-process content sync of the demo site."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from include.acl import ANONYMOUS
from include.stores import open_state_store
from plugins.engine import get_source, run_pipeline
from plugins.engine.search import search_index
from tests.support.airflow import ensure_airflow_db, write_sources


def test_only_sources_with_permissions_get_a_permissions_dag(tmp_path: Path) -> None:
    from airflow.timetables.trigger import DeltaTriggerTimetable

    from plugins.tributary_airflow.dag_factory import build_dags

    web = {"seeds": ["https://example.org/"]}
    sources = write_sources(
        tmp_path / "s.yaml",
        [
            {"kind": "web", "name": "open", "options": web},  # no acl block: public, nothing to sync
            {"kind": "web", "name": "team", "options": web, "acl": {"groups": ["eng"]}, "permission_sync_minutes": 15},
            {"kind": "files", "name": "share", "options": {"root": str(tmp_path)}},
            {"kind": "feishu", "name": "wiki", "options": {"folders": ["fldcnX"]}},
            {"kind": "yuque", "name": "kb", "options": {"namespaces": ["alice/kb"]}},
        ],
    )
    dags = build_dags(sources)
    assert {d for d in dags if d.startswith("perms_")} == {"perms_web_team", "perms_feishu_wiki", "perms_yuque_kb"}
    assert {d for d in dags if d.startswith("sync_")} == {
        "sync_web_open",
        "sync_web_team",
        "sync_files_share",
        "sync_feishu_wiki",
        "sync_yuque_kb",
    }
    team = dags["perms_web_team"]
    assert team.timetable == DeltaTriggerTimetable(dt.timedelta(minutes=15))
    assert dags["perms_feishu_wiki"].timetable == DeltaTriggerTimetable(dt.timedelta(minutes=30))  # the default
    assert {t.task_id for t in team.tasks} == {"sync_groups", "sync_permissions"}
    assert team.get_task("sync_permissions").upstream_task_ids == {"sync_groups"}
    assert team.max_active_runs == 1 and not team.catchup and "permissions" in team.tags
    assert "15 minutes" in (team.doc_md or "")


@pytest.mark.airflow
def test_the_permissions_dag_reaches_the_index_without_a_resync(
    tributary_home: Path, tmp_path: Path, demo_site: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from plugins.tributary_airflow.dag_factory import build_dags

    _, url = demo_site
    options = {"seeds": [url], "delay_seconds": 0, "allowlist": ["127.0.0.1"], "use_sitemaps": False}

    def configure(acl: dict[str, Any]) -> None:
        entry = {"kind": "web", "name": "demo", "schedule": None, "options": options, "acl": acl}
        monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "s.yaml", [entry])))

    monkeypatch.setenv("TRIBUTARY_TASK_RETRIES", "0")
    configure({"users": ["alice@example.com"], "rules": [{"match": "*/faq.html", "public": True}]})
    content = run_pipeline(get_source("web:demo"))
    assert content.status == "success" and content.counts["new"] >= 2
    zh_kb = url + "guide/zh-kb.html"
    assert zh_kb not in _anonymous_urls("知识库")  # alice's page, not the public's

    configure({"public": True})  # the source entry opens everything; no page changed
    ensure_airflow_db()
    dag_run = build_dags()["perms_web_demo"].test()
    assert str(dag_run.state).endswith("success")
    store = open_state_store()
    try:
        [perms, sync] = store.runs("web:demo", limit=2)
    finally:
        store.close()
    assert sync["run_id"] == content.run_id  # no content run since
    assert perms["run_id"].startswith("permissions__") and perms["status"] == "success"
    counts = perms["counts"]
    assert counts["checked"] == content.counts["new"]
    assert counts["changed"] == counts["checked"] - 1  # all but the FAQ, public already
    assert counts["chunks_embedded"] == 0 and counts["unknown"] == 0
    assert zh_kb in _anonymous_urls("知识库")


def _anonymous_urls(query: str) -> set[str]:
    hits = search_index([get_source("web:demo")], query, k=20, principal=ANONYMOUS)
    return {h["url"] for h in hits}
