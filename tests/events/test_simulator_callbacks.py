"""The simulators push real-shaped callbacks (issue 37): checked by a bare receiver that reads
them the way larksuite/oapi-sdk-python's EventDispatcherHandler does (decrypt with SHA-256 of the
Encrypt Key, check the verification token, verify the signature over timestamp + nonce + key +
body), independently of Tributary's own receiver."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.simulators.feishu import FeishuSimulator
from tests.simulators.yuque import YuqueSimulator
from tests.support.server import serve_asgi

KEY, TOKEN = "sim-encrypt-key-0123", "sim-verify-token-0123"
FAST = {"time_scale": 0.001}  # Feishu's 15 s / 5 min / 1 h / 6 h become 15 ms ... 21.6 s


def decrypt(key: str, encrypted: str) -> dict[str, Any]:
    raw = base64.b64decode(encrypted)
    decryptor = Cipher(algorithms.AES(hashlib.sha256(key.encode()).digest()), modes.CBC(raw[:16])).decryptor()
    padded = decryptor.update(raw[16:]) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    return dict(json.loads(unpadder.update(padded) + unpadder.finalize()))


@dataclass
class Receiver:
    """Answers ``statuses`` in turn (then 200); keeps every event it accepted."""

    key: str | None = None
    statuses: list[int] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    bad_signatures: int = 0
    calls: int = 0

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/cb")
        async def callback(request: Request) -> JSONResponse:
            body = await request.body()
            self.calls += 1
            payload = json.loads(body)
            if self.key:
                payload = decrypt(self.key, payload["encrypt"])
            if payload.get("type") == "url_verification":
                assert payload["token"] == TOKEN
                return JSONResponse({"challenge": payload["challenge"]})
            if self.key:
                h = request.headers
                signed = (h["X-Lark-Request-Timestamp"] + h["X-Lark-Request-Nonce"] + self.key).encode() + body
                if hashlib.sha256(signed).hexdigest() != h["X-Lark-Signature"]:
                    self.bad_signatures += 1
                    return JSONResponse({"msg": "bad signature"}, status_code=401)
            if self.statuses:
                return JSONResponse({"msg": "busy"}, status_code=self.statuses.pop(0))
            self.events.append(payload)
            return JSONResponse({"msg": "success"})

        return app


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    rec = Receiver(key=KEY)
    with serve_asgi(rec.app()) as url:
        yield rec, f"{url}/cb"


def _subscribed(sim: FeishuSimulator, kind: str = "docx") -> str:
    token = sim.add(kind, "文档", "", "# 文档\n正文")
    sim.events.subscribed[token] = kind
    return token


def test_feishu_encrypted_events_after_the_challenge_only_for_subscribed_files(
    receiver: tuple[Receiver, str],
) -> None:
    rec, url = receiver
    sim = FeishuSimulator()
    assert sim.events.configure(url, encrypt_key=KEY, verification_token=TOKEN, **FAST)
    watched, other = _subscribed(sim), sim.add("docx", "别的", "", "x")
    sim.edit(watched, "new text")
    sim.edit(other, "not subscribed: no event")
    sim.rename(watched, "新标题")
    sim.share(watched, ("openid", "ou_new"))
    sim.trash(watched)
    assert sim.events.sender is not None and sim.events.sender.idle(10)
    kinds = [e["header"]["event_type"] for e in rec.events]
    assert kinds == [
        "drive.file.edit_v1",
        "drive.file.title_updated_v1",
        "drive.file.permission_member_added_v1",
        "drive.file.trashed_v1",
    ]
    first = rec.events[0]
    assert first["schema"] == "2.0" and first["header"]["token"] == TOKEN and first["header"]["app_id"] == sim.app_id
    assert first["event"]["file_token"] == watched and first["event"]["file_type"] == "docx"
    assert first["header"]["create_time"].isdigit() and len(first["header"]["event_id"]) == 32
    assert rec.bad_signatures == 0
    sim.events.close()


def test_feishu_retries_a_non_200_on_the_documented_schedule_shape(receiver: tuple[Receiver, str]) -> None:
    rec, url = receiver
    rec.statuses = [500, 503]
    sim = FeishuSimulator()
    assert sim.events.configure(url, encrypt_key=KEY, verification_token=TOKEN, **FAST)
    sim.edit(_subscribed(sim), "x")
    assert sim.events.sender is not None and sim.events.sender.idle(10)
    attempts = [(a.attempt, a.status) for a in sim.events.sender.log]
    assert attempts == [(0, 500), (1, 503), (2, 200)]
    assert len(rec.events) == 1
    sim.events.close()


def test_feishu_gives_up_after_four_retries(receiver: tuple[Receiver, str]) -> None:
    rec, url = receiver
    rec.statuses = [500] * 10
    sim = FeishuSimulator()
    assert sim.events.configure(url, encrypt_key=KEY, verification_token=TOKEN, time_scale=0.0001)
    sim.edit(_subscribed(sim), "x")
    assert sim.events.sender is not None and sim.events.sender.idle(20)
    assert [a.attempt for a in sim.events.sender.log] == [0, 1, 2, 3, 4]
    assert sim.events.sender.counters["given_up"] == 1 and rec.events == []
    sim.events.close()


def test_feishu_plain_events_duplicates_and_a_failed_challenge() -> None:
    rec = Receiver()
    with serve_asgi(rec.app()) as base:
        sim = FeishuSimulator()
        assert sim.events.configure(f"{base}/cb", verification_token=TOKEN, duplicates=2, **FAST)
        sim.edit(_subscribed(sim), "x")
        assert sim.events.sender is not None and sim.events.sender.idle(10)
        ids = [e["header"]["event_id"] for e in rec.events]
        assert len(ids) == 3 and len(set(ids)) == 1  # one event, delivered three times
        # a URL that does not echo the challenge is not kept (as the console refuses to save it)
        assert not sim.events.configure(f"{base}/nowhere", verification_token=TOKEN)
        assert sim.events.url is None and sim.events.challenges == [True, False]
        sim.events.close()


def test_feishu_folder_subscription_announces_creations_and_reordering_mixes_order() -> None:
    rec = Receiver()
    with serve_asgi(rec.app()) as base:
        sim = FeishuSimulator()
        folder = sim.add_folder("团队")
        sim.events.subscribed[folder] = "folder"
        assert sim.events.configure(f"{base}/cb", verification_token=TOKEN, reorder_window=0.5, seed=7)
        created = [sim.add("docx", f"文档{i}", folder, "x") for i in range(12)]
        sim.add("docx", "根目录", "", "x")  # not in the subscribed folder: no event
        assert sim.events.sender is not None and sim.events.sender.idle(10)
        got = [e["event"]["file_token"] for e in rec.events]
        assert sorted(got) == sorted(created) and got != created
        assert {e["header"]["event_type"] for e in rec.events} == {"drive.file.created_in_folder_v1"}
        assert all(e["event"]["folder_token"] == folder for e in rec.events)
        sim.events.close()


def test_yuque_webhook_publish_update_delete() -> None:
    rec = Receiver()
    with serve_asgi(rec.app()) as base:
        sim = YuqueSimulator()
        sim.add_account("team", group=True)
        repo, quiet = sim.add_repo("team", "kb"), sim.add_repo("team", "other")
        sim.webhooks.configure(repo, f"{base}/cb?secret=s", **FAST)
        doc = sim.add_doc(repo, "文档", body="正文")
        sim.edit_doc(doc, body="新正文")
        sim.add_doc(quiet, "无钩子", body="x")
        sim.delete_doc(doc)
        assert sim.webhooks.sender is not None and sim.webhooks.sender.idle(10)
        subjects = [(e["data"]["webhook_subject_type"], e["data"]["id"]) for e in rec.events]
        assert subjects == [("publish", doc.id), ("update", doc.id), ("delete", doc.id)]
        assert rec.events[0]["data"]["book"]["id"] == repo.id
        sim.webhooks.close()
