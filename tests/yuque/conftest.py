"""Fixtures: a simulated Yuque space served on 127.0.0.1, and the Airflow Connection for it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from include.config import SourceConfig
from plugins.connectors.yuque.client import YuqueClient
from tests.simulators.yuque import YuqueSimulator
from tests.support.server import serve_asgi

TOKEN = "alice-token-0123456789"
TEAM_TOKEN = "acme-team-token-0123456789"
FAST = {"backoff_initial": 0.01, "backoff_max": 0.05, "max_retry_after": 0.05}


@pytest.fixture
def sim() -> YuqueSimulator:
    space = YuqueSimulator()
    space.add_account("alice", token=TOKEN)
    space.add_account("acme", group=True, token=TEAM_TOKEN, members=("alice",))
    return space


@pytest.fixture
def yuque_url(sim: YuqueSimulator) -> Iterator[str]:
    with serve_asgi(sim.app) as url:
        yield url


@pytest.fixture
def yuque_conn(yuque_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """``yuque_default`` as an Airflow Connection in the environment (JSON form)."""
    conn = {
        "conn_type": "yuque",
        "host": yuque_url,
        "password": TOKEN,
        "extra": {**FAST, "user_agent": "tributary-tests"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_YUQUE_DEFAULT", json.dumps(conn))
    return yuque_url


def make_client(url: str, token: str = TOKEN, **kw) -> YuqueClient:
    return YuqueClient(url, token, **{**FAST, **kw})


def yuque_source(name: str = "kb", **options) -> SourceConfig:
    return SourceConfig(kind="yuque", name=name, conn_id="yuque_default", options=options)
