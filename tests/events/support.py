"""Real-shaped Feishu and Yuque callbacks, built here independently of the code under test
(padding through ``cryptography``'s PKCS7 padder, not the receiver's unpadding), and a receiver
app wired to an in-test store, sources, Connections and clock."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from include.config import SourceConfig
from include.connections import ConnectionRecord
from include.ratelimit import LocalStore, RateLimiter
from include.stores.events import EventStore
from plugins.tributary_airflow.events import Intake, create_events_app

NOW = 1_790_000_000.0  # a fixed "now" (2026-09-21): every timestamp below is relative to it
APP_ID = "cli_a1b2c3d4e5f6"
TOKEN = "vt-0123456789abcdefghijklmnopqrstu"
KEY = "ek-ZYXWVUTSRQPONMLKJIHGFEDCBA9876"
YUQUE_SECRET = "ys-5f0c2b8e9d7a4c3b"


def encrypt(plain: bytes, key: str, iv: bytes | None = None) -> str:
    """``base64(iv + AES-256-CBC(PKCS7(plain)))`` with key SHA-256(key), as Feishu sends it."""
    iv = iv or os.urandom(16)
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plain) + padder.finalize()
    enc = Cipher(algorithms.AES(hashlib.sha256(key.encode()).digest()), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + enc.update(padded) + enc.finalize()).decode()


def encrypt_raw(padded: bytes, key: str, iv: bytes = b"\x00" * 16) -> str:
    """Encrypt already padded bytes (to send a bad pad under the right key)."""
    enc = Cipher(algorithms.AES(hashlib.sha256(key.encode()).digest()), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + enc.update(padded) + enc.finalize()).decode()


def feishu_event(
    event_type: str = "drive.file.edit_v1",
    file_token: str = "doxcnAbCdEfGhIjKlMnOpQrStUv",
    *,
    token: str = TOKEN,
    event_id: str | None = None,
    create_time: float = NOW,
    app_id: str = APP_ID,
) -> dict[str, Any]:
    """A schema 2.0 drive event as the docs' examples show it."""
    event: dict[str, Any] = {
        "file_type": "docx",
        "file_token": file_token,
        "operator_id": {"open_id": "ou_84aad35d084aa403a838cf73ee18467", "union_id": "on_8ed6", "user_id": "e33g"},
        "subscriber_id_list": [{"open_id": "ou_9bc587355789fc049904ae7c73619b89"}],
    }
    if event_type.endswith("created_in_folder_v1"):
        event["folder_token"] = "fldcnQBonfpyHVlhQMedDztWcIb"
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id or uuid.uuid4().hex,
            "event_type": event_type,
            "create_time": str(int(create_time * 1000)),
            "token": token,
            "app_id": app_id,
            "tenant_key": "2ca1d211f64f6438",
        },
        "event": event,
    }


def challenge(token: str = TOKEN, value: str = "ajls384kdjx98XX") -> dict[str, Any]:
    return {"challenge": value, "token": token, "type": "url_verification"}


def sign(body: bytes, key: str, timestamp: float = NOW, nonce: str = "13a7b9f1") -> dict[str, str]:
    ts = str(int(timestamp))
    digest = hashlib.sha256((ts + nonce + key).encode() + body).hexdigest()
    return {"X-Lark-Request-Timestamp": ts, "X-Lark-Request-Nonce": nonce, "X-Lark-Signature": digest}


def feishu_request(
    payload: dict[str, Any], *, key: str | None = KEY, encrypted: bool = True, timestamp: float = NOW
) -> tuple[bytes, dict[str, str]]:
    """(body, headers) of a callback: encrypted and signed with ``key`` (plain when no key)."""
    plain = json.dumps(payload).encode()
    if key is None:
        return plain, {"Content-Type": "application/json"}
    body = json.dumps({"encrypt": encrypt(plain, key)}).encode() if encrypted else plain
    return body, {"Content-Type": "application/json", **sign(body, key, timestamp)}


def yuque_body(subject: str = "update", *, doc_id: int = 34, book_id: int = 12, updated_at: str | None = None) -> bytes:
    """A Yuque webhook body: the doc's detail plus its subject type (public consumers' shape)."""
    when = updated_at or "2026-09-21T14:13:20.000Z"  # = NOW
    data: dict[str, Any] = {
        "id": doc_id,
        "slug": "onboarding",
        "title": "入职指南",
        "book_id": book_id,
        "book": {"id": book_id, "name": "知识库", "slug": "kb"},
        "user": {"login": "alice", "name": "Alice"},
        "path": "alice/kb/onboarding",
        "format": "lake",
        "body": "# 入职指南",
        "created_at": "2026-01-01T00:00:00.000Z",
        "updated_at": when,
        "content_updated_at": when,
        "webhook_subject_type": subject,
        "action_type": subject,
    }
    if subject == "delete":
        data["deleted_at"] = when
    return json.dumps({"data": data}, ensure_ascii=False).encode()


class FrozenClock(LocalStore):
    """The limiter's clock stopped: every request of a test is in the same minute, however slow
    the machine is (no test here depends on how fast it runs)."""

    @staticmethod
    def now() -> float:
        return NOW * 1_000_000


@dataclass
class Receiver:
    app: Any
    intake: Intake
    store: EventStore
    connections_read: list[str]


def receiver(
    tmp: Path,
    *,
    sources: Sequence[SourceConfig] | None = None,
    extras: dict[str, dict[str, Any]] | None = None,
    clock: float = NOW,
    limiter: RateLimiter | None = None,
) -> Receiver:
    """The receiver app over a SQLite store in ``tmp``; default sources ``feishu:docs`` (key and
    token) and ``yuque:kb`` (URL secret), both ``events.mode: callback``."""
    tmp.mkdir(parents=True, exist_ok=True)
    store = EventStore(f"sqlite:///{tmp / 'state.db'}")
    conns = (
        extras
        if extras is not None
        else {
            "feishu_docs": {"verification_token": TOKEN, "encrypt_key": KEY},
            "yuque_kb": {"webhook_secret": YUQUE_SECRET},
        }
    )
    read: list[str] = []

    def connection(conn_id: str) -> ConnectionRecord:
        read.append(conn_id)
        if conn_id not in conns:
            raise LookupError(conn_id)
        return ConnectionRecord(conn_id=conn_id, login=APP_ID, password="secret", extra=conns[conn_id])

    configured = list(sources) if sources is not None else default_sources()
    intake = Intake(
        store=store,
        limiter=limiter or RateLimiter("events-test", store=FrozenClock()),
        sources=lambda: configured,
        connection=connection,
        clock=lambda: clock,
    )
    return Receiver(create_events_app(intake), intake, store, read)


def default_sources(**events: Any) -> list[SourceConfig]:
    ev = {"mode": "callback", **events}
    return [
        SourceConfig(kind="feishu", name="docs", conn_id="feishu_docs", options={"folders": ["fld1"]}, events=ev),
        SourceConfig(kind="yuque", name="kb", conn_id="yuque_kb", options={"namespaces": ["alice/kb"]}, events=ev),
        SourceConfig(kind="feishu", name="quiet", conn_id="feishu_docs", options={"folders": ["fld2"]}),
    ]
