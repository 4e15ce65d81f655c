"""The receiver inside a real Airflow API server (``airflow api-server`` on 127.0.0.1, Airflow's
own login in force: no all-admins shortcut): callbacks are taken without a login and stored in
the state database, while the audit app beside it and Airflow's API still need one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from include.stores.events import EventStore
from tests.events.support import KEY, TOKEN, YUQUE_SECRET, challenge, feishu_event, feishu_request, yuque_body
from tests.support.airflow import write_sources
from tests.support.airflow_stack import AirflowProcesses, component_env
from tests.support.postgres import scratch_database
from tests.support.server import free_port

pytestmark = [pytest.mark.airflow, pytest.mark.postgres, pytest.mark.slow]

SOURCES = [
    {"kind": "feishu", "name": "docs", "conn_id": "feishu_docs", "schedule": None,
     "options": {"folders": ["fld1"]}, "events": {"mode": "callback"}},
    {"kind": "yuque", "name": "kb", "conn_id": "yuque_kb", "schedule": None,
     "options": {"namespaces": ["alice/kb"]}, "events": {"mode": "callback"}},
]  # fmt: skip


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(base URL, state URL) of an API server with the Tributary plugin loaded."""
    root = tmp_path_factory.mktemp("events-api")
    (root / "dags").mkdir()
    state_url = f"sqlite:///{root / 'tributary' / 'state.db'}"
    port = free_port()
    with scratch_database("tributary_events") as meta_url:
        env = {
            **os.environ,
            **component_env(
                airflow_home=root / "airflow", meta_url=meta_url, port=port, executor="LocalExecutor",
                dags_folder=root / "dags",
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "TRIBUTARY_HOME": str(root / "tributary"),
            "TRIBUTARY_STATE_URL": state_url,
            "TRIBUTARY_SOURCES": str(write_sources(root / "sources.yaml", SOURCES)),
            "AIRFLOW_CONN_FEISHU_DOCS": json.dumps(
                {"conn_type": "feishu", "login": "cli_a1b2c3d4e5f6", "password": "app-secret-0123",
                 "extra": {"verification_token": TOKEN, "encrypt_key": KEY}}
            ),
            "AIRFLOW_CONN_YUQUE_KB": json.dumps(
                {"conn_type": "yuque", "password": "yuque-token-0123", "extra": {"webhook_secret": YUQUE_SECRET}}
            ),
        }  # fmt: skip
        env.pop("TRIBUTARY_REDIS_URL", None)
        (root / "tributary").mkdir()
        procs = AirflowProcesses(env=env, logs=root / "logs")
        try:
            procs.logs.mkdir(parents=True, exist_ok=True)
            migrate = subprocess.run(
                [sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True, timeout=400
            )
            assert migrate.returncode == 0, migrate.stderr[-3000:]
            procs.start("api-server", "api-server", "-H", "127.0.0.1", "-p", str(port))
            base = f"http://127.0.0.1:{port}"
            with httpx.Client(base_url=base, timeout=30) as http:
                procs.wait("the API server", lambda: http.get("/api/v2/version").status_code == 200)
            yield base, state_url
        finally:
            procs.stop()


def test_callbacks_need_no_login_and_are_stored(api: tuple[str, str]) -> None:
    base, state_url = api
    now = time.time()
    with httpx.Client(base_url=base, timeout=30) as http:
        body, headers = feishu_request(challenge())
        resp = http.post("/tributary/events/feishu/docs", content=body, headers=headers)
        assert (resp.status_code, resp.json()) == (200, {"challenge": "ajls384kdjx98XX"})
        body, headers = feishu_request(
            feishu_event("drive.file.edit_v1", "doxcnLive", event_id="live-1", create_time=now), timestamp=now
        )
        resp = http.post("/tributary/events/feishu/docs", content=body, headers=headers)
        assert resp.status_code == 200, resp.text
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(now))
        resp = http.post(f"/tributary/events/yuque/kb?secret={YUQUE_SECRET}", content=yuque_body(updated_at=stamp))
        assert resp.status_code == 200, resp.text
        forged = http.post("/tributary/events/yuque/kb?secret=guess", content=yuque_body(updated_at=stamp))
        assert (forged.status_code, forged.json()) == (401, {"detail": "bad_secret"})
    store = EventStore(state_url)
    try:
        feishu, yuque = store.stats("feishu:docs"), store.stats("yuque:kb")
    finally:
        store.close()
    assert feishu.received == 1 and feishu.last_event_type == "drive.file.edit_v1"
    assert yuque.received == 1 and yuque.refused == {"bad_secret": 1}


def test_nothing_else_is_open(api: tuple[str, str]) -> None:
    base, _ = api
    with httpx.Client(base_url=base, timeout=30, follow_redirects=False) as http:
        for method, path in [
            ("GET", "/tributary/events/feishu/docs"),
            ("POST", "/tributary/events/feishu/nosuch"),
            ("GET", "/tributary/events/"),
            ("GET", "/tributary/events/docs"),
        ]:
            resp = http.request(method, path)
            assert (resp.status_code, resp.json()) == (404, {"detail": "Not Found"}), (method, path)
        # the audit app beside it still needs a login: JSON 401, a browser sent to the login page
        assert http.get("/tributary/api/runs").status_code == 401
        page = http.get("/tributary/", headers={"Accept": "text/html"})
        assert page.status_code == 303 and "login" in page.headers["location"]
        assert http.get("/tributary/sources/feishu:docs").status_code == 401
        assert http.get("/api/v2/dags").status_code in (401, 403)
