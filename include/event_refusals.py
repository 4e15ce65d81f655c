"""Why a pushed change event (a Feishu callback, a Yuque webhook) was refused.

Every refusal is one of these types; its ``reason`` is the counter name the receiver bumps
(``refused:<reason>`` in :class:`include.stores.events.EventStore`) and the one line the caller
gets back, and ``status`` the HTTP status it is answered with. The message is for our own logs
and never holds a secret or the body. The ground holds them because both services' verifiers
(``plugins/connectors/*/events.py``, which may not import each other) and the receiver share them.
"""

from __future__ import annotations

__all__ = [
    "BadEncryption",
    "BadSecret",
    "BadSignature",
    "BadToken",
    "EventRefused",
    "Expired",
    "Malformed",
    "NotConfigured",
    "RateLimited",
    "TooLarge",
    "UnknownEventType",
    "WrongSource",
]


class EventRefused(Exception):
    """A callback that is not stored. ``reason``: the counter name; ``status``: the HTTP answer."""

    reason = "refused"
    status = 400

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.reason)


class Malformed(EventRefused):
    """Not the service's JSON shape (not JSON, a field missing or of the wrong type)."""

    reason = "malformed"


class BadEncryption(EventRefused):
    """An ``encrypt`` body that does not decrypt (bad base64, length, padding or key), or an
    encrypted body where no Encrypt Key is configured."""

    reason = "bad_encryption"


class UnknownEventType(EventRefused):
    """An event type this receiver does not map to a change of an item."""

    reason = "unknown_event_type"


class BadSignature(EventRefused):
    """``X-Lark-Signature`` missing or not the digest of the request."""

    reason = "bad_signature"
    status = 401


class BadToken(EventRefused):
    """The verification token in the body is not the source's."""

    reason = "bad_token"
    status = 401


class BadSecret(EventRefused):
    """The URL secret (Yuque) is missing or not the source's."""

    reason = "bad_secret"
    status = 401


class Expired(EventRefused):
    """A request or event timestamp outside the allowed skew from now (a replay, or a clock far off)."""

    reason = "expired"
    status = 403


class WrongSource(EventRefused):
    """Authentic, but for another app, tenant or knowledge base than this source's."""

    reason = "wrong_source"
    status = 403


class NotConfigured(EventRefused):
    """The source's Connection lacks the secret that authenticates its callbacks."""

    reason = "not_configured"
    status = 403


class TooLarge(EventRefused):
    """A body over the source's ``max_body_bytes`` (the rest is never read)."""

    reason = "too_large"
    status = 413


class RateLimited(EventRefused):
    """Over the source's ``max_per_minute``."""

    reason = "rate_limited"
    status = 429
