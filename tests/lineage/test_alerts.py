"""Alerting against a real webhook receiver on 127.0.0.1, named by an Airflow Connection.

In real Airflow (dag.test()): a failed run posts exactly one Slack-compatible summary, and
nothing when there is no connection; a run that *succeeds* with failed items above the source's
threshold posts the same kind of summary from its summary task. In-process (the same
``finish_stage``): the run that quarantines an item says so, once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI, Request

from include.config import SourceConfig
from include.stores import open_state_store
from plugins.connectors.base import validate_source_options
from plugins.engine import run_pipeline
from plugins.engine.alerts import failed_item_breaches, resolve_webhook_url, slack_payload
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

    # a run that reached nothing: its reasons are in the message, its counts without the noise
    summary |= {
        "counts": {"new": 0, "source_stats": {"pages": 0}, "reasons": {"connect": 1}},
        "reasons": {"connect": 1, "robots_unreachable": 1},
        "why": "nothing was reached",
    }
    payload = slack_payload(summary)
    assert "reasons: connect 1, robots_unreachable 1 (nothing was reached)" in payload["text"]
    assert "counts: nothing done" in payload["text"] and "source_stats" not in payload["text"]
    assert payload["blocks"][2]["text"]["text"].startswith("*Reasons*\nconnect 1")


# --------------------------------------------------------------- runs that succeed, but not quite

BROKEN_PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> garbage, no xref, no trailer\n"


def _hook(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = {"conn_type": "http", "extra": {"webhook_url": f"{url}/hooks/T9/B9/partial"}}
    monkeypatch.setenv("AIRFLOW_CONN_TRIBUTARY_ALERTS", json.dumps(conn))


def _folder(tmp_path: Path, good: int, broken: int) -> Path:
    root = tmp_path / "share"
    root.mkdir()
    for n in range(good):
        (root / f"note{n:02d}.md").write_text(f"# Note {n}\n\nAbout estuary {n}.\n", encoding="utf-8")
    for n in range(broken):
        (root / f"broken{n:02d}.pdf").write_bytes(BROKEN_PDF + str(n).encode())
    return root


def _source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, root: Path, **options) -> SourceConfig:
    entry = {"kind": "files", "name": "partial", "schedule": None, "options": {"root": str(root), **options}}
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "sources.yaml", [entry])))
    monkeypatch.setenv("TRIBUTARY_TASK_RETRIES", "0")
    return SourceConfig.model_validate(entry)


def test_success_with_many_failed_items_alerts_from_the_summary_task(
    tributary_home: Path, tmp_path: Path, receiver, monkeypatch
) -> None:
    url, received = receiver
    _hook(url, monkeypatch)
    _source(tmp_path, monkeypatch, _folder(tmp_path, good=3, broken=3))
    dr = run_dag("sync_files_partial")
    assert str(dr.state).endswith("success")  # one bad document never fails a batch ...
    store = open_state_store()
    try:
        run = store.runs("files:partial", limit=1)[0]
    finally:
        store.close()
    assert run["status"] == "partial" and run["counts"]["failed"] == 3 and run["counts"]["new"] == 3

    assert len(received) == 1, received  # ... but half the documents failing is not silent
    assert received[0]["token"] == "T9/B9/partial"
    body = received[0]["body"]
    text = body["text"]
    assert "files:partial succeeded with 3 of 6 attempted items failed (50%" in text
    assert "alert_failed_share=0.25" in text and "failed=3" in text
    assert "broken00.pdf" in text and "broken02.pdf" in text
    assert f"/tributary/runs/{dr.run_id.replace(':', '%3A').replace('+', '%2B')}" in text
    header = body["blocks"][0]["text"]["text"]
    assert header.startswith(":large_orange_circle:") and "files:partial" in header
    fields = {f["text"].split("\n")[0]: f["text"].split("\n", 1)[1] for f in body["blocks"][1]["fields"]}
    assert fields["*Source*"] == "files:partial" and "3 of 6 attempted" in fields["*Outcome*"]
    # the reasons the run counted get a section of their own, above the first errors
    assert [b["type"] for b in body["blocks"]] == ["header", "section", "section", "section", "context"]
    assert body["blocks"][2]["text"]["text"].startswith("*Reasons*\nparse:")


def test_thresholds_are_per_source_options(tributary_home: Path, tmp_path: Path, receiver, monkeypatch) -> None:
    url, received = receiver
    _hook(url, monkeypatch)
    root = _folder(tmp_path, good=3, broken=3)
    # the share rule off, the count rule above what failed: a quiet success
    quiet = run_pipeline(_source(tmp_path, monkeypatch, root, alert_failed_share=None, alert_failed_items=4))
    assert quiet.counts["failed"] == 3 and received == []
    (tmp_path / "sources.yaml").unlink()
    for path in root.glob("broken*.pdf"):  # a new version of each: fetched and failing again
        path.write_bytes(BROKEN_PDF + b"v2" + path.name.encode())
    loud = run_pipeline(_source(tmp_path, monkeypatch, root, alert_failed_share=None, alert_failed_items=3))
    assert loud.counts["failed"] == 3
    [alert] = received
    assert "3 failed items (alert_failed_items=3)" in alert["body"]["text"]


def test_newly_quarantined_items_alert_once(tributary_home: Path, tmp_path: Path, receiver, monkeypatch) -> None:
    url, received = receiver
    _hook(url, monkeypatch)
    # one broken file among 19 good ones: 5% failed, one item: below both failure thresholds
    src = _source(tmp_path, monkeypatch, _folder(tmp_path, good=19, broken=1), quarantine_after=2)
    first = run_pipeline(src)
    assert first.counts["failed"] == 1 and received == []  # one failure is one bad document
    second = run_pipeline(src)  # never indexed, so fetched again: fails again, streak 2
    assert second.counts["failed"] == 1
    [alert] = received
    text = alert["body"]["text"]
    assert "succeeded with 1 newly quarantined item" in text
    assert "Newly quarantined* (1," in text and "broken00.pdf: parse:" in text
    assert [b["type"] for b in alert["body"]["blocks"]] == [
        "header",
        "section",
        "section",  # reasons
        "section",
        "section",
        "context",
    ]
    third = run_pipeline(src)  # quarantined now: skipped, and no second alert about it
    assert third.counts["failed"] == 0 and third.counts["skipped"] == 1
    assert len(received) == 1
    store = open_state_store()
    try:
        skipped = store.run_items(third.run_id, action="skipped", source="files:partial")
    finally:
        store.close()
    assert [(i["item_key"], i["reason"]) for i in skipped] == [("broken00.pdf", "quarantined after 2 failures")]


def test_failed_item_thresholds() -> None:
    assert failed_item_breaches({"failed": 0, "fetched": 0}, {}) == []
    assert failed_item_breaches({"failed": 1, "fetched": 0}, {}) == []  # one bad document
    assert failed_item_breaches({"failed": 2, "fetched": 6}, {}) == [
        "2 of 8 attempted items failed (25%, alert_failed_share=0.25)"
    ]
    assert failed_item_breaches({"failed": 9, "fetched": 991}, {}) == []
    assert failed_item_breaches({"failed": 10, "fetched": 990}, {}) == ["10 failed items (alert_failed_items=10)"]
    off = {"alert_failed_items": None, "alert_failed_share": None}
    assert failed_item_breaches({"failed": 500, "fetched": 0}, off) == []
    assert failed_item_breaches({"failed": 50, "fetched": 0, "dry_run": True}, {}) == []


def test_alert_options_are_accepted_and_checked_for_every_kind() -> None:
    for kind, options in (
        ("files", {"root": "/tmp"}),
        ("web", {"seeds": ["https://example.org/"]}),
    ):
        ok = SourceConfig(kind=kind, name="x", options={**options, "alert_failed_items": 3, "alert_failed_share": 0.5})
        validate_source_options(ok)
        bad = SourceConfig(kind=kind, name="x", options={**options, "alert_failed_share": 1.5})
        with pytest.raises(ValueError, match="alert_failed_share"):
            validate_source_options(bad)
