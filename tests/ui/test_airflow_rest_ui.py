"""Tributary in a running Airflow (api-server, scheduler, dag-processor; LocalExecutor on a fresh
PostgreSQL metadata DB), driven only through the REST API and a headless Chromium.

Started once for the module; the tests run in order on one ``files`` source:
1. the first scheduled run syncs everything and its index asset event (with the counts)
   triggers the example downstream DAG scheduled on the asset;
2. a manual trigger with a conf (``only_keys``) re-syncs exactly that item;
3. a dry run reports what would change and writes nothing;
4. a backfill over three daily intervals re-syncs what was modified inside each interval, for
   the folder source and for a Yuque source (the simulator, on 127.0.0.1);
5. the audit pages (plugin) and the trigger form render in Chromium (screenshots in
   tests/artifacts/ui/).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request

from plugins.connectors.yuque.versions import item_key
from tests.conftest import ROOT
from tests.simulators.yuque import YuqueSimulator
from tests.support.airflow_stack import AirflowProcesses, component_env
from tests.support.postgres import scratch_database
from tests.support.server import free_port, serve_asgi
from tests.ui.cdp import Browser, chromium_binary

pytestmark = [pytest.mark.airflow, pytest.mark.postgres, pytest.mark.slow]

DAG_ID = "sync_files_audit"
YUQUE_DAG = "sync_yuque_kb"
YUQUE_TOKEN = "alice-token-0123456789"
CONSUMER = "reembed_tributary_index"
ARTIFACTS = ROOT / "tests" / "artifacts" / "ui"
FILES = {
    "a.md": "# Alpha\n\nAlpha is about river deltas.\n",
    "b.md": "# Beta\n\nBeta explains salmon runs.\n",
    "c.md": "# Gamma\n\nGamma covers estuaries and tides.\n",
    "d.md": "# Delta\n\nDelta lists the bridges.\n",
}

_CONSUMER_DAG = '''
"""Example: a downstream job scheduled on the index asset a sync DAG updates (see README)."""
from airflow.sdk import DAG, Asset, task

with DAG("reembed_tributary_index", schedule=[Asset(name="tributary-index-sqlite-tributary",
         uri="tributary://index/sqlite/tributary", group="tributary")], catchup=False, tags=["tributary"]):

    @task(inlets=[Asset(name="tributary-index-sqlite-tributary", uri="tributary://index/sqlite/tributary",
          group="tributary")])
    def reembed(*, triggering_asset_events=None):
        for asset, events in (triggering_asset_events or {}).items():
            for event in events:
                print("re-embedding after", event.extra)

    reembed()
'''


@dataclass(kw_only=True)
class Stack(AirflowProcesses):
    base_url: str
    root: Path
    docs: Path
    http: httpx.Client | None = None
    yuque: YuqueSimulator | None = None
    alerts: list[dict[str, Any]] = field(default_factory=list)

    # ------------------------------------------------------------------ REST helpers
    def runs(self, dag_id: str = DAG_ID) -> list[dict[str, Any]]:
        resp = self.http.get(f"/api/v2/dags/{dag_id}/dagRuns", params={"limit": 100, "order_by": "run_after"})
        resp.raise_for_status()
        return resp.json()["dag_runs"]

    def trigger(self, conf: dict[str, Any], dag_id: str = DAG_ID) -> str:
        resp = self.http.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})
        assert resp.status_code == 200, resp.text
        return resp.json()["dag_run_id"]

    def finished(self, run_id: str, dag_id: str = DAG_ID, timeout: float = 240) -> str:
        def state() -> str | None:
            s = self.http.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").json()["state"]
            return s if s in ("success", "failed") else None

        return self.wait(f"{dag_id} run {run_id}", state, timeout)

    def store(self):
        from include.stores import open_state_store

        return open_state_store(self.env["TRIBUTARY_STATE_URL"])


def _touch(path: Path, text: str | None = None, when: dt.datetime | None = None) -> None:
    if text is not None:
        path.write_text(text, encoding="utf-8")
    ts = (when or dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)).timestamp()
    os.utime(path, (ts, ts))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("airflow-ui")
    docs = root / "docs"
    docs.mkdir()
    old = dt.datetime(2026, 10, 1, 12, tzinfo=dt.UTC)  # before every backfill interval
    for name, text in FILES.items():
        _touch(docs / name, text, old)
    dags = root / "dags"
    dags.mkdir()
    (dags / "tributary_sources.py").write_text((ROOT / "dags" / "tributary_sources.py").read_text())
    (dags / "reembed_example.py").write_text(_CONSUMER_DAG)
    (root / "sources.yaml").write_text(
        json.dumps(
            {
                "sources": [
                    {
                        "kind": "files",
                        "name": "audit",
                        "schedule": "@daily",
                        "options": {"root": str(docs)},
                        "batch_size": 2,
                    },
                    {
                        "kind": "yuque",
                        "name": "kb",
                        # daily at 06:00: its run ids differ from the files DAG's (see the report:
                        # the run log is keyed by Airflow run id alone, which is unique per DAG only)
                        "schedule": "0 6 * * *",
                        "conn_id": "yuque_default",
                        "options": {"namespaces": ["alice/kb"]},
                        # its own index: the files source's asset consumer sees only files runs
                        "index": {"backend": "sqlite", "name": "yuque"},
                    },
                    # unscheduled; its folder does not exist, so a triggered run fails at discover
                    {"kind": "files", "name": "broken", "schedule": None, "options": {"root": str(root / "gone")}},
                ]
            }
        )
    )
    sim = YuqueSimulator()
    sim.add_account("alice", token=YUQUE_TOKEN)
    kb = sim.add_repo("alice", "kb", "知识库")
    doc = sim.add_doc(kb, "入职指南", body="# 入职指南\n\n新同事第一天请到前台领取工牌。")
    doc.updated_at = doc.content_updated_at = "2026-10-01T12:00:00.000Z"  # before every backfill interval
    exits = contextlib.ExitStack()
    yuque_url = exits.enter_context(serve_asgi(sim.app))
    alerts: list[dict[str, Any]] = []
    hooks = FastAPI()

    @hooks.post("/hooks/{token:path}")
    async def _hook(token: str, request: Request) -> dict[str, bool]:
        alerts.append({"token": token, "body": await request.json()})
        return {"ok": True}

    hooks_url = exits.enter_context(serve_asgi(hooks))
    (root / "logs").mkdir()
    meta_url = exits.enter_context(scratch_database("tributary_ui"))
    port = free_port()
    env = {
        **os.environ,
        **component_env(
            airflow_home=root / "airflow", meta_url=meta_url, port=port, executor="LocalExecutor", dags_folder=dags
        ),
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(root / "airflow" / "logs"),
        "TRIBUTARY_HOME": str(root / "tributary"),
        "TRIBUTARY_STATE_URL": f"sqlite:///{root / 'tributary' / 'state.db'}",
        "TRIBUTARY_INDEX_PATH": str(root / "tributary" / "index.db"),
        "TRIBUTARY_STAGING_DIR": str(root / "tributary" / "staging"),
        "TRIBUTARY_SOURCES": str(root / "sources.yaml"),
        "TRIBUTARY_TASK_RETRIES": "0",
        "AIRFLOW_CONN_TRIBUTARY_ALERTS": json.dumps(
            {"conn_type": "http", "extra": {"webhook_url": f"{hooks_url}/hooks/T1/B2/x"}}
        ),
        "AIRFLOW_CONN_YUQUE_DEFAULT": json.dumps(
            {
                "conn_type": "yuque",
                "host": yuque_url,
                "password": YUQUE_TOKEN,
                "extra": {"backoff_initial": 0.01, "backoff_max": 0.05, "max_retry_after": 0.05},
            }
        ),
    }
    for var in ("TRIBUTARY_REDIS_URL", "AIRFLOW__OPENLINEAGE__TRANSPORT"):
        env.pop(var, None)
    (root / "tributary").mkdir()
    s = Stack(
        base_url=f"http://127.0.0.1:{port}", env=env, root=root, docs=docs, logs=root / "logs", yuque=sim, alerts=alerts
    )
    try:
        s.start_local_stack(port)
        s.http = httpx.Client(base_url=s.base_url, timeout=30)
        s.http.headers["Authorization"] = "Bearer " + s.http.get("/auth/token").json()["access_token"]
        yield s
    finally:
        if s.http is not None:
            s.http.close()
        s.stop()
        exits.close()


def _items(stack: Stack, run_id: str) -> dict[str, dict[str, Any]]:
    store = stack.store()
    try:
        return {i["item_key"]: i for i in store.run_items(run_id)}
    finally:
        store.close()


def _run(stack: Stack, run_id: str) -> dict[str, Any]:
    store = stack.store()
    try:
        return store.get_run(run_id)
    finally:
        store.close()


def test_scheduled_run_emits_asset_event_that_triggers_the_downstream_dag(stack: Stack) -> None:
    http = stack.http
    stack.wait(
        "both DAGs parsed", lambda: all(http.get(f"/api/v2/dags/{d}").status_code == 200 for d in (DAG_ID, CONSUMER))
    )
    # the DAG is unpaused and daily: the scheduler starts the latest interval's run by itself
    first = stack.wait("the first scheduled run", lambda: [r for r in stack.runs() if r["run_type"] == "scheduled"])[0]
    assert stack.finished(first["dag_run_id"]) == "success", stack.tails()
    counts = _run(stack, first["dag_run_id"])["counts"]
    assert counts["new"] == len(FILES) and counts["failed"] == 0

    # the summary task's asset event carries the counts ...
    events = http.get("/api/v2/assets/events", params={"source_dag_id": DAG_ID}).json()["asset_events"]
    [event] = [e for e in events if e["source_run_id"] == first["dag_run_id"]]
    assert event["uri"] == "tributary://index/sqlite/tributary" and event["source_task_id"] == "summary"
    assert event["extra"]["new"] == len(FILES) and event["extra"]["source"] == "files:audit"
    # ... and the downstream DAG scheduled on the asset ran because of it
    consumer = stack.wait("the downstream DAG run", lambda: stack.runs(CONSUMER))[0]
    assert consumer["run_type"] == "asset_triggered"
    assert stack.finished(consumer["dag_run_id"], CONSUMER) == "success", stack.tails()
    upstream = http.get(f"/api/v2/dags/{CONSUMER}/dagRuns/{consumer['dag_run_id']}/upstreamAssetEvents").json()
    assert [e["extra"]["new"] for e in upstream["asset_events"]] == [len(FILES)]


def test_trigger_with_conf_resyncs_only_the_named_item(stack: Stack) -> None:
    _touch(stack.docs / "a.md", "# Alpha\n\nAlpha now covers mangrove deltas.\n")
    _touch(stack.docs / "b.md", "# Beta\n\nBeta now explains eel migration.\n")
    run_id = stack.trigger({"only_keys": ["a.md"]})
    assert stack.finished(run_id) == "success", stack.tails()
    run = _run(stack, run_id)
    assert run["params"]["only_keys"] == ["a.md"] and run["run_type"] == "manual"
    touched = {k: i["action"] for k, i in _items(stack, run_id).items() if i["action"] != "unchanged"}
    assert touched == {"a.md": "changed"}

    # a conf that breaks the Params' JSON schema is refused before any run exists
    before = len(stack.runs())
    resp = stack.http.post(f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": {"max_items": 0}})
    assert resp.status_code == 400, resp.text
    resp = stack.http.post(
        f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": {"window_start": "last tuesday"}}
    )
    assert resp.status_code == 400, resp.text
    assert len(stack.runs()) == before


def test_dry_run_reports_and_writes_nothing(stack: Stack) -> None:
    from include.index.sqlite_fts import SqliteFtsIndex

    _touch(stack.docs / "c.md", "# Gamma\n\nGamma now covers storm surges.\n")
    _touch(stack.docs / "f.md", "# Phi\n\nPhi is a new note on wetlands.\n")

    def snapshot() -> tuple[dict, dict]:
        index = SqliteFtsIndex(stack.env["TRIBUTARY_INDEX_PATH"], index_name="tributary")
        store = stack.store()
        try:
            chunks = {cid: index.get_chunk(cid)["text_hash"] for cid in index.chunk_ids()}
            items = {
                k: (s.content_hash, s.version.to_dict() if s.version else None)
                for k, s in store.items("files:audit").items()
            }
            return chunks, items
        finally:
            index.close()
            store.close()

    before = snapshot()
    run_id = stack.trigger({"dry_run": True})
    assert stack.finished(run_id) == "success", stack.tails()
    assert snapshot() == before
    counts = _run(stack, run_id)["counts"]
    assert counts["dry_run"] is True
    assert (counts["would_add"], counts["would_update"], counts["would_delete"]) == (1, 2, 0)
    assert counts["chunks_written"] == 0 and counts["new"] == counts["changed"] == 0
    items = _items(stack, run_id)
    # the dry run lists every item it looked at, the unchanged ones too, with what a real run would do
    assert {k: i["action"] for k, i in items.items()} == {
        "a.md": "unchanged",
        "b.md": "changed",
        "c.md": "changed",
        "d.md": "unchanged",
        "f.md": "new",
    }
    assert all(i["reason"].startswith("dry run") for i in items.values())


def test_backfill_over_three_intervals_resyncs_each_intervals_edits(stack: Stack) -> None:
    days = [dt.datetime(2026, 11, d, tzinfo=dt.UTC) for d in (1, 2, 3)]
    for n, day in enumerate(days, 1):
        _touch(
            stack.docs / f"e{n}.md",
            f"# Event {n}\n\nEvent {n} happened on day {day:%d}.\n",
            day + dt.timedelta(hours=12),
        )
    resp = stack.http.post(
        "/api/v2/backfills",
        json={
            "dag_id": DAG_ID,
            "from_date": days[0].isoformat(),
            "to_date": days[-1].isoformat(),
            "reprocess_behavior": "none",
            "max_active_runs": 1,
            "dag_run_conf": {},
        },
    )
    assert resp.status_code == 200, resp.text
    backfill_id = resp.json()["id"]

    def backfill_runs() -> list[dict[str, Any]] | None:
        runs = [r for r in stack.runs() if r["run_type"] == "backfill"]
        return runs if len(runs) == 3 and all(r["state"] in ("success", "failed") for r in runs) else None

    runs = stack.wait(f"backfill {backfill_id}", backfill_runs, timeout=300)
    assert {r["state"] for r in runs} == {"success"}, stack.tails()
    for run in runs:
        start = dt.datetime.fromisoformat(run["data_interval_start"])
        logged = _run(stack, run["dag_run_id"])
        assert logged["run_type"] == "backfill"
        # the run's window is its data interval, and it synced exactly what was modified inside it
        assert logged["window_start"].replace(tzinfo=dt.UTC) == start
        assert logged["window_end"].replace(tzinfo=dt.UTC) == start + dt.timedelta(days=1)
        n = days.index(start) + 1
        touched = {k: i["action"] for k, i in _items(stack, run["dag_run_id"]).items() if i["action"] != "unchanged"}
        assert touched == {f"e{n}.md": "new"}, (start, touched)
    # edits made "today" (b.md, c.md, f.md) lie outside every interval: still pending
    store = stack.store()
    try:
        assert store.get_item("files:audit", "f.md") is None
    finally:
        store.close()


def test_yuque_backfill_over_three_intervals(stack: Stack) -> None:
    sim = stack.yuque
    first = stack.wait(
        "the first Yuque run", lambda: [r for r in stack.runs(YUQUE_DAG) if r["run_type"] == "scheduled"]
    )[0]
    assert stack.finished(first["dag_run_id"], YUQUE_DAG) == "success", stack.tails()
    assert _run(stack, first["dag_run_id"])["counts"]["new"] == 1
    [kb] = sim.repos.values()
    days = [dt.datetime(2026, 11, d, tzinfo=dt.UTC) for d in (1, 2, 3)]
    for n, day in enumerate(days, 1):
        doc = sim.add_doc(kb, f"周报 {n}", body=f"# 周报 {n}\n\n第 {n} 天的记录。")
        doc.updated_at = doc.content_updated_at = f"{day:%Y-%m-%d}T12:00:00.000Z"
    # an edit made today lies outside every interval: the backfill must leave it alone
    [onboarding] = [d for d in kb.docs.values() if d.title == "入职指南"]
    onboarding.body = "# 入职指南\n\n工牌改到三楼领取。"
    onboarding.updated_at = onboarding.content_updated_at = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    key = item_key(kb.id, onboarding.id)  # Yuque items are keyed "<book_id>/<doc_id>"
    store = stack.store()
    try:
        hash_before = store.get_item("yuque:kb", key).content_hash
    finally:
        store.close()
    resp = stack.http.post(
        "/api/v2/backfills",
        json={
            "dag_id": YUQUE_DAG,
            "from_date": days[0].isoformat(),
            "to_date": (days[-1] + dt.timedelta(hours=12)).isoformat(),
        },
    )
    assert resp.status_code == 200, resp.text

    def backfill_runs() -> list[dict[str, Any]] | None:
        runs = [r for r in stack.runs(YUQUE_DAG) if r["run_type"] == "backfill"]
        return runs if len(runs) == 3 and all(r["state"] in ("success", "failed") for r in runs) else None

    runs = stack.wait("the Yuque backfill", backfill_runs, timeout=300)
    assert {r["state"] for r in runs} == {"success"}, stack.tails()
    store = stack.store()
    try:
        states = store.items("yuque:kb")
    finally:
        store.close()
    titles = {k: st.title for k, st in states.items()}
    assert states[key].content_hash == hash_before
    for run in runs:
        start = dt.datetime.fromisoformat(run["data_interval_start"])
        assert (start.hour, start.minute) == (6, 0)  # intervals are [day 06:00, next day 06:00)
        logged = _run(stack, run["dag_run_id"])
        assert logged["source"] == "yuque:kb" and logged["run_type"] == "backfill"
        assert logged["window_start"].replace(tzinfo=dt.UTC) == start
        touched = {k: i["action"] for k, i in _items(stack, run["dag_run_id"]).items() if i["action"] != "unchanged"}
        assert {titles[k]: a for k, a in touched.items()} == {f"周报 {start.day}": "new"}, (start, touched)


def test_failed_run_alert_posted_once_by_the_dag_processor(stack: Stack) -> None:
    # no other run has failed so far: nothing was posted
    assert stack.alerts == []
    run_id = stack.trigger({}, dag_id="sync_files_broken")
    assert stack.finished(run_id, "sync_files_broken") == "failed"
    # the DAG-level failure callback runs in the dag-processor, after the run is marked failed
    stack.wait("the failure alert", lambda: stack.alerts, timeout=120)
    logged = stack.wait(
        "the run log to show the failure", lambda: _run(stack, run_id)["status"] == "failed" and _run(stack, run_id)
    )
    assert "discover" in logged["error"] and "FileNotFoundError" in logged["error"]
    # a later, unrelated request round-trip: still exactly one alert
    assert stack.http.get("/api/v2/version").status_code == 200
    [alert] = stack.alerts
    assert alert["token"] == "T1/B2/x"
    text = alert["body"]["text"]
    assert "files:broken" in text and "failed at discover" in text and "is not a directory" in text
    assert f"{stack.base_url}/dags/sync_files_broken/runs/" in text


def test_audit_pages_and_trigger_form_in_chromium(stack: Stack) -> None:
    # the plugin is registered with its app and its navigation entry
    plugins = stack.http.get("/api/v2/plugins").json()["plugins"]
    [ours] = [p for p in plugins if p["name"] == "tributary"]
    # the login-free receiver first: Airflow mounts in this order and the first matching prefix wins
    assert [a["url_prefix"] for a in ours["fastapi_apps"]] == ["/tributary/events", "/tributary"]
    assert {v["destination"] for v in ours["external_views"]} == {"nav", "dag_run"}
    # lineage is behind Airflow's authentication: a forged token is refused (with
    # simple_auth_manager_all_admins, as here, a request without any token counts as admin)
    forged = httpx.get(f"{stack.base_url}/tributary/api/runs", headers={"Authorization": "Bearer forged"})
    assert forged.status_code == 401, forged.text  # RFC 6750 s3.1 invalid_token (Airflow itself says 403)
    assert 'error="invalid_token"' in forged.headers["www-authenticate"]
    # the run log is read in pages of at most 500: -1 (SQLite: "no limit") is refused, not clamped
    for bad in (-1, 0, 501):
        assert stack.http.get("/tributary/api/runs", params={"limit": bad}).status_code == 422, bad
    runs_json = stack.http.get("/tributary/api/runs", params={"source": "files:audit"}).json()
    backfill = next(r for r in runs_json if r["run_type"] == "backfill")

    binary = chromium_binary()
    if binary is None:
        print("SKIP reason: no chromium binary (apt-get install -y chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    browser = Browser(binary)
    try:
        login = f"{stack.base_url}/auth/token/login?next="
        browser.goto(login + "/tributary/", ready="document.querySelectorAll('table tr').length > 3")
        page = browser.text()
        assert "Runs per source" in page and "files:audit" in page and backfill["run_id"] in page
        browser.screenshot(ARTIFACTS / "audit-runs.png")

        # the backfill run: its item with action, version and links
        browser.eval(f"document.querySelector('a[href*=\"{backfill['run_id'][:20]}\"]').click()")
        browser.wait_for("location.pathname.startsWith('/tributary/runs/') && document.readyState === 'complete'")
        page = browser.text()
        assert "new" in page and "modified_time=2026-11-0" in page and "backfill" in page
        assert browser.eval(
            "[...document.querySelectorAll('a')].some(a => a.href.includes('/dags/sync_files_audit/runs/'))"
        )
        browser.screenshot(ARTIFACTS / "audit-run.png")

        # item history from the manual run's page: a.md new -> changed
        manual = next(r for r in runs_json if r["params"].get("only_keys") == ["a.md"])
        browser.goto(f"{stack.base_url}/tributary/runs/{manual['run_id']}?action=changed")
        browser.eval("document.querySelector('a[href*=\"items?source=\"]').click()")
        browser.wait_for("location.pathname === '/tributary/items' && document.readyState === 'complete'")
        page = browser.text()
        assert "a.md" in page and "changed" in page and "new" in page
        browser.screenshot(ARTIFACTS / "audit-item-history.png")

        # the same pages inside Airflow's UI (navigation entry -> iframe)
        browser.goto(f"{stack.base_url}/plugin/tributary", ready="!!document.querySelector('iframe')")
        browser.wait_for(
            "(() => { const f = document.querySelector('iframe'); return f && f.contentDocument && f.contentDocument.body && f.contentDocument.body.innerText.includes('Runs per source'); })()"
        )
        assert browser.eval("document.querySelector('iframe').src").endswith("/tributary/")
        browser.screenshot(ARTIFACTS / "airflow-nav-audit.png")

        # the trigger form: Params with titles and descriptions
        browser.goto(
            f"{stack.base_url}/dags/{DAG_ID}",
            ready="[...document.querySelectorAll('button')].some(b => b.innerText.trim() === 'Trigger')",
        )
        browser.eval("[...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Trigger').click()")
        browser.wait_for(
            "document.body.innerText.includes('Run Parameters') || document.body.innerText.includes('Advanced Options')"
        )
        # open the parameters section if it is collapsed
        browser.eval(
            "[...document.querySelectorAll('button')].filter(b => /Run Parameters|Advanced Options/.test(b.innerText)).forEach(b => b.getAttribute('aria-expanded') === 'false' && b.click())"
        )
        browser.wait_for(
            "document.body.innerText.includes('Full resync') && document.body.innerText.includes('Only these items')"
        )
        page = browser.text()
        assert "Dry run" in page and "Window start" in page and "Re-sync exactly these items" in page
        browser.screenshot(ARTIFACTS / "trigger-form.png")
    finally:
        browser.close()
    for name in ("audit-runs", "audit-run", "audit-item-history", "airflow-nav-audit", "trigger-form"):
        assert (ARTIFACTS / f"{name}.png").stat().st_size > 10_000
    # still exactly one failure alert, well after the failed run
    assert len(stack.alerts) == 1
