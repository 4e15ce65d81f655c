"""Failure alerting in real Airflow (dag.test()): a failed run posts exactly one Slack-compatible
summary to a local webhook named by an Airflow Connection, and nothing when there is none."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI, Request

from include.alerts import resolve_webhook_url, slack_payload
from include.stores import open_state_store
from tests.support.airflow import run_dag, write_sources
from tests.support.server import serve_asgi

pytestmark = pytest.mark.airflow


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict]]]:
    received: list[dict] = []
    app = FastAPI()

    @app.post("/hooks/{token:path}")
    async def hook(token: str, request: Request) -> dict:
        received.append({"token": token, "body": await request.json()})
        return {"ok": True}

    with serve_asgi(app) as url:
        yield url, received


@pytest.fixture
def broken_source(tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "share"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha\n", encoding="utf-8")
    sources = [{"kind": "files", "name": "alerting", "schedule": None, "options": {"root": str(root)}}]
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "sources.yaml", sources)))
    monkeypatch.setenv("TRIBUTARY_TASK_RETRIES", "0")
    monkeypatch.delenv("AIRFLOW_CONN_TRIBUTARY_ALERTS", raising=False)
    return root


def _last_run() -> dict:
    store = open_state_store()
    try:
        return store.runs("files:alerting", limit=1)[0]
    finally:
        store.close()


def test_failed_run_posts_exactly_one_summary(broken_source: Path, receiver, monkeypatch) -> None:
    url, received = receiver
    # Slack provider shape: base URL in host, the secret path in password
    conn = {"conn_type": "http", "host": f"{url}/hooks", "password": "T000/B000/secret"}
    monkeypatch.setenv("AIRFLOW_CONN_TRIBUTARY_ALERTS", json.dumps(conn))
    first = run_dag("sync_files_alerting")
    assert str(first.state).endswith("success")
    assert received == []  # success is silent

    for path in broken_source.iterdir():
        path.unlink()
    broken_source.rmdir()  # discover refuses a missing root rather than deleting everything
    dr = run_dag("sync_files_alerting")
    assert str(dr.state).endswith("failed")

    assert len(received) == 1, received
    assert received[0]["token"] == "T000/B000/secret"
    body = received[0]["body"]
    run = _last_run()
    assert run["run_id"] == dr.run_id and run["status"] == "failed"
    assert "discover" in run["error"] and "FileNotFoundError" in run["error"]
    text = body["text"]
    assert "files:alerting" in text and "failed at discover" in text
    assert "FileNotFoundError" in text and "is not a directory" in text
    assert f"/dags/sync_files_alerting/runs/{dr.run_id.replace(':', '%3A').replace('+', '%2B')}" in text
    header = body["blocks"][0]["text"]["text"]
    assert header.startswith(":red_circle:") and "discover" in header
    fields = {f["text"].split("\n")[0]: f["text"].split("\n", 1)[1] for f in body["blocks"][1]["fields"]}
    assert fields["*Source*"] == "files:alerting" and fields["*Failed stage*"] == "discover"


def test_no_connection_no_post(broken_source: Path, receiver) -> None:
    _, received = receiver
    assert resolve_webhook_url() is None
    for path in broken_source.iterdir():
        path.unlink()
    broken_source.rmdir()
    dr = run_dag("sync_files_alerting")
    assert str(dr.state).endswith("failed")
    assert received == []
    assert _last_run()["status"] == "failed"


def test_webhook_url_shapes(monkeypatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_TRIBUTARY_ALERTS",
        json.dumps({"conn_type": "http", "extra": {"webhook_url": "http://127.0.0.1:9/x"}}),
    )
    assert resolve_webhook_url() == "http://127.0.0.1:9/x"
    monkeypatch.setenv(
        "AIRFLOW_CONN_TRIBUTARY_ALERTS",
        json.dumps({"conn_type": "http", "host": "127.0.0.1", "schema": "http", "port": 9, "password": "/a/b"}),
    )
    assert resolve_webhook_url() == "http://127.0.0.1:9/a/b"
    summary = {
        "source": "web:x",
        "dag_id": "sync_web_x",
        "run_id": "r1",
        "failed_stage": "fetch[3]",
        "reason": None,
        "counts": {"new": 2},
        "errors": ["e"] * 5,
        "error_count": 9,
        "run_url": "http://a/r",
        "audit_url": "http://a/t",
    }
    payload = slack_payload(summary)
    assert "and 4 more" in payload["text"] and "new=2" in payload["text"]
    assert [b["type"] for b in payload["blocks"]] == ["header", "section", "section", "context"]
