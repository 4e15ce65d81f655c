"""Feishu callbacks through the pure verifier: bodies built in the test by the same algorithm."""

from __future__ import annotations

import base64
import json

import pytest

from include.event_refusals import (
    BadEncryption,
    BadSignature,
    BadToken,
    EventRefused,
    Expired,
    Malformed,
    NotConfigured,
    UnknownEventType,
    WrongSource,
)
from include.stores.events import EVENT_MEMORY
from plugins.connectors.feishu.events import FeishuSecrets, decrypt, read_callback
from tests.events.support import (
    APP_ID,
    KEY,
    NOW,
    TOKEN,
    challenge,
    encrypt,
    encrypt_raw,
    feishu_event,
    feishu_request,
    sign,
)

SECRETS = FeishuSecrets(verification_token=TOKEN, encrypt_key=KEY, app_id=APP_ID)
PLAIN = FeishuSecrets(verification_token=TOKEN)


def _read(body: bytes, headers: dict[str, str], secrets: FeishuSecrets = SECRETS, now: float = NOW):
    return read_callback(
        body,
        secrets=secrets,
        timestamp=headers.get("X-Lark-Request-Timestamp"),
        nonce=headers.get("X-Lark-Request-Nonce"),
        sig=headers.get("X-Lark-Signature"),
        now=now,
        max_skew=300,
    )


@pytest.mark.parametrize(
    ("event_type", "kind"),
    [
        ("drive.file.edit_v1", "changed"),
        ("drive.file.title_updated_v1", "renamed"),
        ("drive.file.trashed_v1", "deleted"),
        ("drive.file.deleted_v1", "deleted"),
        ("drive.file.permission_member_added_v1", "permissions"),
        ("drive.file.permission_member_removed_v1", "permissions"),
        ("drive.file.created_in_folder_v1", "created"),
        ("drive.file.bitable_record_changed_v1", "changed"),
    ],
)
def test_encrypted_signed_event_becomes_a_hint(event_type: str, kind: str) -> None:
    payload = feishu_event(event_type, "doxcnNewFileToken0123456", event_id="ev-1")
    hint = _read(*feishu_request(payload)).hint
    assert hint is not None
    assert (hint.event_id, hint.item_key, hint.kind, hint.event_type) == (
        "ev-1",
        "doxcnNewFileToken0123456",
        kind,
        event_type,
    )
    assert hint.event_time is not None and hint.event_time.timestamp() == NOW


def test_created_in_folder_names_the_new_file_not_the_folder() -> None:
    payload = feishu_event("drive.file.created_in_folder_v1", "doxcnTheNewOne")
    hint = _read(*feishu_request(payload)).hint
    assert hint is not None and hint.item_key == "doxcnTheNewOne"
    assert payload["event"]["folder_token"] != hint.item_key


def test_plain_signed_event_is_read_too() -> None:
    hint = _read(*feishu_request(feishu_event(), encrypted=False)).hint
    assert hint is not None and hint.kind == "changed"


def test_plain_event_without_an_encrypt_key_needs_only_the_token() -> None:
    body, headers = feishu_request(feishu_event(app_id="cli_other"), key=None)
    assert _read(body, headers, PLAIN).hint is not None
    with pytest.raises(BadToken):
        _read(*feishu_request(feishu_event(token="forged"), key=None), PLAIN)


def test_challenge_is_answered_encrypted_or_plain() -> None:
    encrypted = json.dumps({"encrypt": encrypt(json.dumps(challenge()).encode(), KEY)}).encode()
    assert _read(encrypted, {}).answer() == {"challenge": "ajls384kdjx98XX"}
    assert _read(json.dumps(challenge()).encode(), {}, PLAIN).answer() == {"challenge": "ajls384kdjx98XX"}
    with pytest.raises(BadToken):
        _read(json.dumps(challenge(token="guess")).encode(), {}, PLAIN)


def test_bad_or_missing_signature_is_refused() -> None:
    body, headers = feishu_request(feishu_event())
    with pytest.raises(BadSignature):
        _read(body, {**headers, "X-Lark-Signature": "0" * 64})
    with pytest.raises(BadSignature):  # signed with another key
        _read(body, sign(body, "another-key"))
    with pytest.raises(BadSignature):  # a body changed after signing
        _read(body.replace(b'"}', b' "}'), headers)
    with pytest.raises(BadSignature):  # unsigned, although the source has a key
        _read(body, {})


def test_wrong_key_bad_padding_and_garbage_are_bad_encryption() -> None:
    inner = json.dumps(feishu_event()).encode()
    for encrypted in (
        encrypt(inner, "not-the-key"),
        encrypt_raw(inner[:32] + b"\x00" * 15 + b"\x05", KEY),  # pad byte 5, pad bytes not all 5
        encrypt_raw(inner[:32] + b"\x00" * 15 + b"\x11", KEY),  # pad byte 17 > block size
        "!!!not base64!!!",
        base64.b64encode(b"short").decode(),
        base64.b64encode(b"x" * 40).decode(),  # not whole blocks
    ):
        body = json.dumps({"encrypt": encrypted}).encode()
        with pytest.raises(BadEncryption):
            _read(body, sign(body, KEY))
    body = json.dumps({"encrypt": encrypt(inner, KEY)}).encode()
    with pytest.raises(BadEncryption):  # encrypted, but the source has no key
        _read(body, {}, PLAIN)


def test_decrypt_round_trips_what_the_test_encrypts() -> None:
    for size in (0, 1, 15, 16, 17, 4096):
        plain = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
        assert decrypt(encrypt(plain, KEY), KEY) == plain


def test_expired_timestamps_are_refused() -> None:
    with pytest.raises(Expired):  # a replayed request: its signed timestamp is old
        _read(*feishu_request(feishu_event(), timestamp=NOW - 3600))
    with pytest.raises(Expired):  # from the future
        _read(*feishu_request(feishu_event(create_time=NOW + 400)))
    with pytest.raises(Expired):  # older than the event store remembers ids
        _read(*feishu_request(feishu_event(create_time=NOW - EVENT_MEMORY.total_seconds() - 1)))


def test_a_redelivery_hours_after_the_event_is_taken() -> None:
    """Feishu redelivers after 15 s, 5 min, 1 h and 6 h, each attempt signed anew: the event's own
    time is then hours old, and de-duplication (not a freshness window) stops a second copy."""
    six_hours_late = feishu_event(create_time=NOW - 6 * 3600 - 60)
    hint = _read(*feishu_request(six_hours_late)).hint
    assert hint is not None and hint.event_time is not None
    assert hint.event_time.timestamp() == pytest.approx(NOW - 6 * 3600 - 60, abs=1)


def test_unknown_and_ignored_event_types() -> None:
    with pytest.raises(UnknownEventType) as refused:
        _read(*feishu_request(feishu_event("im.message.receive_v1")))
    assert refused.value.reason == "unknown_event_type"
    read = _read(*feishu_request(feishu_event("drive.file.read_v1")))
    assert read.hint is None and read.ignored == "drive.file.read_v1"
    v1 = {"uuid": "u1", "token": TOKEN, "ts": "1", "type": "event_callback", "event": {"type": "x"}}
    with pytest.raises(UnknownEventType):
        _read(*feishu_request(v1))


def test_event_of_another_app_is_wrong_source() -> None:
    with pytest.raises(WrongSource):
        _read(*feishu_request(feishu_event(app_id="cli_someone_else")))


def test_bad_token_inside_a_validly_signed_body() -> None:
    with pytest.raises(BadToken):
        _read(*feishu_request(feishu_event(token="other-apps-token")))


@pytest.mark.parametrize(
    "payload",
    [
        [1, 2],
        {"schema": "2.0", "header": "x"},
        {"schema": "2.0", "header": {"token": TOKEN, "create_time": "soon", "event_id": "e", "event_type": "t"}},
        {"hello": "world"},
    ],
)
def test_malformed_bodies(payload) -> None:
    with pytest.raises(Malformed):
        _read(*feishu_request(payload))
    ev = feishu_event()
    del ev["event"]["file_token"]
    with pytest.raises(Malformed):
        _read(*feishu_request(ev))
    with pytest.raises(Malformed):
        _read(b"\xff\xfe not json", {})


def test_a_source_without_a_verification_token_takes_nothing() -> None:
    with pytest.raises(NotConfigured):
        _read(*feishu_request(feishu_event(), key=None), FeishuSecrets(verification_token=""))


def test_refusals_carry_counter_names_and_statuses() -> None:
    reasons = {cls.reason: cls.status for cls in (BadSignature, BadToken, Expired, Malformed, BadEncryption)}
    assert reasons == {"bad_signature": 401, "bad_token": 401, "expired": 403, "malformed": 400, "bad_encryption": 400}
    assert issubclass(WrongSource, EventRefused)


def test_secrets_stay_out_of_repr() -> None:
    assert KEY not in repr(SECRETS) and TOKEN not in repr(SECRETS)


def test_json_nested_past_the_parsers_depth_is_malformed_not_a_crash() -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(Malformed):
        _read(deep, {}, PLAIN)
    inner = json.dumps({"encrypt": encrypt(deep, KEY)}).encode()
    with pytest.raises(BadEncryption):
        _read(inner, sign(inner, KEY))
