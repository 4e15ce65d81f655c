"""Fixtures: a Feishu simulator on a real socket, client settings, the Airflow connection."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from cryptography.fernet import Fernet

from plugins.connectors.feishu.client import FeishuClient, FeishuSettings
from tests.simulators.feishu import FeishuSimulator
from tests.support.server import serve_asgi


@pytest.fixture
def sim() -> FeishuSimulator:
    # A fresh app id per test: token caches (Redis and in-process) are keyed by app id.
    return FeishuSimulator(
        app_id=f"cli_{uuid.uuid4().hex[:12]}", app_secret="s3cret-" + uuid.uuid4().hex, export_pending_polls=1
    )


@pytest.fixture
def sim_url(sim: FeishuSimulator) -> Iterator[str]:
    with serve_asgi(sim.app) as url:
        yield url


@pytest.fixture
def settings(sim: FeishuSimulator, sim_url: str) -> FeishuSettings:
    return FeishuSettings(app_id=sim.app_id, app_secret=sim.app_secret, host=sim_url, max_attempts=3)


@pytest.fixture
def client(settings: FeishuSettings) -> Iterator[FeishuClient]:
    with FeishuClient(settings) as c:
        yield c


@pytest.fixture
def secret_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """A Fernet key in TRIBUTARY_SECRET_KEY: user mode keeps its refresh chain in the state DB."""
    key = Fernet.generate_key().decode()
    monkeypatch.setenv("TRIBUTARY_SECRET_KEY", key)
    return key


@pytest.fixture
def feishu_conn(sim: FeishuSimulator, sim_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """``feishu_default`` as an Airflow connection from the environment (JSON form)."""
    conn = {"conn_type": "http", "login": sim.app_id, "password": sim.app_secret, "host": sim_url}
    monkeypatch.setenv("AIRFLOW_CONN_FEISHU_DEFAULT", json.dumps(conn))
    return "feishu_default"
