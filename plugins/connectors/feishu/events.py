"""Feishu/Lark event callbacks, verified and read into hints (pure: no I/O, no clock of its own).

The wire format, as larksuite/oapi-sdk-python handles it (checked in its code):
- ``lark_oapi/core/utils/decryptor.py`` (``AESCipher``): an encrypted body is
  ``{"encrypt": base64(iv[16] + AES-256-CBC(PKCS7(json)))}``, the key the SHA-256 digest of the
  app's Encrypt Key (UTF-8), the IV the first 16 bytes; a ciphertext shorter than two blocks or
  not a whole number of blocks, and a PKCS7 pad outside 1..16 or not all equal, are refused.
- ``lark_oapi/core/const.py``: headers ``X-Lark-Request-Timestamp``, ``X-Lark-Request-Nonce``,
  ``X-Lark-Signature``; ``url_verification`` is the challenge's type.
- ``lark_oapi/event/dispatcher_handler.py`` (``_verify_sign``, ``_decrypt``, ``do``): the
  signature is ``sha256_hex(timestamp + nonce + encrypt_key + raw body)`` and exists only when an
  Encrypt Key is set (no key: nothing is signed); the verification token is
  ``header.token`` in schema 2.0 and ``token`` in the challenge and in 1.0 bodies; the challenge
  is answered ``{"challenge": ...}`` after the token check and before the signature check (the
  console's check of a new request URL). The newer dispatcher (lark_channel's) compares the token
  with ``hmac.compare_digest`` and checks the signature of an encrypted body before decrypting
  it; so does this module, and it refuses an unsigned event when a key is set (the SDK's strict
  mode).
- ``lark_oapi/event/context.py``: the 2.0 header is ``event_id, token, create_time (ms, a
  string), event_type, tenant_key, app_id``; a 1.0 body has ``uuid``, ``ts``, ``token``, ``type``.
- ``lark_oapi/api/drive/v1/model/p2_drive_file_*.py``: every drive event names its document in
  ``event.file_token`` (with ``file_type``); ``created_in_folder_v1`` names the *new* file there and
  its folder in ``folder_token`` (also in the Lark docs page of that event, whose type is
  ``drive.file.created_in_folder_v1``).
Feishu wants the answer within 3 s and retries a non-200 after 15 s, 5 min, 1 h and 6 h
(its event-subscription docs); the receiver stores and answers, nothing slower.

Only schema 2.0 events are read: every drive event is 2.0. Item keys are file tokens, as the
connector's (a wiki document's key is its ``obj_token``, the token drive events name).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import hmac
import json
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from include.event_refusals import (
    BadEncryption,
    BadSignature,
    BadToken,
    Expired,
    Malformed,
    NotConfigured,
    UnknownEventType,
    WrongSource,
)
from include.stores.events import EventHint, EventKind, check_event_age
from plugins.connectors.base import CallbackSetup
from plugins.connectors.feishu.connection import DEFAULT_CONN_ID

__all__ = [
    "CALLBACK_SETUP",
    "EVENT_KINDS",
    "IGNORED_TYPES",
    "FeishuCallback",
    "FeishuSecrets",
    "decrypt",
    "read_callback",
    "signature",
]

# drive event type -> what happened to the file it names
EVENT_KINDS: dict[str, EventKind] = {
    "drive.file.edit_v1": "changed",
    # a base's records or fields: the file's content changed (models carry file_token too)
    "drive.file.bitable_record_changed_v1": "changed",
    "drive.file.bitable_field_changed_v1": "changed",
    "drive.file.title_updated_v1": "renamed",
    "drive.file.trashed_v1": "deleted",
    "drive.file.deleted_v1": "deleted",
    "drive.file.permission_member_added_v1": "permissions",
    "drive.file.permission_member_removed_v1": "permissions",
    "drive.file.created_in_folder_v1": "created",
}
# known drive events that change nothing indexed: answered 200 (so they are not retried) and
# counted, never stored
IGNORED_TYPES = frozenset({"drive.file.read_v1", "drive.file.permission_member_applied_v1"})

# what ``events-url`` tells an operator to set up (console: Events and callbacks)
CALLBACK_SETUP = CallbackSetup(
    default_conn_id=DEFAULT_CONN_ID,
    secret_extras=("verification_token", "encrypt_key"),
    event_types=tuple(EVENT_KINDS),
)

_BLOCK = 16
_MAX_ID = 200  # the store's event_id column


@dataclass(frozen=True, slots=True)
class FeishuSecrets:
    """What authenticates one source's callbacks (its Connection's extras; ``app_id`` its login).

    ``repr`` shows no secret: a record that reaches a log or a traceback leaks nothing."""

    verification_token: str = field(repr=False)
    encrypt_key: str | None = field(default=None, repr=False)
    app_id: str | None = None


@dataclass(frozen=True, slots=True)
class FeishuCallback:
    """One verified callback: a challenge to answer, an event to store, or a known event to ignore."""

    challenge: str | None = None
    hint: EventHint | None = None
    ignored: str | None = None  # the event type of a known event that changes nothing indexed

    def answer(self) -> dict[str, Any]:
        """The JSON body Feishu expects back."""
        return {"challenge": self.challenge} if self.challenge is not None else {"msg": "success"}


def signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    """``X-Lark-Signature`` of a request (the SDK's ``_verify_sign``)."""
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode("utf-8") + body).hexdigest()


def decrypt(encrypted: str, encrypt_key: str) -> bytes:
    """The plaintext of an ``encrypt`` field; :class:`BadEncryption` for anything that is not
    base64 of IV + whole AES blocks with a valid PKCS7 pad under this key."""
    try:
        raw = base64.b64decode(encrypted, validate=True)
    except (binascii.Error, ValueError):
        raise BadEncryption("encrypt is not base64") from None
    if len(raw) < 2 * _BLOCK or len(raw) % _BLOCK:
        raise BadEncryption("ciphertext is not IV + whole AES blocks")
    key = hashlib.sha256(encrypt_key.encode("utf-8")).digest()
    decryptor = Cipher(algorithms.AES(key), modes.CBC(raw[:_BLOCK])).decryptor()
    plain = decryptor.update(raw[_BLOCK:]) + decryptor.finalize()
    pad = plain[-1]
    # a wrong key decrypts to noise: its last byte is a valid pad 1/16 of the time, a full valid
    # pad far less often, and what is left then fails as JSON (read_callback)
    if not 1 <= pad <= _BLOCK or plain[-pad:] != bytes([pad]) * pad:
        raise BadEncryption("bad PKCS7 padding (wrong Encrypt Key?)")
    return plain[:-pad]


def _json_object(data: bytes | str, error: type[Exception]) -> dict[str, Any]:
    """``error`` when ``data`` is not JSON (a plaintext under a wrong key is noise); JSON that is
    not an object is :class:`Malformed` either way."""
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):  # [[[[... deeper than json can
        raise error("body is not JSON") from None
    if not isinstance(value, dict):
        raise Malformed("body is not a JSON object")
    return value


def _same(expected: str, given: Any) -> bool:
    return isinstance(given, str) and hmac.compare_digest(expected.encode("utf-8"), given.encode("utf-8"))


def _check_signature(body: bytes, timestamp: str | None, nonce: str | None, sig: str | None, key: str) -> bool:
    """True when signed and the signature matches; False when unsigned; else BadSignature."""
    if not (timestamp and nonce and sig):
        return False
    if not _same(signature(timestamp, nonce, key, body), sig.lower()):
        raise BadSignature("X-Lark-Signature does not match")
    return True


def _check_time(seconds: float, now: float, max_skew: float, what: str) -> None:
    if abs(now - seconds) > max_skew:
        raise Expired(f"{what} is {now - seconds:+.0f}s from now (allowed ±{max_skew:g}s)")


def _seconds(value: Any, scale: float, what: str) -> float:
    try:
        return int(str(value)) / scale
    except ValueError:
        raise Malformed(f"{what} is not an integer") from None


def read_callback(
    body: bytes,
    *,
    secrets: FeishuSecrets,
    timestamp: str | None,
    nonce: str | None,
    sig: str | None,
    now: float,
    max_skew: float,
) -> FeishuCallback:
    """Verify one callback's raw ``body`` (and its signature headers) against ``secrets`` and read
    it; ``now`` in epoch seconds. Raises an :class:`~include.event_refusals.EventRefused`."""
    if not secrets.verification_token:
        raise NotConfigured("the Connection has no verification_token")
    outer = _json_object(body, Malformed)
    signed = False
    if secrets.encrypt_key:
        signed = _check_signature(body, timestamp, nonce, sig, secrets.encrypt_key)
    encrypted = outer.get("encrypt")
    if encrypted is not None:
        if not isinstance(encrypted, str) or not encrypted:
            raise Malformed("encrypt is not a string")
        if not secrets.encrypt_key:
            raise BadEncryption("encrypted body but the Connection has no encrypt_key")
        payload = _json_object(decrypt(encrypted, secrets.encrypt_key), BadEncryption)
    else:
        payload = outer
    if payload.get("type") == "url_verification":
        if not _same(secrets.verification_token, payload.get("token")):
            raise BadToken("challenge token is not the source's")
        challenge = payload.get("challenge")
        if not isinstance(challenge, str):
            raise Malformed("challenge is not a string")
        return FeishuCallback(challenge=challenge)
    if payload.get("schema") != "2.0":
        if "uuid" in payload and _same(secrets.verification_token, payload.get("token")):
            raise UnknownEventType("schema 1.0 event (drive events are 2.0)")
        raise Malformed("neither a challenge nor a schema 2.0 event")
    header = payload.get("header")
    if not isinstance(header, dict):
        raise Malformed("header is not an object")
    if not _same(secrets.verification_token, header.get("token")):
        raise BadToken("header.token is not the source's")
    if secrets.encrypt_key and not signed:
        raise BadSignature("unsigned event (the source has an Encrypt Key)")
    if timestamp:
        _check_time(_seconds(timestamp, 1, "X-Lark-Request-Timestamp"), now, max_skew, "X-Lark-Request-Timestamp")
    return _event(payload, header, secrets, now, max_skew)


def _event(
    payload: dict[str, Any], header: dict[str, Any], secrets: FeishuSecrets, now: float, max_skew: float
) -> FeishuCallback:
    """The hint of a token-checked schema 2.0 event."""
    created = _seconds(header.get("create_time"), 1000, "header.create_time")
    check_event_age(created, now, max_skew, "header.create_time")
    if secrets.app_id and header.get("app_id") != secrets.app_id:
        raise WrongSource("header.app_id is another app's")
    event_id, event_type = header.get("event_id"), header.get("event_type")
    if not isinstance(event_id, str) or not 0 < len(event_id) <= _MAX_ID:
        raise Malformed("header.event_id missing or too long")
    if not isinstance(event_type, str) or not event_type:
        raise Malformed("header.event_type missing")
    if event_type in IGNORED_TYPES:
        return FeishuCallback(ignored=event_type)
    kind = EVENT_KINDS.get(event_type)
    if kind is None:
        raise UnknownEventType(f"event type {event_type[:100]!r}")
    event = payload.get("event")
    token = event.get("file_token") if isinstance(event, dict) else None
    if not isinstance(token, str) or not 0 < len(token) <= 200:
        raise Malformed("event.file_token missing")
    when = dt.datetime.fromtimestamp(created, dt.UTC)
    return FeishuCallback(hint=EventHint(event_id, token, kind, event_type, when))
