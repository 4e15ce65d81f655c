"""The Feishu simulator's event side (issue 37): file subscriptions and callback delivery.

Subscriptions, with the paths and parameters larksuite/oapi-sdk-python builds
(``drive/v1/model/{subscribe,get_subscribe,delete_subscribe}_file_request.py``):

- ``POST /open-apis/drive/v1/files/:token/subscribe?file_type=…[&event_type=…]``,
  ``GET …/get_subscribe`` (``{"is_subscribe": bool}``), ``DELETE …/delete_subscribe``.
  ``file_type`` outside doc/docx/sheet/bitable/file/folder/slides, a folder without
  ``event_type=file.created_in_folder_v1`` or a file with one: 400. A missing or trashed file:
  404; a file in :attr:`FeishuEvents.refuse_subscribe` (the app may not subscribe it, e.g. not
  its owner): 403. The business codes (``SUB_*`` below, of the 10696xx family) are this
  simulator's guesses: the real table could not be checked, and the connector judges by class.

Callbacks: :meth:`FeishuEvents.configure` sets the request URL, Encrypt Key and Verification
Token as the developer console does, and sends the URL-verification challenge at once
(``{"challenge","token","type":"url_verification"}``, encrypted when a key is set; the URL is
kept only if the answer echoes the challenge). Then every change the simulator makes to a
subscribed file (edit, rename, trash, delete, permission member added/removed) or in a
subscribed folder (a file created) is pushed as a schema 2.0 event
``{"schema":"2.0","header":{event_id,event_type,create_time(ms),token,app_id,tenant_key},"event":{…}}``
with the event fields of the SDK's ``P2Drive…V1Data`` models. With an Encrypt Key the body is
``{"encrypt": base64(iv16 + AES-256-CBC(PKCS7(json)))}``, key = SHA-256(Encrypt Key) (the SDK's
``AESCipher``), and the headers ``X-Lark-Request-Timestamp``, ``X-Lark-Request-Nonce`` and
``X-Lark-Signature`` = sha256_hex(timestamp + nonce + encrypt_key + body) (the SDK's
``_verify_sign``). Delivery, retries, duplicates and reordering: :mod:`._callbacks`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from fastapi import FastAPI, Request
from fastapi.responses import Response

from tests.simulators._callbacks import CallbackSender, DeliveryKnobs, OwnsSender
from tests.support.leakscan import register_secret

if TYPE_CHECKING:
    from tests.simulators.feishu import FeishuSimulator

__all__ = ["FOLDER_EVENT", "FeishuEvents", "encrypt_body", "sign", "subscription_routes"]

FOLDER_EVENT = "file.created_in_folder_v1"
SUBSCRIBE_TYPES = frozenset({"doc", "docx", "sheet", "bitable", "file", "folder", "slides"})
SUB_PARAM_ERROR, SUB_NOT_FOUND, SUB_FORBIDDEN = 1069601, 1069602, 1069603


def encrypt_body(encrypt_key: str, plaintext: bytes, iv: bytes | None = None) -> str:
    """base64(iv + AES-256-CBC(PKCS7(plaintext))), key = SHA-256(encrypt_key)."""
    iv = iv or os.urandom(16)
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plaintext) + padder.finalize()
    encryptor = Cipher(algorithms.AES(hashlib.sha256(encrypt_key.encode()).digest()), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + encryptor.update(padded) + encryptor.finalize()).decode()


def sign(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode() + body).hexdigest()


@dataclass
class FeishuEvents(OwnsSender):
    """Subscriptions held by the app and where its events go."""

    sim: FeishuSimulator
    subscribed: dict[str, str] = field(default_factory=dict)  # token -> file_type
    refuse_subscribe: set[str] = field(default_factory=set)
    url: str | None = None
    encrypt_key: str | None = None
    verification_token: str = "sim-verification-token"
    tenant_key: str = "sim_tenant_key"
    sent: list[dict[str, Any]] = field(default_factory=list)  # every event payload queued
    challenges: list[bool] = field(default_factory=list)  # each URL verification: answered right?
    _sender: CallbackSender | None = None

    def configure(
        self, url: str, *, encrypt_key: str | None = None, verification_token: str | None = None, **knobs: Any
    ) -> bool:
        """Set the callback URL (and secrets, delivery knobs); True when the challenge was answered."""
        self.encrypt_key = encrypt_key
        if verification_token is not None:
            self.verification_token = verification_token
        for secret in (encrypt_key, self.verification_token):
            if secret:
                register_secret("feishu event secret", secret)
        if self._sender is not None:
            self._sender.close()
        self._sender = CallbackSender(DeliveryKnobs(**knobs))
        challenge = secrets.token_urlsafe(12)
        payload = {"challenge": challenge, "token": self.verification_token, "type": "url_verification"}
        try:
            answer = self._sender.post_now(url, payload, self.seal)
            ok = answer.status_code == 200 and answer.json().get("challenge") == challenge
        except (OSError, ValueError):
            ok = False
        self.challenges.append(ok)
        self.url = url if ok else None
        return ok

    def seal(self, payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
        """One push's body and headers: plain JSON, or encrypted and signed with the Encrypt Key."""
        plain = json.dumps(payload, ensure_ascii=False).encode()
        headers = {"Content-Type": "application/json; charset=utf-8"}
        if not self.encrypt_key:
            return plain, headers
        body = json.dumps({"encrypt": encrypt_body(self.encrypt_key, plain)}).encode()
        timestamp, nonce = str(int(time.time())), secrets.token_hex(8)
        headers.update(
            {
                "X-Lark-Request-Timestamp": timestamp,
                "X-Lark-Request-Nonce": nonce,
                "X-Lark-Signature": sign(timestamp, nonce, self.encrypt_key, body),
            }
        )
        return body, headers

    def envelope(self, event_type: str, event: dict[str, Any], event_id: str | None = None) -> dict[str, Any]:
        header = {
            "event_id": event_id or secrets.token_hex(16),
            "event_type": event_type,
            "create_time": str(int(time.time() * 1000)),
            "token": self.verification_token,
            "app_id": self.sim.app_id,
            "tenant_key": self.tenant_key,
        }
        return {"schema": "2.0", "header": header, "event": event}

    # ----------------------------------------------------------------- what the service pushes
    def file_event(self, kind: str, token: str, **fields: Any) -> None:
        """``drive.file.<kind>`` for a subscribed file (edit_v1, title_updated_v1, trashed_v1,
        deleted_v1, permission_member_added_v1 / _removed_v1); nothing for an unsubscribed one."""
        if token not in self.subscribed:
            return
        operator = {"open_id": "ou_simeditor", "union_id": "on_simeditor", "user_id": "simeditor"}
        event: dict[str, Any] = {"file_token": token, "file_type": self.subscribed[token]}
        if kind == "edit_v1":
            event["operator_id_list"] = [operator]
        else:
            event["operator_id"] = operator
        self._push(self.envelope(f"drive.file.{kind}", {**event, "subscriber_id_list": [], **fields}))

    def created_in_folder(self, token: str, file_type: str, folder: str) -> None:
        if self.subscribed.get(folder) != "folder":
            return
        event = {"file_token": token, "file_type": file_type, "folder_token": folder, "subscriber_ids": []}
        self._push(self.envelope("drive.file.created_in_folder_v1", {**event, "operator_id": {"open_id": "ou_sim"}}))

    def _push(self, payload: dict[str, Any]) -> None:
        self.sent.append(payload)
        if self.url and self._sender is not None:
            self._sender.send(self.url, payload["header"]["event_id"], payload, self.seal)


def _check(sim: FeishuSimulator, token: str, request: Request) -> tuple[str, Response | None]:
    q = request.query_params
    file_type, event_type = q.get("file_type", ""), q.get("event_type")
    if file_type not in SUBSCRIBE_TYPES:
        return file_type, sim._err(400, SUB_PARAM_ERROR, "invalid param: file_type")
    if (file_type == "folder") != (event_type is not None) or (event_type not in (None, FOLDER_EVENT)):
        return file_type, sim._err(400, SUB_PARAM_ERROR, "invalid param: event_type")
    item = sim._visible(token)
    if item is None or (item.type != file_type and not (file_type == "folder" and item.type == "folder")):
        return file_type, sim._err(404, SUB_NOT_FOUND, "file not found")
    if token in sim.events.refuse_subscribe:
        return file_type, sim._err(403, SUB_FORBIDDEN, "no permission to subscribe this file")
    return file_type, None


def subscription_routes(app: FastAPI, sim: FeishuSimulator) -> None:
    base = "/open-apis/drive/v1/files/{token}"

    @app.post(base + "/subscribe")
    async def subscribe(token: str, request: Request) -> Response:
        if (refused := sim._gate(request, "subscribe")) is not None:
            return refused
        file_type, error = _check(sim, token, request)
        if error is not None:
            return error
        with sim._lock:
            sim.events.subscribed[token] = file_type
            sim.counters["subscriptions_made"] += 1
        return sim._ok({})

    @app.get(base + "/get_subscribe")
    async def get_subscribe(token: str, request: Request) -> Response:
        if (refused := sim._gate(request, "subscribe")) is not None:
            return refused
        _file_type, error = _check(sim, token, request)
        return error or sim._ok({"is_subscribe": token in sim.events.subscribed})

    @app.delete(base + "/delete_subscribe")
    async def delete_subscribe(token: str, request: Request) -> Response:
        if (refused := sim._gate(request, "subscribe")) is not None:
            return refused
        _file_type, error = _check(sim, token, request)
        if error is not None:
            return error
        with sim._lock:
            sim.events.subscribed.pop(token, None)
            sim.counters["subscriptions_removed"] += 1
        return sim._ok({})
