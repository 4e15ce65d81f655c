"""Yuque webhooks through the pure reader: the URL secret, the body, the derived event id."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from include.event_refusals import BadSecret, Expired, Malformed, NotConfigured, UnknownEventType
from plugins.connectors.yuque.events import check_secret, read_webhook
from plugins.connectors.yuque.versions import item_key
from tests.events.support import NOW, YUQUE_SECRET, yuque_body


def _read(body: bytes, now: float = NOW):
    return read_webhook(body, now=now, max_skew=300)


@pytest.mark.parametrize(("subject", "kind"), [("publish", "changed"), ("update", "changed"), ("delete", "deleted")])
def test_subjects_map_to_hints_with_the_connectors_key(subject: str, kind: str) -> None:
    hint = _read(yuque_body(subject, doc_id=34, book_id=12)).hint
    assert hint is not None
    assert (hint.item_key, hint.kind, hint.event_type) == (item_key(12, 34), kind, f"yuque.{subject}")
    assert hint.event_time is not None and hint.event_time.timestamp() == NOW


def test_event_id_is_stable_for_a_redelivery_and_new_for_the_next_edit() -> None:
    first = _read(yuque_body("update")).hint
    again = _read(yuque_body("update")).hint
    later = _read(yuque_body("update", updated_at="2026-09-21T14:14:00.000Z")).hint
    deleted = _read(yuque_body("delete")).hint
    assert first and again and later and deleted
    assert first.event_id == again.event_id
    assert len({first.event_id, later.event_id, deleted.event_id}) == 3


def test_book_id_from_the_book_object_when_missing() -> None:
    data = json.loads(yuque_body())
    del data["data"]["book_id"]
    hint = _read(json.dumps(data).encode()).hint
    assert hint is not None and hint.item_key == item_key(12, 34)


def test_comments_are_ignored_unknown_subjects_refused() -> None:
    assert _read(yuque_body("comment_create")).ignored == "comment_create"
    with pytest.raises(UnknownEventType):
        _read(yuque_body("book_export"))


def test_only_deliveries_older_than_the_id_memory_or_from_the_future_are_expired() -> None:
    with pytest.raises(Expired):
        _read(yuque_body(updated_at="2026-09-01T13:00:00.000Z"))
    with pytest.raises(Expired):
        _read(yuque_body(updated_at="2030-01-01T00:00:00.000Z"))
    # an hour-old doc time (a redelivery after an outage) is taken; its derived id de-duplicates it
    hour_ago = dt.datetime.fromtimestamp(NOW - 3600, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    assert _read(yuque_body(updated_at=hour_ago)).hint is not None


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[]", b'{"data": 1}', b'{"data": {"id": 1}}', b'{"data": {"webhook_subject_type": "update"}}'],
)
def test_malformed(body: bytes) -> None:
    with pytest.raises(Malformed):
        _read(body)


def test_secret_compared_and_required() -> None:
    check_secret(YUQUE_SECRET, YUQUE_SECRET)
    for given in (None, "", "ys-wrong", YUQUE_SECRET + "x"):
        with pytest.raises(BadSecret):
            check_secret(YUQUE_SECRET, given)
    with pytest.raises(NotConfigured):
        check_secret("", "anything")


def test_json_nested_past_the_parsers_depth_is_malformed() -> None:
    with pytest.raises(Malformed):
        _read(b'{"data": ' * 100_000 + b"1" + b"}" * 100_000)
