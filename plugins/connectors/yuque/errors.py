"""Typed errors of the Yuque OpenAPI client.

Yuque answers errors with ``{"status": <int>, "message": "<text>"}`` (sometimes only
``message``). The HTTP status decides the class, so callers can decide what to retry and what to
record: auth and permission problems are never retried, rate limits and server errors are.
"""

from __future__ import annotations

from typing import Any

from include.retry import parse_retry_after

__all__ = [
    "YuqueAuthError",
    "YuqueBudgetExhausted",
    "YuqueError",
    "YuqueNotFoundError",
    "YuquePermissionError",
    "YuqueRateLimitError",
    "YuqueRedirectError",
    "YuqueResponseTooLarge",
    "YuqueServerError",
    "YuqueTransportError",
    "YuqueValidationError",
    "error_for_response",
]


class YuqueError(Exception):
    """Any failure talking to Yuque. ``status`` is the HTTP status when there was a response."""

    retryable: bool = False

    def __init__(self, message: str, *, status: int | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.body = body


class YuqueAuthError(YuqueError):
    """401: bad or missing token, or the token lacks a scope."""


class YuquePermissionError(YuqueError):
    """403: the token may not do this (also what a missing User-Agent gets)."""


class YuqueNotFoundError(YuqueError):
    """404: the repo or doc does not exist (or is deleted)."""


class YuqueRedirectError(YuqueError):
    """3xx: Yuque sent us elsewhere (a team space's own host, http -> https). Never followed: the
    token must only go to the origin it was configured for, and a retry would get the same
    answer, so it is final, with the target in the message for whoever fixes the Connection."""

    def __init__(self, message: str, *, status: int | None = None, body: Any = None, location: str | None = None):
        super().__init__(message, status=status, body=body)
        self.location = location


class YuqueResponseTooLarge(YuqueError):
    """A response body (after its content-coding) passed the client's byte limit. Cut while
    streaming, so it never sits in memory; final: the same request would get the same body."""

    def __init__(self, message: str, *, endpoint: str, limit: int, status: int | None = None) -> None:
        super().__init__(message, status=status)
        self.endpoint = endpoint
        self.limit = limit


class YuqueValidationError(YuqueError):
    """400/422: the request itself is wrong (e.g. ``limit`` above 100)."""


class YuqueRateLimitError(YuqueError):
    """429: too many requests. ``retry_after`` is the server's hint in seconds, if it gave one."""

    retryable = True

    def __init__(self, message: str, *, status: int | None = 429, body: Any = None, retry_after: float | None = None):
        super().__init__(message, status=status, body=body)
        self.retry_after = retry_after


class YuqueServerError(YuqueError):
    """5xx: Yuque failed; worth retrying."""

    retryable = True


class YuqueTransportError(YuqueError):
    """No usable response: connection refused/reset, timeout, invalid JSON."""

    retryable = True


class YuqueBudgetExhausted(YuqueError):
    """Our own hourly request budget for this token is spent; ``reset_in`` seconds until it refills.

    Raised before any request is sent, so the shared limit is never overrun by any worker.
    """

    retryable = True

    def __init__(self, message: str, *, reset_in: float) -> None:
        super().__init__(message)
        self.reset_in = reset_in


def error_for_response(status: int, body: Any, headers: Any = None) -> YuqueError:
    """Map an error response to its typed exception."""
    message = ""
    if isinstance(body, dict):
        message = str(body.get("message") or body.get("msg") or "")
    elif isinstance(body, str):
        message = body[:200]
    message = message or f"HTTP {status}"
    text = f"Yuque API error {status}: {message}"
    if status == 401:
        return YuqueAuthError(text, status=status, body=body)
    if status == 403:
        return YuquePermissionError(text, status=status, body=body)
    if status in (404, 410):
        return YuqueNotFoundError(text, status=status, body=body)
    if status in (400, 422):
        return YuqueValidationError(text, status=status, body=body)
    if status == 429:
        # capped where it is honoured (the client's max_retry_after)
        retry_after = parse_retry_after(headers.get("retry-after") if headers is not None else None)
        return YuqueRateLimitError(text, status=status, body=body, retry_after=retry_after)
    if status >= 500:
        return YuqueServerError(text, status=status, body=body)
    return YuqueError(text, status=status, body=body)
