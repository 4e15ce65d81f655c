"""A synchronous Feishu Open Platform client (httpx) for drive sync.

Every business call goes through :meth:`FeishuClient.call`: it takes a request slot from the
shared per-API budget, attaches the shared tenant token, decodes the envelope into the typed
errors of :mod:`.errors`, retries what is transient (tenacity) and re-fetches the token once
when the gateway rejects it. Every body is streamed and capped after its content-coding
(:mod:`.answers`): JSON answers at ``max_response_bytes``, downloads at the file size cap. The asynchronous export poller used by the trigger
(:mod:`.trigger`) reuses the same decoding, retry policy, token cache and budgets.
"""

from __future__ import annotations

import logging
import re
import ssl
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote

import certifi
import httpx
import redis
from tenacity import Retrying

from include.http_body import ACCEPT_ENCODING
from include.retry import RetryPolicy
from plugins.connectors.feishu.answers import DEFAULT_MAX_RESPONSE_BYTES, Answer, decode_json, read_answer
from plugins.connectors.feishu.budget import RequestBudget
from plugins.connectors.feishu.errors import (
    FeishuDataError,
    FeishuError,
    FeishuNetworkError,
    FeishuRateLimited,
    FeishuTokenInvalid,
    FeishuTokenRejected,
    credentials_error,
    refresh_refused,
)
from plugins.connectors.feishu.token import TokenCache, UserTokenCache
from plugins.connectors.feishu.user_store import StoredUserToken, open_user_tokens

__all__ = [
    "Download",
    "FeishuClient",
    "FeishuSettings",
    "feishu_retry",
    "filename_from_disposition",
    "rejected_twice",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

DEFAULT_BASE_URL = "https://open.feishu.cn"
# One listing's page bound: 200 rows a page makes this 2 million items in one folder.
_MAX_PAGES = 10_000
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
    # "tenant" (the app's own identity) or "user": act as the user whose OAuth refresh token
    # the Connection holds, so their own space syncs without sharing folders to a bot.
    auth: str = "tenant"
    refresh_token: str | None = None
    # The largest JSON answer read, after its content-coding (Connection extra of that name).
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    # auth "user": the rotating refresh token is kept encrypted in this database (default: the
    # state database) with this Fernet key (default: TRIBUTARY_SECRET_KEY / AIRFLOW__CORE__FERNET_KEY)
    token_store_url: str | None = None
    token_store_key: str | None = None

    @property
    def base_url(self) -> str:
        host = self.host.rstrip("/")
        return host if host.endswith("/open-apis") else f"{host}/open-apis"

    def __repr__(self) -> str:  # keep the secret out of logs and tracebacks
        redis = "yes" if self.redis_url else "no"
        return f"FeishuSettings(app_id={self.app_id!r}, host={self.host!r}, auth={self.auth!r}, redis={redis})"


@dataclass(slots=True)
class Download:
    data: bytes
    file_name: str | None
    media_type: str | None


# --------------------------------------------------------------------------- shared pieces


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, FeishuError) and exc.retryable


def feishu_retry(max_attempts: int, rate_limit_max_wait: float, stats: Counter[str] | None = None) -> RetryPolicy:
    """The shared retry policy (:mod:`include.retry`) with Feishu's settings.

    A rate limit is a promise the call will succeed later: it is bounded by
    ``rate_limit_max_wait``, not by attempts; its reset hint (``x-ogw-ratelimit-reset`` or
    ``Retry-After``) is waited plus a little jitter so that workers do not return in lockstep."""
    return RetryPolicy(
        "feishu",
        retry_on=_retryable,
        max_attempts=max_attempts,
        backoff_initial=0.25,
        backoff_max=30.0,
        jitter=0.25,
        max_retry_after=rate_limit_max_wait,
        hint_jitter=0.25,
        deadline=rate_limit_max_wait,
        patient=lambda exc: isinstance(exc, FeishuRateLimited),
        stats=Counter() if stats is None else stats,
    )


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


_SSL_CONTEXT: ssl.SSLContext | None = None


def ssl_context() -> ssl.SSLContext:
    """One verified SSL context per process: building one loads the CA bundle (~0.3 s)."""
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = ssl.create_default_context(cafile=certifi.where())
    return _SSL_CONTEXT


def _redis_client(url: str | None) -> Any:
    if not url:
        return None
    return redis.Redis.from_url(url)


def rejected_twice(api: str, kind: str, *, code: int | None = None, same_token: bool = False) -> FeishuTokenRejected:
    """The permanent form of a token rejection, worded for the person reading the task log."""
    if same_token:
        why = "the token endpoint handed back the token that had just been rejected"
    else:
        why = f"a freshly issued {kind} token was rejected too"
    hint = (
        "this API may not accept tenant tokens (use the user_access_token mode) or the app lacks access"
        if kind == "tenant"
        else "this API may not accept user tokens, or the user's authorization was revoked (re-authorize)"
    )
    return FeishuTokenRejected(f"{api}: {why} ({hint}); not retrying", code=code or 99991663)


# --------------------------------------------------------------------------- client


class FeishuClient:
    """Synchronous client. Safe to share between threads of one process."""

    def __init__(self, settings: FeishuSettings, *, transport: httpx.BaseTransport | None = None) -> None:
        self.settings = settings
        if settings.max_response_bytes < 1:
            raise ValueError("max_response_bytes must be positive")
        self._http = httpx.Client(
            base_url=settings.base_url,
            timeout=settings.timeout,
            transport=transport,
            verify=ssl_context(),
            # only the codings the capped reader inflates in bounded steps
            headers={"Accept-Encoding": ACCEPT_ENCODING},
        )
        self._redis = _redis_client(settings.redis_url)
        self.budget = RequestBudget(settings.app_id, redis_client=self._redis, limits=settings.limits)
        self.tokens: TokenCache | UserTokenCache | StoredUserToken
        if settings.auth == "user":
            self.tokens = open_user_tokens(settings, self._refresh_user_token, self._redis)
        else:
            self.tokens = TokenCache(
                settings.app_id, self._fetch_token, redis_client=self._redis, safety_margin=settings.token_margin
            )
        # one policy object, so that its stats (retry/feishu/*) count every call of this client
        self.retries = feishu_retry(settings.max_attempts, settings.rate_limit_max_wait)
        self._policy = self.retries.kwargs()
        self.sent = 0  # requests sent (the permission sync reports its cost with it)

    def close(self) -> None:
        self._http.close()
        self.tokens.close()
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
            credentials = {"app_id": self.settings.app_id, "app_secret": self.settings.app_secret}
            answer = self._exchange("POST", "/auth/v3/tenant_access_token/internal", "token request", json=credentials)
            try:
                body = decode_json(answer)
            except FeishuError as exc:
                raise credentials_error(exc, self.settings.app_id, "tenant token request") from exc
            token, expire = body.get("tenant_access_token"), body.get("expire")
            if not isinstance(token, str) or not isinstance(expire, int):
                raise FeishuDataError("token response lacks tenant_access_token/expire")
            return token, expire

        for attempt in Retrying(**self._policy):
            with attempt:
                return once()
        raise AssertionError("unreachable")

    def _refresh_user_token(self, refresh_token: str) -> tuple[str, int, str, int]:
        """``POST /authen/v2/oauth/token`` with grant_type refresh_token (top-level fields, like
        the tenant call). A refusal means the user must authorize again: never retried."""
        self.budget.acquire("user_token", max_wait=self.settings.rate_limit_max_wait)
        body = {
            "grant_type": "refresh_token",
            "client_id": self.settings.app_id,
            "client_secret": self.settings.app_secret,
            "refresh_token": refresh_token,
        }
        answer = self._exchange("POST", "/authen/v2/oauth/token", "user token refresh", json=body)
        try:
            data = decode_json(answer)
        except FeishuError as exc:
            if exc.retryable and not isinstance(exc, FeishuTokenInvalid):
                raise  # 20050 / 20072, 5xx, rate limits: the refresh token was not spent
            raise refresh_refused(exc, self.settings.app_id) from exc
        token, expire = data.get("access_token"), data.get("expires_in")
        new_refresh, refresh_expire = data.get("refresh_token"), data.get("refresh_token_expires_in")
        if not (isinstance(token, str) and isinstance(expire, int) and isinstance(new_refresh, str)):
            raise FeishuDataError("user token response lacks access_token/expires_in/refresh_token")
        return token, expire, new_refresh, int(refresh_expire or 0)

    # ----------------------------------------------------------------- core call

    def _exchange(self, method: str, path: str, what: str, **kwargs: Any) -> Answer:
        """One request, its answer read capped (``max_response_bytes``; an error's 64 KiB)."""
        self.sent += 1
        try:
            with self._http.stream(method, path, **kwargs) as resp:
                return read_answer(resp, path, self.settings.max_response_bytes)
        except httpx.TransportError as exc:
            raise FeishuNetworkError(f"{what} failed: {type(exc).__name__}: {exc}") from exc

    def _send(self, method: str, path: str, token: str, **kwargs: Any) -> Answer:
        return self._exchange(method, path, f"{method} {path}", headers={"Authorization": f"Bearer {token}"}, **kwargs)

    def _authorized(self, api: str, fn: Callable[[str], _T]) -> _T:
        """Run ``fn(token)`` under the budget; on a rejected token refresh it once and retry.

        A token rejected again after the refresh (or a refresh that hands back the very token
        just rejected) is permanent: :class:`FeishuTokenRejected`, which no retry loop repeats.
        """
        rejected: str | None = None
        for refresh in (False, True):
            token = self.tokens.get()
            if token == rejected:
                raise rejected_twice(api, self.tokens.kind, same_token=True)
            try:
                self.budget.acquire(api, max_wait=self.settings.rate_limit_max_wait)
            except TimeoutError as exc:  # the shared budget stayed full: same as a server 429
                raise FeishuRateLimited(f"local request budget: {exc}") from exc
            try:
                return fn(token)
            except FeishuTokenInvalid as exc:
                self.tokens.invalidate(token)
                if refresh:
                    raise rejected_twice(api, self.tokens.kind, code=exc.code) from exc
                rejected = token
                log.info("Feishu rejected the %s token; refreshing once", self.tokens.kind)
        raise AssertionError("unreachable")

    def call(self, method: str, path: str, *, api: str, **kwargs: Any) -> dict[str, Any]:
        """A JSON business call; returns the envelope's ``data`` (``{}`` when absent)."""

        def once(token: str) -> dict[str, Any]:
            data: dict[str, Any] = decode_json(self._send(method, path, token, **kwargs)).get("data") or {}
            return data

        for attempt in Retrying(**self._policy):
            with attempt:
                return self._authorized(api, once)
        raise AssertionError("unreachable")

    def download(self, path: str, *, api: str, max_bytes: int) -> Download:
        """Stream a binary body, refusing more than ``max_bytes`` after its content-coding (an
        error answer is read up to 64 KiB, typed by its code or its status)."""

        def once(token: str) -> Download:
            headers = {"Authorization": f"Bearer {token}"}
            try:
                with self._http.stream("GET", path, headers=headers) as resp:
                    answer = read_answer(resp, path, max_bytes)
            except httpx.TransportError as exc:
                raise FeishuNetworkError(f"GET {path}: {type(exc).__name__}: {exc}") from exc
            # Any 2xx is the file, whatever its type (an uploaded .json is served as
            # application/json): what the official SDKs do (lark-oapi, oapi-sdk-go).
            if not answer.ok:
                decode_json(answer)  # raises the typed error
                raise FeishuDataError(f"download {path} answered HTTP {answer.status}", status=answer.status)
            ctype = answer.headers.get("content-type", "")
            return Download(
                data=answer.body,
                file_name=filename_from_disposition(answer.headers.get("content-disposition")),
                media_type=ctype.split(";")[0].strip() or None,
            )

        for attempt in Retrying(**self._policy):
            with attempt:
                return self._authorized(api, once)
        raise AssertionError("unreachable")

    # ----------------------------------------------------------------- drive API

    def list_folder(self, folder_token: str, *, page_size: int = 200) -> Iterator[dict[str, Any]]:
        """Every item directly in one folder, following ``page_token``.

        Created time ascending: an edit mid-walk cannot move an item across the cursor (the
        default EditedTime DESC moves it to the front, behind the cursor: issue 20.8)."""
        params = {"folder_token": folder_token, "page_size": page_size, "order_by": "CreatedTime", "direction": "ASC"}
        yield from self._pages("/drive/v1/files", api="list", params=params, items="files")

    def list_wiki_nodes(self, space_id: str, parent_node_token: str | None = None) -> Iterator[dict[str, Any]]:
        params: dict[str, Any] = {"page_size": 50}
        if parent_node_token:
            params["parent_node_token"] = parent_node_token
        yield from self._pages(f"/wiki/v2/spaces/{space_id}/nodes", api="wiki_nodes", params=params)

    def batch_query_metas(self, docs: list[tuple[str, str]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """``(metas, failed_list)`` for up to 200 ``(token, type)`` pairs."""
        body = {"request_docs": [{"doc_token": t, "doc_type": k} for t, k in docs], "with_url": True}
        data = self.call("POST", "/drive/v1/metas/batch_query", api="meta", json=body)
        return list(data.get("metas") or []), list(data.get("failed_list") or [])

    def create_export(self, token: str, doc_type: str, extension: str, sub_id: str | None = None) -> str:
        body = {"file_extension": extension, "token": token, "type": doc_type}
        if sub_id:  # CSV exports one sheet/table: without it the API answers 400 1069904
            body["sub_id"] = sub_id
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

    # ----------------------------------------------------------------- permissions, directory

    def permission_members(self, token: str, doc_type: str) -> list[dict[str, Any]]:
        """drive-v1 permission-member list: every collaborator in one answer (no paging)."""
        path = f"/drive/v1/permissions/{token}/members"
        data = self.call("GET", path, api="perm_members", params={"type": doc_type})
        return [m for m in data.get("items") or [] if isinstance(m, dict)]

    def permission_public(self, token: str, doc_type: str) -> dict[str, Any]:
        """drive-v2 permission-public get: link sharing, external access, the wiki lock."""
        data = self.call("GET", f"/drive/v2/permissions/{token}/public", api="perm_public", params={"type": doc_type})
        return dict(data.get("permission_public") or {})

    def wiki_node(self, node_token: str) -> dict[str, Any]:
        """wiki-v2 get_node: a node's space (a permission sync knows the node token only)."""
        data = self.call("GET", "/wiki/v2/spaces/get_node", api="wiki_nodes", params={"token": node_token})
        return dict(data.get("node") or {})

    def pages(self, path: str, *, api: str, params: dict[str, Any], items: str = "items") -> Iterator[dict[str, Any]]:
        """Any paged listing (the directory reads of the group sync), bounded like the others."""
        return self._pages(path, api=api, params=params, items=items)

    # ----------------------------------------------------------------- discovery helpers

    def _pages(self, path: str, *, api: str, params: dict[str, Any], items: str = "items") -> Iterator[dict[str, Any]]:
        """Follow ``page_token``/``has_more`` (drive: ``next_page_token``). An empty page with
        ``has_more`` keeps paging (the wiki API returns such pages); a repeated cursor and the page
        count are bounded, so a server that never says "done" cannot keep the walk forever."""
        page_token: str | None = None
        seen: set[str] = set()
        for _ in range(_MAX_PAGES):
            query = dict(params, **({"page_token": page_token} if page_token else {}))
            data = self.call("GET", path, api=api, params=query)
            yield from data.get(items) or []
            page_token = data.get("page_token") or data.get("next_page_token")
            if not data.get("has_more") or not page_token:
                return
            if page_token in seen:  # a cursor that comes back would page forever
                raise FeishuDataError(f"{path}: page_token {page_token[:40]!r} repeated")
            seen.add(page_token)
        raise FeishuDataError(f"{path}: more than {_MAX_PAGES} pages")

    def list_wiki_spaces(self) -> Iterator[dict[str, Any]]:
        """Every wiki space the caller can read (``GET /wiki/v2/spaces``; page_size <= 50)."""
        yield from self._pages("/wiki/v2/spaces", api="wiki_spaces", params={"page_size": 50})

    def root_folder_token(self) -> str:
        """The caller's root folder ("My Space"): ``drive/explorer/v2/root_folder/meta``."""
        data = self.call("GET", "/drive/explorer/v2/root_folder/meta", api="root_meta")
        token = data.get("token")
        if not isinstance(token, str) or not token:
            raise FeishuDataError("root_folder/meta answered without a token")
        return token

    def sheet_ids(self, spreadsheet_token: str) -> list[tuple[str, str]]:
        """``(sheet_id, title)`` of every sheet, in workbook order (``sheets/v3 .../sheets/query``)."""
        data = self.call("GET", f"/sheets/v3/spreadsheets/{spreadsheet_token}/sheets/query", api="sheets_query")
        sheets = sorted(data.get("sheets") or [], key=lambda s: s.get("index", 0))
        return [(str(s["sheet_id"]), str(s.get("title") or s["sheet_id"])) for s in sheets if s.get("sheet_id")]

    def bitable_table_ids(self, app_token: str) -> list[tuple[str, str]]:
        """``(table_id, name)`` of every table of a bitable (``bitable/v1/apps/:token/tables``)."""
        rows = self._pages(f"/bitable/v1/apps/{app_token}/tables", api="bitable_tables", params={"page_size": 100})
        return [(str(t["table_id"]), str(t.get("name") or t["table_id"])) for t in rows if t.get("table_id")]

    def docx_document(self, document_id: str) -> dict[str, Any]:
        """``{document_id, revision_id, title}`` of a new-style document (``docx/v1/documents/:id``)."""
        return dict(self.call("GET", f"/docx/v1/documents/{document_id}", api="docx_get").get("document") or {})

    def docx_raw_content(self, document_id: str) -> str:
        """The plain text of a new-style document in one call (``.../raw_content``, 5/s)."""
        data = self.call("GET", f"/docx/v1/documents/{document_id}/raw_content", api="docx_get", params={"lang": 0})
        content = data.get("content")
        if not isinstance(content, str):
            raise FeishuDataError(f"raw_content of {document_id} answered without content")
        return content
