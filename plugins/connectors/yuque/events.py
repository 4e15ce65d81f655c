"""Yuque webhooks, authenticated and read into hints (pure: no I/O, no clock of its own).

Yuque signs nothing: a knowledge base's webhook is a URL, so the URL carries a per-source
secret (``?secret=``, the Connection's extra ``webhook_secret``), compared in constant time.

The body, as public consumers read it (Yuque's own page documents no payload fields; see
shared/reference/yuque-api.md): ``{"data": {...}}`` where ``data`` is the doc's detail
(FlashFeiFei/yuque ``response/doc_detail_serializer.go``: ``id``, ``slug``, ``title``,
``book_id``, ``book``, ``created_at``, ``updated_at``, ``deleted_at``...) plus
``webhook_subject_type`` (``publish``, ``update``, ``delete``; ``comment_create``,
``comment_update``, ``comment_reply_create`` for comments: seen in several public handlers)
and ``action_type`` (huhuhang/yuque-wecom-bot ``index.js`` reads ``data.action_type`` with the
same three values, ``data.book.name``, ``data.path``). Unverified against the service itself:
whether ``book_id`` is always present (``data.book.id`` is taken when it is not), and whether a
redelivery repeats the body byte for byte. Comments change nothing indexed: answered and
counted, never stored.

Event ids: Yuque sends none, so one is derived: sha256 over the subject type, book id, doc id
and the doc's time for that subject (``deleted_at`` for a delete, else ``updated_at``, else
``content_updated_at`` / ``published_at``). A redelivery of one webhook gives the same id (a
duplicate), the next edit a new one (its ``updated_at`` moved). Without any of those times the
canonical JSON of ``data`` is hashed instead: a redelivery is still the same, two edits only
collide if Yuque sent two identical bodies, which then are one edit to re-read anyway.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from include.event_refusals import BadSecret, Malformed, NotConfigured, UnknownEventType
from include.stores.events import EventHint, EventKind, check_event_age
from plugins.connectors.base import CallbackSetup
from plugins.connectors.yuque.connection import DEFAULT_CONN_ID
from plugins.connectors.yuque.versions import item_key

__all__ = ["CALLBACK_SETUP", "IGNORED_TYPES", "SUBJECT_KINDS", "YuqueWebhook", "check_secret", "read_webhook"]

SUBJECT_KINDS: dict[str, EventKind] = {"publish": "changed", "update": "changed", "delete": "deleted"}
IGNORED_TYPES = frozenset({"comment_create", "comment_update", "comment_reply_create"})
# the webhook is set per knowledge base (its settings, developer / webhooks), with this URL
CALLBACK_SETUP = CallbackSetup(
    default_conn_id=DEFAULT_CONN_ID,
    secret_extras=("webhook_secret",),
    event_types=tuple(SUBJECT_KINDS),
    url_secret_extra="webhook_secret",
)
_TIME_FIELDS = {"delete": ("deleted_at", "updated_at")}
_DEFAULT_TIMES = ("updated_at", "content_updated_at", "published_at")


@dataclass(frozen=True, slots=True)
class YuqueWebhook:
    """One authenticated webhook: an event to store, or a known subject that changes nothing."""

    hint: EventHint | None = None
    ignored: str | None = None


def check_secret(expected: str | None, given: str | None) -> None:
    """The URL secret, in constant time; :class:`BadSecret` or :class:`NotConfigured`."""
    if not expected:
        raise NotConfigured("the Connection has no webhook_secret")
    if not given or not hmac.compare_digest(expected.encode("utf-8"), given.encode("utf-8")):
        raise BadSecret("secret is not the source's")


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value > 0:
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _time(data: dict[str, Any], subject: str) -> tuple[str | None, dt.datetime | None]:
    """The doc's time for this subject as sent and parsed (ISO 8601, ``Z`` accepted)."""
    for name in _TIME_FIELDS.get(subject, _DEFAULT_TIMES):
        raw = data.get(name)
        if isinstance(raw, str) and raw:
            try:
                when = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
            except ValueError:
                raise Malformed(f"data.{name} is not ISO 8601") from None
            return raw, when if when.tzinfo else when.replace(tzinfo=dt.UTC)
    return None, None


def _event_id(subject: str, book_id: int, doc_id: int, stamp: str | None, data: dict[str, Any]) -> str:
    basis = stamp if stamp is not None else json.dumps(data, sort_keys=True, ensure_ascii=False, default=str)
    digest = hashlib.sha256(f"{subject}\x00{book_id}\x00{doc_id}\x00{basis}".encode()).hexdigest()
    return f"yuque-{digest[:40]}"


def read_webhook(body: bytes, *, now: float, max_skew: float) -> YuqueWebhook:
    """Read one webhook ``body`` whose URL secret was already checked; ``now`` in epoch seconds. A doc time older than
    the event store remembers ids (``EVENT_MEMORY``) could be a replay it would not recognise
    (refused ``expired``), as is one ahead of now by more than ``max_skew``. A recent doc time
    is not required: Yuque signs nothing and sends no delivery time, and a webhook redelivered
    after an outage keeps the doc's time (the derived event id de-duplicates it)."""
    try:
        outer = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):  # [[[[... deeper than json can
        raise Malformed("body is not JSON") from None
    data = outer.get("data") if isinstance(outer, dict) else None
    if not isinstance(data, dict):
        raise Malformed("data is not an object")
    subject = data.get("webhook_subject_type") or data.get("action_type")
    if not isinstance(subject, str) or not subject:
        raise Malformed("data.webhook_subject_type missing")
    if subject in IGNORED_TYPES:
        return YuqueWebhook(ignored=subject)
    kind = SUBJECT_KINDS.get(subject)
    if kind is None:
        raise UnknownEventType(f"subject type {subject[:100]!r}")
    doc_id = _int(data.get("id"))
    book = data.get("book")
    book_id = _int(data.get("book_id")) or (_int(book.get("id")) if isinstance(book, dict) else None)
    if doc_id is None or book_id is None:
        raise Malformed("data.id or data.book_id missing")
    stamp, when = _time(data, subject)
    if when is not None:
        check_event_age(when.timestamp(), now, max_skew, "the doc's time")
    event_id = _event_id(subject, book_id, doc_id, stamp, data)
    return YuqueWebhook(hint=EventHint(event_id, item_key(book_id, doc_id), kind, f"yuque.{subject}", when))
