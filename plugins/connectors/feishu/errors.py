"""Typed errors for the Feishu Open Platform, decoded from the generic ``code``/``msg``/``data``
envelope, its ``error`` object and the HTTP status.

Callers act on the class, never on ``msg`` (Feishu says its text is not stable):

- :class:`FeishuTokenInvalid` — drop the cached tenant token and retry once;
- :class:`FeishuRateLimited` — wait ``retry_after`` (from ``x-ogw-ratelimit-reset``) and retry;
- :class:`FeishuServerError` / :class:`FeishuNetworkError` — back off and retry;
- :class:`FeishuAuthError`, :class:`FeishuPermissionError`, :class:`FeishuNotFoundError`,
  :class:`FeishuParamError`, :class:`FeishuDataError` (:class:`FeishuResponseTooLarge`: a body
  over the client's byte limit) — never retried.
"""

from __future__ import annotations

from typing import Any

from include.retry import parse_retry_after

__all__ = [
    "APP_CREDENTIAL_CODES",
    "CONTENT_TOO_LARGE",
    "RATE_LIMIT_CODES",
    "REFRESH_GRANT_EXPIRED",
    "REFRESH_RETRYABLE_CODES",
    "REFRESH_REUSED_CODES",
    "TOKEN_INVALID_CODES",
    "FeishuAuthError",
    "FeishuCredentialsError",
    "FeishuDataError",
    "FeishuError",
    "FeishuNetworkError",
    "FeishuNotFoundError",
    "FeishuParamError",
    "FeishuPermissionError",
    "FeishuRateLimited",
    "FeishuResponseTooLarge",
    "FeishuServerError",
    "FeishuTokenInvalid",
    "FeishuTokenRejected",
    "FeishuTokenStoreError",
    "credentials_error",
    "error_from_response",
    "refresh_refused",
]

# The gateway's "token no longer good" codes: re-fetch the token and retry once (what the
# official Go SDK does in core/httptransport.go). 99991677 (user token expired) and 99991668
# (user token invalid, or an API that does not take user tokens) are their user-token twins.
TOKEN_INVALID_CODES = frozenset({99991663, 99991664, 99991665, 99991671, 99991668, 99991677})
# Codes of the tenant token endpoint itself (auth/v3): the credentials in the Connection are
# wrong; no retry and no refresh can help. 10014 "app secret invalid" and 10015 are the token
# call's refusals named in issue 20 (checked against the generic error-code table); 10003
# invalid param, 10013 token fetch failed. The OAuth refresh endpoint's own codes are handled by
# token.py's user-token path, which treats any refusal as a credentials error.
TOKEN_CALL_CODES = frozenset({10003, 10012, 10013, 10014, 10015})
# The app's credentials refused by the token call: the generic error table calls 10015 a wrong
# app secret, larksuite/cli's tests see 10014 for a wrong secret and 10003 for a bad app id, so
# one hint names both settings for any of them.
APP_CREDENTIAL_CODES = frozenset({10003, 10014, 10015})
# OAuth v2 refresh (authen/v2/oauth/token): 20064 / 20073 a refresh token already spent (it is
# single-use), 20037 the grant is over (365 days after authorization), 20050 / 20072 server
# errors worth a retry.
REFRESH_REUSED_CODES = frozenset({20064, 20073})
REFRESH_GRANT_EXPIRED = 20037
REFRESH_RETRYABLE_CODES = frozenset({20050, 20072})
# docx raw_content: the document's text is over the API's limit; the export path still works.
CONTENT_TOO_LARGE = 1770033
# Generic frequency limit plus the export (1069923), file download (1061045) and bitable
# (1254290, answered with HTTP 200) specific ones.
RATE_LIMIT_CODES = frozenset({99991400, 1069923, 1061045, 1254290})
_AUTH_CODES = frozenset({99991661, 99991401, 99991403, 10003, 10013, 10014, 1061005, 1069701})
# Wiki v2 (wiki-v2 error-code table): 131006 permission denied, 131005 not found, 131007 "do
# not retry" (a request the space will never accept), 131001 a transient backend error (retry).
# sheets v3 sheets/query answers HTTP 400 with 1310213 permission, 1310249 deleted, 1310214 not
# found, 1310251 bad parameter (5xx 13152xx internal); bitable v1 tables list answers HTTP 200
# with 1254302 no permission, 1254040/1254041 not found, 12540xx bad request, 1254002 /
# 1255xxx internal, 1254036 a copy in progress (their error-code tables).
_PERMISSION_CODES = frozenset({99991672, 1061004, 1069902, 1770032, 970003, 91204, 131006, 1310213, 1254302})
_NOT_FOUND_CODES = frozenset(
    {1061003, 1061007, 1069906, 1069914, 1770002, 1770003, 91203, 970005, 131005, 1310249, 1310214, 1254040, 1254041}
)
_PARAM_CODES = frozenset(
    {1061002, 1064001, 1069904, 1069918, 1060001, 99992402, 131007, 1310251, CONTENT_TOO_LARGE}
    | {1254000, 1254001, 1254003, 1254004, 1254011}
)
_SERVER_CODES = frozenset(
    {1061001, 1069901, 1069704, 2200, 5000, 600, 91201, 131001, 1315201, 1315203, 1315210, 1254002, 1254036}
    | {1255001, 1255002, 1255003, 1255004, 1255005, 1255040}
    | REFRESH_RETRYABLE_CODES
)


class FeishuError(Exception):
    """Base class. ``code`` is Feishu's business code (None for transport failures)."""

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        status: int | None = None,
        log_id: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.log_id = log_id
        self.details = details or {}

    def __str__(self) -> str:
        parts = [super().__str__()]
        if self.code is not None:
            parts.append(f"code={self.code}")
        if self.status is not None:
            parts.append(f"http={self.status}")
        if self.log_id:
            parts.append(f"log_id={self.log_id}")
        return " ".join(parts)


class FeishuAuthError(FeishuError):
    """Credentials or app configuration are wrong (bad secret, IP allow-list, quota)."""


class FeishuTokenInvalid(FeishuAuthError):
    """The tenant token was rejected; a fresh token may succeed."""

    retryable = True


class FeishuCredentialsError(FeishuAuthError):
    """The token endpoint refused the Connection's credentials (app id/secret, refresh token)."""


class FeishuTokenStoreError(FeishuAuthError):
    """User mode has nowhere to keep its rotating refresh token (no Redis, no state database
    key), or the stored chain cannot be read with the configured key: never retried."""


class FeishuTokenRejected(FeishuAuthError):
    """A token fresh from the token endpoint was rejected again: permanent, never retried.

    Either the API does not accept this kind of token (a user-only API called with a tenant
    token) or the token endpoint keeps handing back the token that was just rejected.
    """


class FeishuPermissionError(FeishuError):
    """The app may not read this item (not shared to the app, missing scope)."""


class FeishuNotFoundError(FeishuError):
    """The item does not exist or was deleted."""


class FeishuParamError(FeishuError):
    """The request was malformed (a bug or a misconfiguration); retrying cannot help."""


class FeishuDataError(FeishuError):
    """The response was not what the API documents (bad JSON, missing fields, too large)."""


class FeishuResponseTooLarge(FeishuDataError):
    """A body (after its content-coding) passed the client's byte limit: a JSON answer over
    ``max_response_bytes`` or a file over the size cap. Cut while streaming, so it never sits
    in memory; final: the same request would get the same body."""

    def __init__(self, message: str, *, endpoint: str, limit: int, status: int | None = None) -> None:
        super().__init__(message, status=status)
        self.endpoint = endpoint
        self.limit = limit


class FeishuRateLimited(FeishuError):
    """A frequency limit tripped. ``retry_after`` is the server's reset hint in seconds."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class FeishuServerError(FeishuError):
    """A 5xx or an internal-error code: transient."""

    retryable = True


class FeishuNetworkError(FeishuError):
    """Connect/read failure or timeout before a response arrived."""

    retryable = True


def _reset_hint(headers: Any) -> float | None:
    """Seconds until the limit resets: the gateway's ``x-ogw-ratelimit-reset``, else a standard
    ``Retry-After`` (delta-seconds or HTTP-date)."""
    if headers is None:
        return None
    hint = parse_retry_after(headers.get("x-ogw-ratelimit-reset"))
    return hint if hint is not None else parse_retry_after(headers.get("retry-after"))


def credentials_error(exc: FeishuError, app_id: str, what: str) -> FeishuError:
    """Re-word a token endpoint's refusal so the operator knows which setting is wrong."""
    if exc.code in TOKEN_CALL_CODES or (isinstance(exc, FeishuAuthError) and not exc.retryable):
        hint = (
            "the app id (the Connection's login) or the app secret (its password) is wrong, or the app is not enabled"
            if exc.code in APP_CREDENTIAL_CODES
            else "the Connection's credentials were refused"
        )
        return FeishuCredentialsError(
            f"{what} for app {app_id} refused: {hint} ({exc.args[0] if exc.args else exc})",
            code=exc.code,
            status=exc.status,
            log_id=exc.log_id,
            details=exc.details,
        )
    return exc


def refresh_refused(exc: FeishuError, app_id: str) -> FeishuCredentialsError:
    """A user-token refresh the OAuth endpoint refused for good, worded by its code."""
    if exc.code in REFRESH_REUSED_CODES:
        why = "the refresh token was already used (each is single-use) or revoked"
    elif exc.code == REFRESH_GRANT_EXPIRED:
        why = "the user's authorization has ended (365 days after it was given)"
    else:
        why = "the refresh token is invalid or expired"
    return FeishuCredentialsError(
        f"user token refresh for app {app_id} refused: {why}; authorize again and store the new "
        f"refresh token in the Connection ({exc.args[0] if exc.args else exc})",
        code=exc.code,
        status=exc.status,
        log_id=exc.log_id,
    )


def error_from_response(status: int, body: dict[str, Any] | None, headers: Any = None) -> FeishuError:
    """Translate one failed response into the most specific error class."""
    body = body or {}
    code = body.get("code")
    code = code if isinstance(code, int) else None
    err: dict[str, Any] = body["error"] if isinstance(body.get("error"), dict) else {}
    log_id = err.get("log_id") or err.get("logid") or (headers.get("x-tt-logid") if headers is not None else None)
    msg = str(body.get("msg") or f"HTTP {status}")
    kwargs: dict[str, Any] = {"code": code, "status": status, "log_id": log_id, "details": err}
    if status == 429 or code in RATE_LIMIT_CODES:
        return FeishuRateLimited(msg, retry_after=_reset_hint(headers), **kwargs)
    if code in TOKEN_INVALID_CODES:
        return FeishuTokenInvalid(msg, **kwargs)
    if code in TOKEN_CALL_CODES:
        return FeishuCredentialsError(msg, **kwargs)
    if code in _AUTH_CODES:
        return FeishuAuthError(msg, **kwargs)
    if code in _PERMISSION_CODES:
        return FeishuPermissionError(msg, **kwargs)
    if code in _NOT_FOUND_CODES:
        return FeishuNotFoundError(msg, **kwargs)
    if code in _PARAM_CODES:
        return FeishuParamError(msg, **kwargs)
    if code in _SERVER_CODES or status >= 500:
        return FeishuServerError(msg, **kwargs)
    # No (known) business code: fall back to the HTTP status.
    if status == 401:
        return FeishuAuthError(msg, **kwargs)
    if status == 403:
        return FeishuPermissionError(msg, **kwargs)
    if status in (404, 410):
        return FeishuNotFoundError(msg, **kwargs)
    if 400 <= status < 500:
        return FeishuParamError(msg, **kwargs)
    return FeishuDataError(msg, **kwargs)
