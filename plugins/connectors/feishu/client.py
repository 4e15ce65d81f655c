"""A synchronous Feishu Open Platform client (httpx) for drive sync.

Every business call goes through :meth:`FeishuClient.call`: it takes a request slot from the
shared per-API budget, attaches the shared tenant token, decodes the envelope into the typed
errors of :mod:`.errors`, retries what is transient (tenacity) and re-fetches the token once
when the gateway rejects it. The asynchronous export poller used by the trigger
(:mod:`.trigger`) reuses the same decoding, retry policy, token cache and budgets.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception

from plugins.connectors.feishu.budget import RequestBudget
from plugins.connectors.feishu.errors import (
    FeishuDataError,
    FeishuError,
    FeishuNetworkError,
    FeishuRateLimited,
    FeishuTokenInvalid,
    error_from_response,
)
from plugins.connectors.feishu.token import TokenCache

__all__ = ["Download", "FeishuClient", "FeishuSettings", "decode_json", "filename_from_disposition", "retry_policy"]

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://open.feishu.cn"
LARK_BASE_URL = "https://open.larksuite.com"


@dataclass(frozen=True, slots=True)
class FeishuSettings:
    """Everything needed to talk to one app. ``host`` is the site root (Feishu or Lark)."""

    app_id: str
    app_secret: str
    host: str = DEFAULT_BASE_URL
    redis_url: str | None = None
    timeout: float = 30.0
    max_attempts: int = 5
    rate_limit_max_wait: float = 300.0
    token_margin: float = 300.0
    limits: dict[str, list[list[float]]] | None = None

    @property
    def base_url(self) -> str:
        host = self.host.rstrip("/")
        return host if host.endswith("/open-apis") else f"{host}/open-apis"

    def __repr__(self) -> str:  # keep the secret out of logs and tracebacks
        return f"FeishuSettings(app_id={self.app_id!r}, host={self.host!r}, redis={'yes' if self.redis_url else 'no'})"


@dataclass(slots=True)
class Download:
    data: bytes
    file_name: str | None
    media_type: str | None


# --------------------------------------------------------------------------- shared pieces


def decode_json(response: httpx.Response) -> dict[str, Any]:
    """Return the envelope of a successful call, or raise the matching :class:`FeishuError`."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        if response.status_code >= 400:
            raise error_from_response(response.status_code, None, response.headers)
        raise FeishuDataError(f"non-JSON response from {response.request.url.path}", status=response.status_code)
    if response.status_code >= 400 or body.get("code", 0) != 0:
        raise error_from_response(response.status_code, body, response.headers)
    return body


def _stop(max_attempts: int, rate_limit_max_wait: float):
    def stop(state: RetryCallState) -> bool:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, FeishuRateLimited):
            # A limit is a promise the call will succeed later: bound it by time, not attempts.
            return (state.seconds_since_start or 0.0) >= rate_limit_max_wait
        return state.attempt_number >= max_attempts

    return stop


def _wait(state: RetryCallState) -> float:
    exc = state.outcome.exception() if state.outcome else None
    if isinstance(exc, FeishuRateLimited) and exc.retry_after is not None:
        # Wait what the gateway says plus a little jitter so workers do not return in lockstep.
        return exc.retry_after + random.uniform(0.05, 0.25)
    return min(30.0, 0.5 * 2 ** (state.attempt_number - 1)) * random.uniform(0.5, 1.0)


def retry_policy(max_attempts: int, rate_limit_max_wait: float) -> dict[str, Any]:
    """Keyword arguments for tenacity's ``Retrying``/``AsyncRetrying``."""
    return {
        "retry": retry_if_exception(lambda e: isinstance(e, FeishuError) and e.retryable),
        "stop": _stop(max_attempts, rate_limit_max_wait),
        "wait": _wait,
        "reraise": True,
    }


_EXT_PARAM = re.compile(r"""filename\*\s*=\s*([^']*)'[^']*'([^;\s]+)""", re.IGNORECASE)
_PLAIN_PARAM = re.compile(r"""(?:^|;)\s*filename\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;]+))""", re.IGNORECASE)


def filename_from_disposition(header: str | None) -> str | None:
    """File name from Content-Disposition: RFC 5987 ``filename*`` first, then ``filename``.

    Feishu often sends raw UTF-8 bytes in ``filename=``; HTTP libraries decode header bytes as
    Latin-1, so such a value is re-encoded to Latin-1 and decoded as UTF-8 (as lark-oapi does).
    """
    if not header:
        return None
    ext = _EXT_PARAM.search(header)
    if ext:
        try:
            name = unquote(ext.group(2).strip('"'), encoding=ext.group(1) or "utf-8", errors="strict")
            if name:
                return name
        except (LookupError, UnicodeDecodeError):
            pass
    plain = _PLAIN_PARAM.search(header)
    if not plain:
        return None
    name = plain.group(1) if plain.group(1) is not None else plain.group(2).strip()
    name = re.sub(r"\\(.)", r"\1", name)
    try:
        return name.encode("latin-1").decode("utf-8") or None
    except (UnicodeEncodeError, UnicodeDecodeError):
        return name or None


_SSL_CONTEXT: Any = None


def ssl_context() -> Any:
    """One verified SSL context per process: building one loads the CA bundle (~0.3 s)."""
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        import ssl

        import certifi

        _SSL_CONTEXT = ssl.create_default_context(cafile=certifi.where())
    return _SSL_CONTEXT


def _redis_client(url: str | None) -> Any:
    if not url:
        return None
    import redis

    return redis.Redis.from_url(url)


# --------------------------------------------------------------------------- client


class FeishuClient:
    """Synchronous client. Safe to share between threads of one process."""

    def __init__(self, settings: FeishuSettings, *, transport: httpx.BaseTransport | None = None) -> None:
        self.settings = settings
        self._http = httpx.Client(
            base_url=settings.base_url, timeout=settings.timeout, transport=transport, verify=ssl_context()
        )
        self._redis = _redis_client(settings.redis_url)
        self.budget = RequestBudget(settings.app_id, redis_client=self._redis, limits=settings.limits)
        self.tokens = TokenCache(
            settings.app_id, self._fetch_token, redis_client=self._redis, safety_margin=settings.token_margin
        )
        self._policy = retry_policy(settings.max_attempts, settings.rate_limit_max_wait)

    def close(self) -> None:
        self._http.close()
        if self._redis is not None:
            self._redis.close()

    def __enter__(self) -> FeishuClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- token

    def _fetch_token(self) -> tuple[str, int]:
        """One token request (the caller holds the lock). Returns (token, expire seconds)."""

        def once() -> tuple[str, int]:
            try:
                resp = self._http.post(
                    "/auth/v3/tenant_access_token/internal",
                    json={"app_id": self.settings.app_id, "app_secret": self.settings.app_secret},
                )
            except httpx.TransportError as exc:
                raise FeishuNetworkError(f"token request failed: {type(exc).__name__}") from exc
            body = decode_json(resp)
            token, expire = body.get("tenant_access_token"), body.get("expire")
            if not isinstance(token, str) or not isinstance(expire, int):
                raise FeishuDataError("token response lacks tenant_access_token/expire")
            return token, expire

        for attempt in Retrying(**self._policy):
            with attempt:
                return once()
        raise AssertionError("unreachable")

    # ----------------------------------------------------------------- core call

    def _send(self, method: str, path: str, token: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, headers={"Authorization": f"Bearer {token}"}, **kwargs)
        except httpx.TransportError as exc:
            raise FeishuNetworkError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc

    def _authorized(self, api: str, fn: Any) -> Any:
        """Run ``fn(token)`` under the budget; on a rejected token refresh it once and retry."""
        for refresh in (False, True):
            token = self.tokens.get()
            try:
                self.budget.acquire(api, max_wait=self.settings.rate_limit_max_wait)
            except TimeoutError as exc:  # the shared budget stayed full: same as a server 429
                raise FeishuRateLimited(f"local request budget: {exc}") from exc
            try:
                return fn(token)
            except FeishuTokenInvalid:
                self.tokens.invalidate(token)
                if refresh:
                    raise
                log.info("Feishu rejected the tenant token; refreshing once")
        raise AssertionError("unreachable")

    def call(self, method: str, path: str, *, api: str, **kwargs: Any) -> dict[str, Any]:
        """A JSON business call; returns the envelope's ``data`` (``{}`` when absent)."""

        def once(token: str) -> dict[str, Any]:
            return decode_json(self._send(method, path, token, **kwargs)).get("data") or {}

        for attempt in Retrying(**self._policy):
            with attempt:
                return self._authorized(api, once)
        raise AssertionError("unreachable")

    def download(self, path: str, *, api: str, max_bytes: int) -> Download:
        """Stream a binary body, refusing more than ``max_bytes``."""

        def once(token: str) -> Download:
            headers = {"Authorization": f"Bearer {token}"}
            try:
                with self._http.stream("GET", path, headers=headers) as resp:
                    ctype = resp.headers.get("content-type", "")
                    if resp.status_code != 200 or ctype.startswith("application/json"):
                        resp.read()
                        decode_json(resp)  # raises the typed error
                        raise FeishuDataError(f"download {path} returned JSON, not a file", status=resp.status_code)
                    declared = resp.headers.get("content-length")
                    if declared and declared.isdigit() and int(declared) > max_bytes:
                        raise FeishuDataError(f"file is {declared} bytes, over the {max_bytes} limit", code=None)
                    buf = bytearray()
                    for chunk in resp.iter_bytes():
                        buf += chunk
                        if len(buf) > max_bytes:
                            raise FeishuDataError(f"file exceeds the {max_bytes} byte limit")
                    return Download(
                        data=bytes(buf),
                        file_name=filename_from_disposition(resp.headers.get("content-disposition")),
                        media_type=ctype.split(";")[0].strip() or None,
                    )
            except httpx.TransportError as exc:
                raise FeishuNetworkError(f"GET {path}: {type(exc).__name__}: {exc}") from exc

        for attempt in Retrying(**self._policy):
            with attempt:
                return self._authorized(api, once)
        raise AssertionError("unreachable")

    # ----------------------------------------------------------------- drive API

    def list_folder(self, folder_token: str, *, page_size: int = 200) -> Iterator[dict[str, Any]]:
        """Every item directly in one folder, following ``page_token``."""
        page_token: str | None = None
        while True:
            params: dict[str, Any] = {"folder_token": folder_token, "page_size": page_size}
            if page_token:
                params["page_token"] = page_token
            data = self.call("GET", "/drive/v1/files", api="list", params=params)
            yield from data.get("files") or []
            page_token = data.get("next_page_token")
            if not data.get("has_more") or not page_token:
                return

    def list_wiki_nodes(self, space_id: str, parent_node_token: str | None = None) -> Iterator[dict[str, Any]]:
        page_token: str | None = None
        while True:
            params: dict[str, Any] = {"page_size": 50}
            if parent_node_token:
                params["parent_node_token"] = parent_node_token
            if page_token:
                params["page_token"] = page_token
            data = self.call("GET", f"/wiki/v2/spaces/{space_id}/nodes", api="wiki_nodes", params=params)
            yield from data.get("items") or []
            page_token = data.get("page_token")
            if not data.get("has_more") or not page_token:
                return

    def batch_query_metas(self, docs: list[tuple[str, str]]) -> tuple[list[dict], list[dict]]:
        """``(metas, failed_list)`` for up to 200 ``(token, type)`` pairs."""
        body = {"request_docs": [{"doc_token": t, "doc_type": k} for t, k in docs], "with_url": False}
        data = self.call("POST", "/drive/v1/metas/batch_query", api="meta", json=body)
        return list(data.get("metas") or []), list(data.get("failed_list") or [])

    def create_export(self, token: str, doc_type: str, extension: str) -> str:
        body = {"file_extension": extension, "token": token, "type": doc_type}
        data = self.call("POST", "/drive/v1/export_tasks", api="export_create", json=body)
        ticket = data.get("ticket")
        if not ticket:
            raise FeishuDataError("export task created without a ticket")
        return str(ticket)

    def get_export(self, ticket: str, token: str) -> dict[str, Any]:
        data = self.call("GET", f"/drive/v1/export_tasks/{ticket}", api="export_poll", params={"token": token})
        return dict(data.get("result") or {})

    def download_export(self, file_token: str, *, max_bytes: int) -> Download:
        return self.download(
            f"/drive/v1/export_tasks/file/{file_token}/download", api="export_download", max_bytes=max_bytes
        )

    def download_file(self, file_token: str, *, max_bytes: int) -> Download:
        return self.download(f"/drive/v1/files/{file_token}/download", api="file_download", max_bytes=max_bytes)
