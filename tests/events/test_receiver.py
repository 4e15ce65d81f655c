"""The receiver app (FastAPI TestClient, and raw ASGI where bytes read are counted): store then
200, duplicates 200 and counted, refusals counted by reason, nothing said about other sources."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from include.config import SourceConfig
from include.ratelimit import RateLimiter
from tests.events.support import (
    KEY,
    NOW,
    TOKEN,
    YUQUE_SECRET,
    challenge,
    default_sources,
    feishu_event,
    feishu_request,
    receiver,
    yuque_body,
)


def _post_feishu(client: TestClient, payload: dict[str, Any], name: str = "docs", **kw: Any):
    body, headers = feishu_request(payload, **kw)
    return client.post(f"/feishu/{name}", content=body, headers=headers)


def test_feishu_event_is_stored_then_answered_and_a_redelivery_is_a_counted_duplicate(tmp_path: Path) -> None:
    r = receiver(tmp_path)
    client = TestClient(r.app)
    payload = feishu_event("drive.file.edit_v1", "doxcnEdited", event_id="ev-7")
    first = _post_feishu(client, payload)
    assert first.status_code == 200 and first.json() == {"msg": "success", "duplicate": False}
    again = _post_feishu(client, payload)  # Feishu's retry of the same event (new nonce/signature, same id)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    stats = r.store.stats("feishu:docs")
    assert (stats.received, stats.pending, stats.duplicates) == (1, 1, 1)
    assert stats.last_event_type == "drive.file.edit_v1"


def test_challenge_is_answered_and_not_stored(tmp_path: Path) -> None:
    r = receiver(tmp_path)
    resp = _post_feishu(TestClient(r.app), challenge(value="c-123"))
    assert resp.status_code == 200 and resp.json() == {"challenge": "c-123"}
    assert r.store.stats("feishu:docs").received == 0


def test_yuque_webhook_with_its_secret_is_stored(tmp_path: Path) -> None:
    r = receiver(tmp_path)
    client = TestClient(r.app)
    ok = client.post(f"/yuque/kb?secret={YUQUE_SECRET}", content=yuque_body("publish"))
    assert ok.status_code == 200, ok.text
    comment = client.post(f"/yuque/kb?secret={YUQUE_SECRET}", content=yuque_body("comment_create"))
    assert comment.status_code == 200 and comment.json() == {"msg": "ignored"}
    wrong = client.post("/yuque/kb?secret=guess", content=yuque_body("update"))
    missing = client.post("/yuque/kb", content=yuque_body("update"))
    assert (wrong.status_code, wrong.json()) == (401, {"detail": "bad_secret"})
    assert missing.status_code == 401
    stats = r.store.stats("yuque:kb")
    assert stats.received == 1 and stats.refused == {"bad_secret": 2}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/feishu/nosuch"),  # not configured
        ("POST", "/feishu/quiet"),  # configured, events off
        ("POST", "/feishu/kb"),  # the Yuque source under the Feishu route
        ("POST", "/yuque/docs?secret=x"),
        ("GET", "/feishu/docs"),
        ("PUT", "/yuque/kb"),
        ("GET", "/"),
        ("GET", "/docs"),
        ("GET", "/openapi.json"),
        ("POST", "/feishu"),
        ("POST", "/feishu/docs/extra"),
    ],
)
def test_everything_else_is_the_same_bare_404(tmp_path: Path, method: str, path: str) -> None:
    r = receiver(tmp_path)
    resp = TestClient(r.app).request(method, path, content=b"{}")
    assert (resp.status_code, resp.json()) == (404, {"detail": "Not Found"})
    assert r.connections_read == []  # not even the Connection was read


@pytest.mark.parametrize(
    ("case", "status", "reason"),
    [
        ("bad_signature", 401, "bad_signature"),
        ("bad_token", 401, "bad_token"),
        ("expired", 403, "expired"),
        ("unknown", 400, "unknown_event_type"),
        ("bad_padding", 400, "bad_encryption"),
        ("other_app", 403, "wrong_source"),
    ],
)
def test_feishu_refusals_are_counted_and_say_one_word(tmp_path: Path, case: str, status: int, reason: str) -> None:
    r = receiver(tmp_path)
    client = TestClient(r.app)
    if case == "bad_signature":
        body, headers = feishu_request(feishu_event())
        resp = client.post("/feishu/docs", content=body, headers={**headers, "X-Lark-Signature": "ab" * 32})
    elif case == "bad_padding":
        body = json.dumps({"encrypt": "A" * 64}).encode()
        _, headers = feishu_request(feishu_event())
        from tests.events.support import sign

        resp = client.post("/feishu/docs", content=body, headers=sign(body, KEY))
    else:
        payload = {
            "bad_token": feishu_event(token="not-" + TOKEN),
            "expired": feishu_event(create_time=NOW + 3600),
            "unknown": feishu_event("im.message.receive_v1"),
            "other_app": feishu_event(app_id="cli_elsewhere"),
        }[case]
        resp = _post_feishu(client, payload)
    assert (resp.status_code, resp.json()) == (status, {"detail": reason})
    stats = r.store.stats("feishu:docs")
    assert stats.refused == {reason: 1} and stats.received == 0


def test_an_event_for_another_source_is_refused_by_that_sources_keys(tmp_path: Path) -> None:
    sources = [
        *default_sources(),
        SourceConfig(kind="feishu", name="other", conn_id="feishu_other", options={"folders": ["f"]},
                     events={"mode": "callback"}),
    ]  # fmt: skip
    extras = {
        "feishu_docs": {"verification_token": TOKEN, "encrypt_key": KEY},
        "feishu_other": {"verification_token": "other-token-000", "encrypt_key": "other-key-000"},
    }
    r = receiver(tmp_path, sources=sources, extras=extras)
    resp = _post_feishu(TestClient(r.app), feishu_event(), name="other")  # signed with docs' key
    assert (resp.status_code, resp.json()) == (401, {"detail": "bad_signature"})
    assert r.store.stats("feishu:other").refused == {"bad_signature": 1}
    assert r.store.stats("feishu:docs").received == 0


def test_missing_connection_is_not_configured(tmp_path: Path) -> None:
    r = receiver(tmp_path, extras={})
    resp = _post_feishu(TestClient(r.app), feishu_event())
    assert (resp.status_code, resp.json()) == (403, {"detail": "not_configured"})


def test_connection_is_read_once_for_many_callbacks(tmp_path: Path) -> None:
    r = receiver(tmp_path)
    client = TestClient(r.app)
    for _ in range(50):
        assert _post_feishu(client, feishu_event()).status_code == 200
    assert r.connections_read == ["feishu_docs"]


def test_a_failing_store_answers_503_so_the_service_retries(tmp_path: Path, monkeypatch) -> None:
    r = receiver(tmp_path)

    def down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("database is down")

    monkeypatch.setattr(r.store, "record", down)
    resp = _post_feishu(TestClient(r.app), feishu_event())
    assert (resp.status_code, resp.json()) == (503, {"detail": "unavailable"})


def test_thousand_events_in_a_burst_limit_counts_and_loses_nothing_below_it(tmp_path: Path) -> None:
    sources = default_sources(max_per_minute=600)
    r = receiver(tmp_path, sources=sources)
    client = TestClient(r.app)
    statuses = [_post_feishu(client, feishu_event(event_id=f"burst-{i}")).status_code for i in range(1000)]
    assert statuses.count(200) == 600 and statuses.count(429) == 400
    assert statuses[:600] == [200] * 600  # every event below the limit was taken
    stats = r.store.stats("feishu:docs")
    assert stats.received == 600 and stats.refused == {"rate_limited": 400}
    # a forger cannot spend the budget of another source, nor does a refusal spend it
    assert client.post(f"/yuque/kb?secret={YUQUE_SECRET}", content=yuque_body()).status_code == 200


def test_duplicates_in_a_burst_are_answered_200_and_counted(tmp_path: Path) -> None:
    r = receiver(tmp_path, sources=default_sources(max_per_minute=10_000))
    client = TestClient(r.app)
    events = [feishu_event(event_id=f"d-{i}") for i in range(100)]
    for round_ in range(3):
        for ev in events:
            assert _post_feishu(client, ev).status_code == 200, round_
    stats = r.store.stats("feishu:docs")
    assert (stats.received, stats.duplicates) == (100, 200)


# ------------------------------------------------------------------------ the 10 MB body
def _drive(app: Any, path: str, headers: list[tuple[bytes, bytes]], total: int, chunk: int) -> tuple[int, int]:
    """Send ``total`` bytes to ``app`` in ``chunk``-byte ASGI messages as the app asks for them;
    -> (status, bytes the app pulled)."""
    pulled = 0
    status: list[int] = []

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        if pulled >= total:
            return {"type": "http.disconnect"}
        n = min(chunk, total - pulled)
        pulled += n
        return {"type": "http.request", "body": b"x" * n, "more_body": pulled < total}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 5555),
        "server": ("127.0.0.1", 80),
    }
    asyncio.run(app(scope, receive, send))
    return status[0], pulled


def test_ten_megabyte_body_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    r = receiver(tmp_path, sources=default_sources(max_body_bytes=65_536))
    ten_mb, chunk = 10 * 1024 * 1024, 16_384
    tracemalloc.start()
    try:
        status, pulled = _drive(r.app, "/feishu/docs", [(b"content-type", b"application/json")], ten_mb, chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status == 413
    assert pulled <= 65_536 + chunk  # stopped one chunk past the cap, not at 10 MB
    assert peak < 2 * 1024 * 1024, peak
    # a declared length over the cap: refused before one byte is read
    status, pulled = _drive(r.app, "/feishu/docs", [(b"content-length", str(ten_mb).encode())], ten_mb, chunk)
    assert (status, pulled) == (413, 0)
    # a Content-Length that lies low changes nothing: the stream itself is capped
    status, pulled = _drive(r.app, "/yuque/kb", [(b"content-length", b"10")], ten_mb, chunk)
    assert status == 401 and pulled == 0  # the Yuque secret is checked before any byte is read
    assert r.store.stats("feishu:docs").refused == {"too_large": 2}


@pytest.mark.redis
def test_with_redis_two_api_server_workers_share_one_budget(tmp_path: Path, redis_url: str) -> None:
    """Two receivers (two API-server workers) over one Redis: 5 a minute in all, not 5 each."""
    workers = []
    for n in range(2):
        limiter = RateLimiter("events", redis_url=redis_url)
        r = receiver(tmp_path / f"w{n}", sources=default_sources(max_per_minute=5), limiter=limiter)
        assert r.intake.limiter.shared
        workers.append(TestClient(r.app))
    statuses = [_post_feishu(workers[i % 2], feishu_event(event_id=f"r-{i}")).status_code for i in range(8)]
    assert statuses.count(200) == 5 and statuses.count(429) == 3
