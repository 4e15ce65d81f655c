"""A small synchronous Yuque OpenAPI v2 client over httpx.

Every request sends ``X-Auth-Token`` and a ``User-Agent`` (Yuque refuses requests without one),
takes one unit from the token's shared hourly :class:`RequestBudget`, and maps error bodies
``{"status", "message"}`` to the typed errors of :mod:`.errors`. 401/403/404/422 are final; 429,
5xx and transport failures are retried with exponential backoff and jitter, and a 429's
``Retry-After`` is honoured (capped, so a hostile value cannot park a worker for hours).

Every body is read as a stream and counted after its content-coding (``max_response_bytes``,
64 MiB by default; an error answer only needs its message, so it is cut at 64 KiB): a server
cannot make a worker hold more than the limit, and a body over it is the final
:class:`.errors.YuqueResponseTooLarge`, naming the endpoint and the limit.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from include.http_body import (
    ACCEPT_ENCODING,
    BodyTooLarge,
    UndecodableBody,
    UnsupportedEncoding,
    read_capped,
)
from include.retry import RetryPolicy
from plugins.connectors.yuque.budget import RequestBudget
from plugins.connectors.yuque.errors import (
    YuqueBudgetExhausted,
    YuqueError,
    YuqueRedirectError,
    YuqueResponseTooLarge,
    YuqueTransportError,
    error_for_response,
)

__all__ = ["DEFAULT_MAX_RESPONSE_BYTES", "DEFAULT_USER_AGENT", "DocListing", "YuqueClient", "api_base_url"]

log = logging.getLogger(__name__)

DEFAULT_USER_AGENT = "Tributary-Yuque-Sync/0.1 (+https://github.com/tributary)"
PAGE_LIMIT = 100  # Yuque's hard cap since late 2023; above it the API answers 422
# The largest JSON answer read: a doc detail carries its whole body (a lakesheet's compressed
# wrapper and its body_sheet besides), so this matches the default ``max_sheet_bytes``.
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
# An error answer is {"status", "message"}: what is past this is never read.
_ERROR_BODY_BYTES = 64 * 1024


def api_base_url(host: str) -> str:
    """``www.yuque.com`` / ``https://team.yuque.com`` / ``http://127.0.0.1:8080/api/v2`` -> API base."""
    host = host.strip().rstrip("/")
    if "://" not in host:
        host = f"https://{host}"
    if not host.endswith("/api/v2"):
        host = f"{host}/api/v2"
    return host


@dataclass(slots=True)
class DocListing:
    """All records of one doc listing, and whether the walk provably saw every one."""

    records: list[Any] = field(default_factory=list)
    total: int | None = None
    complete: bool = True
    reason: str | None = None


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:  # also UnicodeDecodeError
        return None


def _retryable(exc: BaseException) -> bool:
    # an exhausted budget refills on the hour: waiting inside a task would only hold a worker
    return isinstance(exc, YuqueError) and exc.retryable and not isinstance(exc, YuqueBudgetExhausted)


def _refuse_redirect(response: httpx.Response) -> None:
    if response.is_redirect or 300 <= response.status_code < 400:
        location = response.headers.get("location")
        raise YuqueRedirectError(
            f"Yuque answered {response.status_code} redirecting to {location or '(no Location)'}; "
            "not followed (the token stays on its configured host): fix the Connection host",
            status=response.status_code,
            location=location,
        )


class YuqueClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        user_agent: str = DEFAULT_USER_AGENT,
        timeout: float = 30.0,
        max_attempts: int = 4,
        backoff_initial: float = 0.5,
        backoff_max: float = 8.0,
        max_retry_after: float = 60.0,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        budget: RequestBudget | None = None,
        bind_account: bool = False,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not token:
            raise ValueError("a Yuque token is required")
        self.base_url = api_base_url(base_url)
        self.budget = budget
        # Yuque's limit is per account: learn the token's account (one /user) before counting
        self._bind_pending = bind_account and budget is not None
        self.retry_policy = RetryPolicy(
            "yuque",
            retry_on=_retryable,
            max_attempts=max_attempts,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
            jitter=backoff_initial,
            max_retry_after=max_retry_after,
        )
        if max_response_bytes < 1:
            raise ValueError("max_response_bytes must be positive")
        self.max_response_bytes = max_response_bytes
        self.sent = 0  # HTTP requests sent (retries included): what a permission sync reports
        self._account: dict[str, Any] | None = None  # the binding /user answer
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={
                "X-Auth-Token": token,
                "User-Agent": user_agent or DEFAULT_USER_AGENT,
                "Accept": "application/json",
                "Accept-Encoding": ACCEPT_ENCODING,
            },
            timeout=timeout,
            follow_redirects=False,
        )

    # ------------------------------------------------------------------ transport

    def _bind(self) -> None:
        """Move the budget to the token's account (``/user`` id; a team token's is the group's)."""
        assert self.budget is not None
        self._bind_pending = False
        try:
            user = self._send("/user", None, counted=False).get("data")
        except YuqueError:
            self._bind_pending = True  # bound on a later call
            raise
        if isinstance(user, dict):
            self._account = user
        if isinstance(user, dict) and user.get("id") is not None:
            self.budget.bind(str(user["id"]))
        self.budget.acquire()  # the /user request itself, counted (and paced) once bound

    def _send(self, path: str, params: dict[str, Any] | None, *, counted: bool = True) -> Any:
        if self._bind_pending:
            self._bind()
        if self.budget is not None and counted:
            self.budget.acquire()
        self.sent += 1
        try:
            with self._http.stream("GET", path, params=params) as response:
                _refuse_redirect(response)
                raw = self._read(response, path)
        except httpx.HTTPError as exc:
            raise YuqueTransportError(f"Yuque request failed: {type(exc).__name__}") from exc
        body = _json_or_none(raw)
        if response.status_code >= 400:
            text = raw.decode("utf-8", "replace")
            raise error_for_response(response.status_code, body if body is not None else text, response.headers)
        if not isinstance(body, dict) or "data" not in body:
            raise YuqueTransportError(f"Yuque answered {response.status_code} without a JSON 'data' envelope")
        return body

    def _read(self, response: httpx.Response, path: str) -> bytes:
        """The body, at most ``max_response_bytes`` (an error's at most 64 KiB, the rest dropped:
        its status alone types the error)."""
        failed = response.status_code >= 400
        limit = min(self.max_response_bytes, _ERROR_BODY_BYTES) if failed else self.max_response_bytes
        try:
            return read_capped(response, limit)
        except BodyTooLarge as exc:
            if failed:
                return b""
            raise YuqueResponseTooLarge(
                f"Yuque {path} answered a body over the {limit}-byte limit (max_response_bytes); not read further",
                endpoint=path,
                limit=limit,
                status=response.status_code,
            ) from exc
        except (UndecodableBody, UnsupportedEncoding) as exc:
            raise YuqueTransportError(f"Yuque {path}: {exc}", status=response.status_code) from exc

    def get(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """GET ``path`` (relative to /api/v2) and return the JSON envelope ``{"data", "meta"?}``."""
        # the sleep is looked up per call: a caller (a test) may swap it on a live client
        retrying = self.retry_policy.retrying(sleep=self._sleep)
        envelope: dict[str, Any] = retrying(self._send, path, params)
        return envelope

    # ------------------------------------------------------------------ endpoints

    def _data(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        data: dict[str, Any] = self.get(path, params)["data"]
        return data

    def get_user(self) -> dict[str, Any]:
        return self._data("/user")

    def account(self) -> dict[str, Any]:
        """The token's account (``/user``): the answer the budget was bound with when there is
        one (the same request, not sent twice), else read now."""
        if self._bind_pending:
            self._bind()
        return self._account if self._account is not None else self.get_user()

    def get_repo(self, ref: str | int) -> dict[str, Any]:
        return self._data(f"/repos/{ref}")

    def iter_repos(self, login: str, *, group: bool = False) -> Iterator[Any]:
        """Every repo of a user or group, paging until a short page."""
        route = "groups" if group else "users"
        offset = 0
        while True:
            page = self.get(f"/{route}/{login}/repos", {"offset": offset, "limit": PAGE_LIMIT})["data"]
            if not isinstance(page, list):
                raise YuqueTransportError("repo listing 'data' is not a list")
            yield from page
            if len(page) < PAGE_LIMIT:
                return
            offset += len(page)

    def list_docs(
        self, repo: str | int, *, deleted: bool = False, changed_at_gte: str | None = None, page_size: int = PAGE_LIMIT
    ) -> DocListing:
        """Page through a repo's docs with offset/limit until exhausted, checked against meta.total.

        The listing is *complete* only if ``meta.total`` stayed the same on every page and equals
        the number of distinct ids seen: docs created or deleted while we page shift offsets, and
        a walk that may have missed one must not be used to infer deletions.
        """
        page_size = min(max(1, page_size), PAGE_LIMIT)
        listing = DocListing()
        seen: set[Any] = set()
        totals: set[int] = set()
        offset = 0
        params: dict[str, Any] = {"limit": page_size}
        if deleted:
            params["deleted"] = "true"
        if changed_at_gte:
            params["changed_at_gte"] = changed_at_gte  # ISO-8601, "YYYY-MM-DDTHH:mm:ss.sssZ" (spec)
        while True:
            envelope = self.get(f"/repos/{repo}/docs", {**params, "offset": offset})
            page = envelope.get("data")
            meta: dict[str, Any] = envelope["meta"] if isinstance(envelope.get("meta"), dict) else {}
            total = meta.get("total")
            listing.total = total if isinstance(total, int) else None
            if listing.total is not None:
                totals.add(listing.total)
            if not isinstance(page, list):
                raise YuqueTransportError("doc listing 'data' is not a list")
            for record in page:
                listing.records.append(record)
                seen.add(record.get("id") if isinstance(record, dict) else id(record))
            offset += len(page)
            if len(page) < page_size or (listing.total is not None and offset >= listing.total):
                break
        if len(totals) > 1:
            # a doc created or deleted mid-walk shifts offsets: one may have slipped past unseen
            listing.complete = False
            listing.reason = f"meta.total changed while paging ({min(totals)}..{max(totals)})"
        elif listing.total is not None and len(seen) != listing.total:
            listing.complete = False
            listing.reason = f"saw {len(seen)} distinct docs, meta.total says {listing.total}"
        return listing

    def get_doc(self, repo: str | int, doc: str | int, **params: Any) -> dict[str, Any]:
        return self._data(f"/repos/{repo}/docs/{doc}", params or None)

    def get_doc_by_id(self, doc: int) -> dict[str, Any]:
        """A doc's detail by its global id (``/repos/docs/:id``), whichever repo holds it now."""
        return self._data(f"/repos/docs/{doc}")

    def iter_table_records(self, repo: str | int, doc: str | int, first: dict[str, Any]) -> Iterator[Any]:
        """Rows of a data table: the detail already holds page 1 of ``body_table``; page the rest."""
        page_data = first
        # keep the server's page size: a different size would misalign pages 2..n with page 1
        size: int = first["pageSize"] if isinstance(first.get("pageSize"), int) else 100
        page: int = first["page"] if isinstance(first.get("page"), int) else 1
        seen = 0
        while True:
            records = page_data.get("records") or []
            yield from records
            seen += len(records)
            total = page_data.get("totalCount")
            if not records or not isinstance(total, int) or seen >= total:
                return
            page += 1
            detail = self.get_doc(repo, doc, page=page, page_size=size)
            page_data = json.loads(detail.get("body_table") or "{}")

    def iter_group_users(self, login: str) -> Iterator[Any]:
        """Every member record (V2GroupUser: ``role``, ``user``) of a group. The spec fixes the
        page size at 100 and pages by ``offset`` only; a short page is the last one."""
        offset = 0
        while True:
            page = self.get(f"/groups/{login}/users", {"offset": offset})["data"]
            if not isinstance(page, list):
                raise YuqueTransportError("group member listing 'data' is not a list")
            yield from page
            if len(page) < PAGE_LIMIT:
                return
            offset += len(page)

    def get_toc(self, repo: str | int) -> list[Any]:
        data = self.get(f"/repos/{repo}/toc")["data"]
        return data if isinstance(data, list) else []

    def close(self) -> None:
        self._http.close()
        if self.budget is not None:
            self.budget.close()

    def __enter__(self) -> YuqueClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
