"""Issue 21 point 3: connectors depend on the ground only; credentials arrive as typed records.

``include.connections`` reads Airflow's secrets backends (here the ``AIRFLOW_CONN_<ID>`` variable
backend, a real one) into a :class:`ConnectionRecord` that keeps its secrets out of ``repr``; it
loads Airflow only when a connection is read. The Airflow hooks build the same settings as the
connectors, and the web hook's credentials go only to the source's own origins.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from include.connections import ConnectionRecord, aget_connection, get_connection
from plugins.tributary_airflow.hooks.feishu import FeishuHook
from plugins.tributary_airflow.hooks.web_auth import WebAuthHook

ROOT = Path(__file__).resolve().parents[2]
SECRET = "pw-7c1d0e99ab"


@pytest.fixture
def site_conn(monkeypatch: pytest.MonkeyPatch) -> str:
    conn = {
        "conn_type": "http",
        "login": "reader",
        "password": SECRET,
        "host": "docs.example.org",
        "port": 8443,
        "extra": {"headers": {"X-Api-Key": "key-" + SECRET}, "cookies": {"session": "s-" + SECRET}},
    }
    monkeypatch.setenv("AIRFLOW_CONN_DOCS_SITE", json.dumps(conn))
    return "docs_site"


def test_a_connection_is_read_into_a_record_without_its_secrets_in_repr(site_conn: str) -> None:
    record = get_connection(site_conn)
    assert (record.conn_id, record.conn_type, record.host, record.port, record.login) == (
        "docs_site",
        "http",
        "docs.example.org",
        8443,
        "reader",
    )
    assert record.password == SECRET and record.extra["headers"] == {"X-Api-Key": "key-" + SECRET}
    assert SECRET not in repr(record) and SECRET not in str(record)
    assert asyncio.run(aget_connection(site_conn)) == record  # the triggerer's non-blocking read


def test_a_missing_connection_is_an_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_NO_SUCH_CONN", raising=False)
    with pytest.raises(Exception, match="no_such_conn") as info:
        get_connection("no_such_conn")
    assert type(info.value).__name__ == "AirflowNotFoundException"


def test_importing_the_ground_and_the_connectors_loads_no_airflow() -> None:
    """Airflow is loaded when a credential is needed, never by importing the ground's Connections
    lookup or a connector (the engine and the CLI run them without Airflow's machinery)."""
    code = (
        "import sys, include.connections, plugins.connectors.web.connector, plugins.connectors.files.connector;"
        "print(sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_web_hook_sends_the_connection_credentials_only_to_the_source_origins(site_conn: str) -> None:
    hook = WebAuthHook(site_conn, seeds=["https://docs.example.org:8443/guide/"])
    sent = hook.headers_for("https://docs.example.org:8443/guide/page.html")
    assert sent["X-Api-Key"] == "key-" + SECRET and sent["Cookie"] == "session=s-" + SECRET
    assert sent["Authorization"].startswith("Basic ")
    for elsewhere in (
        "https://evil.example.net/",  # another host
        "http://docs.example.org:8443/guide/",  # down to plain http
        "https://docs.example.org:9000/",  # another port: another service
    ):
        assert hook.headers_for(elsewhere) == {}, elsewhere
    assert WebAuthHook(site_conn).headers_for("https://docs.example.org:8443/") == {}  # no seeds: nowhere


def test_the_feishu_hook_builds_the_connectors_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from plugins.connectors.feishu.connection import settings_from_conn

    conn = {"conn_type": "http", "login": "cli_app", "password": SECRET, "host": "https://open.larksuite.com"}
    monkeypatch.setenv("AIRFLOW_CONN_LARK_APP", json.dumps(conn))
    settings = FeishuHook("lark_app", timeout=7.0).get_settings()
    assert settings.base_url == "https://open.larksuite.com/open-apis" and settings.timeout == 7.0
    assert repr(settings) == repr(settings_from_conn(get_connection("lark_app"), timeout=7.0))
    assert SECRET not in repr(settings)
    with pytest.raises(ValueError, match="app id as login") as info:
        settings_from_conn(ConnectionRecord(conn_id="bare", password=SECRET))
    assert SECRET not in str(info.value)
