"""The source page's actions in a running Airflow (api-server and dag-processor on a fresh
PostgreSQL metadata DB; no scheduler, so the runs it creates stay queued), clicked in headless
Chromium: each creates what Airflow's REST API then shows (a DAG run with its conf, the pause flag).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from include.config import SourceConfig
from plugins.engine import run_pipeline
from tests.conftest import ROOT
from tests.support.airflow_stack import AirflowProcesses, component_env
from tests.support.postgres import scratch_database
from tests.support.server import free_port
from tests.ui.cdp import Browser, chromium_binary

pytestmark = [pytest.mark.airflow, pytest.mark.postgres, pytest.mark.slow]

DAG_ID = "sync_files_ops"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("actions")
    docs = root / "docs"
    docs.mkdir()
    (docs / "good.md").write_text("# Good\n\nA healthy document.\n", encoding="utf-8")
    (docs / "bad.pdf").write_bytes(b"%PDF-1.7\n not really a pdf")
    dags = root / "dags"
    dags.mkdir()
    (dags / "tributary_sources.py").write_text((ROOT / "dags" / "tributary_sources.py").read_text())
    entry = {"kind": "files", "name": "ops", "schedule": "@daily", "options": {"root": str(docs)}}
    (root / "sources.yaml").write_text(json.dumps({"sources": [entry]}))
    tributary = {
        "TRIBUTARY_HOME": str(root / "tributary"),
        "TRIBUTARY_STATE_URL": f"sqlite:///{root / 'tributary' / 'state.db'}",
        "TRIBUTARY_INDEX_PATH": str(root / "tributary" / "index.db"),
        "TRIBUTARY_STAGING_DIR": str(root / "tributary" / "staging"),
        "TRIBUTARY_SOURCES": str(root / "sources.yaml"),
    }
    (root / "tributary").mkdir()
    with pytest.MonkeyPatch.context() as mp:  # a first sync in process: bad.pdf is failing
        for name, value in tributary.items():
            mp.setenv(name, value)
        mp.delenv("TRIBUTARY_REDIS_URL", raising=False)
        run_pipeline(SourceConfig(**entry), run_id="first")
    with scratch_database("tributary_actions") as meta_url:
        port = free_port()
        env = {
            **os.environ,
            **component_env(
                airflow_home=root / "airflow", meta_url=meta_url, port=port, executor="LocalExecutor", dags_folder=dags
            ),
            **tributary,
        }
        env.pop("TRIBUTARY_REDIS_URL", None)
        procs = AirflowProcesses(env=env, logs=root / "logs")
        http = None
        try:
            procs.start_local_stack(port)
            procs.procs["scheduler"].terminate()  # runs created here stay queued: nothing is synced
            procs.procs.pop("scheduler").wait(timeout=30)
            http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
            http.headers["Authorization"] = "Bearer " + http.get("/auth/token").json()["access_token"]
            procs.wait("the DAG parsed", lambda: http.get(f"/api/v2/dags/{DAG_ID}").status_code == 200)
            yield {"base": f"http://127.0.0.1:{port}", "http": http, "procs": procs, "root": root}
        finally:
            if http is not None:
                http.close()
            procs.stop()


def _runs(http: httpx.Client) -> dict[str, dict[str, Any]]:
    return {r["dag_run_id"]: r for r in http.get(f"/api/v2/dags/{DAG_ID}/dagRuns").json()["dag_runs"]}


def test_each_action_creates_what_airflow_then_shows(stack: dict[str, Any]) -> None:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    http, base = stack["http"], stack["base"]
    artifacts = Path(os.environ.get("TRIBUTARY_ARTIFACTS") or stack["root"] / "artifacts")
    browser = Browser(binary, width=1280, height=900)
    try:
        page = "/tributary/sources/files:ops"
        browser.goto(f"{base}/auth/token/login?next={page}", ready="!!document.querySelector('#sync-now')")
        assert browser.eval("document.documentElement.scrollWidth") <= 1280
        browser.screenshot(artifacts / "source-actions.png")

        def click_and_read(selector: str) -> str:
            # the page before the click may show the last action's result: wait for a new one
            browser.eval("document.querySelector('#action-result')?.remove()")
            browser.eval(f"document.querySelector({selector!r}).click()")
            browser.wait_for("!!document.querySelector('#action-result') && document.readyState === 'complete'")
            return browser.eval("document.querySelector('#created-run')?.innerText || ''")

        created = click_and_read("#sync-now")
        assert created and _runs(http)[created]["conf"] == {}
        browser.eval("document.querySelector('#full-resync').click()")
        browser.wait_for("!!document.querySelector('#confirm')")
        assert "every item" in browser.eval("document.querySelector('#confirm-text').innerText")
        created = click_and_read("#confirm")
        assert created and _runs(http)[created]["conf"] == {"full_resync": True}
        created = click_and_read("#resync-failed")
        assert created and _runs(http)[created]["conf"] == {"only_keys": ["bad.pdf"]}
        browser.screenshot(artifacts / "source-action-created.png")
        click_and_read("#pause")
        assert http.get(f"/api/v2/dags/{DAG_ID}").json()["is_paused"] is True
        assert browser.eval("!!document.querySelector('#resume')")
        click_and_read("#resume")
        assert http.get(f"/api/v2/dags/{DAG_ID}").json()["is_paused"] is False
    finally:
        browser.close()
