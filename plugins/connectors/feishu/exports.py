"""Export tickets: create them for a batch, poll them concurrently, download the results.

Online documents are exported in three steps: create a task (a *ticket*), poll it until
``job_status`` is terminal, download the file (which Feishu deletes 10 minutes after the task
ends). The steps are split so the waiting can happen anywhere: in the triggerer (the
deferrable operator), or in-process (:func:`poll_in_process`) where deferral is unavailable.
A ticket is a small JSON-able record so it can travel through trigger kwargs and events.

``job_status``: 1/2 pending, 0 done, anything else a terminal failure carrying
``job_error_msg`` — recorded per document, never failing the batch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx
from tenacity import AsyncRetrying

from include.http_body import ACCEPT_ENCODING
from plugins.connectors.base import FetchError
from plugins.connectors.feishu.answers import aread_answer, decode_json
from plugins.connectors.feishu.client import FeishuClient, FeishuSettings, feishu_retry, rejected_twice, ssl_context
from plugins.connectors.feishu.errors import (
    FeishuError,
    FeishuNetworkError,
    FeishuNotFoundError,
    FeishuPermissionError,
    FeishuRateLimited,
    FeishuResponseTooLarge,
    FeishuTokenInvalid,
)
from plugins.connectors.feishu.slides import SKIP_REASON, is_slides_refusal

__all__ = [
    "DEFAULT_FORMATS",
    "AsyncExportPoller",
    "ExportTicket",
    "export_extension",
    "fetch_error_for",
    "poll_in_process",
    "poll_tickets",
    "start_export",
    "start_item_exports",
    "sub_ids",
]

log = logging.getLogger(__name__)

# slides -> pptx is not in the documented export API (type doc/docx/sheet/bitable, extension
# docx/pdf/xlsx/csv: export_task/create); it is tried once per source and a refusal remembered
# (connector.py, slides.py).
DEFAULT_FORMATS = {"doc": "docx", "docx": "docx", "sheet": "xlsx", "bitable": "xlsx", "slides": "pptx"}
PENDING_STATUSES = frozenset({1, 2})
# Terminal failures that may succeed on a later run (internal error, timeout, copy in progress).
_RETRYABLE_STATUSES = frozenset({3, 108, 122})


@dataclass(slots=True)
class ExportTicket:
    item_key: str
    doc_type: str
    extension: str
    ticket: str
    state: str = "pending"  # pending | done | failed
    job_status: int | None = None
    job_error_msg: str | None = None
    file_token: str | None = None
    file_size: int | None = None
    file_name: str | None = None
    error_reason: str | None = None
    polls: int = 0
    sub_id: str | None = None  # CSV: the one sheet / table this ticket exports
    sub_title: str | None = None
    done_at: float | None = None  # epoch s when the poller saw it done (its file expires 10 min later)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExportTicket:
        return cls(**data)

    def apply(self, result: dict[str, Any]) -> None:
        """Fold one poll result into the ticket."""
        self.polls += 1
        status = result.get("job_status")
        if not isinstance(status, int):
            self.state, self.error_reason = "failed", "export_bad_response"
            self.job_error_msg = f"poll result without an integer job_status: {result!r}"[:300]
            return
        self.job_status = status
        self.job_error_msg = result.get("job_error_msg")
        # job_status 0 before its file_token is set is still pending: what larksuite/cli does
        # (its +workbook-export keeps polling until the token arrives); the poll deadline bounds it.
        if status in PENDING_STATUSES or (status == 0 and not result.get("file_token")):
            return
        if status == 0:
            self.state = "done"
            self.done_at = time.time()
            self.file_token = str(result["file_token"])
            self.file_size = result.get("file_size")
            self.file_name = result.get("file_name")
            return
        self.state, self.error_reason = "failed", f"export_status_{status}"

    def failure(self) -> FetchError:
        msg = f"export of {self.doc_type} {self.item_key} ended with job_status={self.job_status}: {self.job_error_msg}"
        if self.error_reason in ("not_found", "permission_denied", "export_poll_error", "export_bad_response"):
            msg = f"export of {self.doc_type} {self.item_key}: {self.error_reason}: {self.job_error_msg}"
        if self.error_reason == "export_timeout":
            msg = f"export of {self.doc_type} {self.item_key} still pending at the deadline ({self.polls} polls)"
        retryable = self.job_status in _RETRYABLE_STATUSES or self.error_reason in (
            "export_timeout",
            "export_poll_error",
        )
        return FetchError(msg, reason=self.error_reason or "export_failed", retryable=retryable)


def fetch_error_for(exc: FeishuError, what: str) -> FetchError:
    """Map a client error onto the engine's per-item failure."""
    if isinstance(exc, FeishuPermissionError):
        return FetchError(f"{what}: {exc}", reason="permission_denied", retryable=False)
    if isinstance(exc, FeishuNotFoundError):
        return FetchError(f"{what}: {exc}", reason="not_found", retryable=False)
    if isinstance(exc, FeishuResponseTooLarge):
        return FetchError(f"{what}: {exc}", reason="too_large", retryable=False)
    if isinstance(exc, FeishuRateLimited):
        return FetchError(f"{what}: {exc}", reason="rate_limited", retryable=True)
    return FetchError(f"{what}: {type(exc).__name__}: {exc}", reason="feishu_error", retryable=exc.retryable)


def export_extension(doc_type: str, formats: dict[str, str]) -> str:
    ext = formats.get(doc_type) or DEFAULT_FORMATS.get(doc_type)
    if not ext:
        raise FetchError(f"type {doc_type!r} cannot be exported", reason="unsupported_type", retryable=False)
    return ext


def sub_ids(client: FeishuClient, item_key: str, doc_type: str) -> list[tuple[str, str]]:
    """The sheets (sheet) or tables (bitable) a CSV export must name one by one in ``sub_id``."""
    try:
        found = client.sheet_ids(item_key) if doc_type == "sheet" else client.bitable_table_ids(item_key)
    except FeishuError as exc:
        raise fetch_error_for(exc, f"listing the sheets of {doc_type} {item_key}") from exc
    if not found:
        raise FetchError(f"{doc_type} {item_key} has no sheet to export", reason="empty_document", retryable=False)
    return found


def start_export(
    client: FeishuClient,
    item_key: str,
    doc_type: str,
    formats: dict[str, str],
    sub: tuple[str, str] | None = None,
) -> ExportTicket:
    """Create one export task. Raises FetchError when the type cannot be exported or Feishu refuses."""
    ext = export_extension(doc_type, formats)
    sub_id, sub_title = sub or (None, None)
    try:
        ticket = client.create_export(item_key, doc_type, ext, sub_id=sub_id)
    except FeishuError as exc:
        if doc_type == "slides" and is_slides_refusal(exc):  # not in the documented export API
            raise FetchError(f"Feishu does not export slides: {exc}", reason=SKIP_REASON, retryable=False) from exc
        raise fetch_error_for(exc, f"creating export of {doc_type} {item_key}") from exc
    return ExportTicket(
        item_key=item_key, doc_type=doc_type, extension=ext, ticket=ticket, sub_id=sub_id, sub_title=sub_title
    )


def start_item_exports(
    client: FeishuClient, item_key: str, doc_type: str, formats: dict[str, str]
) -> list[ExportTicket]:
    """Every ticket one item needs: one, or one per sheet/table for CSV."""
    if export_extension(doc_type, formats) == "csv" and doc_type in ("sheet", "bitable"):
        return [start_export(client, item_key, doc_type, formats, sub) for sub in sub_ids(client, item_key, doc_type)]
    return [start_export(client, item_key, doc_type, formats)]


class AsyncExportPoller:
    """Polls export tickets over ``httpx.AsyncClient``, sharing token cache and budgets.

    Token fetches and Redis budget calls are short and run in a worker thread, so the event
    loop (the triggerer's, shared by many triggers) never blocks on them.
    """

    def __init__(self, settings: FeishuSettings, *, client: FeishuClient | None = None) -> None:
        self.settings = settings
        # Token cache + budget come from a sync client (their I/O goes to threads); a caller
        # that already has one lends it.
        self._owns_sync = client is None
        self._sync = client or FeishuClient(settings)
        self._http = httpx.AsyncClient(
            base_url=settings.base_url,
            timeout=settings.timeout,
            verify=ssl_context(),
            headers={"Accept-Encoding": ACCEPT_ENCODING},  # what the capped reader decodes
        )
        # this poller's settings, counted with the client's calls (retry/feishu/*)
        retries = feishu_retry(settings.max_attempts, settings.rate_limit_max_wait, self._sync.retries.stats)
        self._policy = retries.kwargs()

    async def aclose(self) -> None:
        await self._http.aclose()
        if self._owns_sync:
            await asyncio.to_thread(self._sync.close)

    async def _poll_once(self, ticket: ExportTicket) -> dict[str, Any]:
        rejected: str | None = None
        tokens = self._sync.tokens
        for refresh in (False, True):
            token = await asyncio.to_thread(tokens.get)
            if token == rejected:
                raise rejected_twice("export_poll", tokens.kind, same_token=True)
            try:
                await self._sync.budget.acquire_async("export_poll", max_wait=self.settings.rate_limit_max_wait)
            except TimeoutError as exc:
                raise FeishuRateLimited(f"local request budget: {exc}") from exc
            path = f"/drive/v1/export_tasks/{ticket.ticket}"
            try:
                async with self._http.stream(
                    "GET", path, params={"token": ticket.item_key}, headers={"Authorization": f"Bearer {token}"}
                ) as resp:
                    answer = await aread_answer(resp, path, self.settings.max_response_bytes)
            except httpx.TransportError as exc:
                raise FeishuNetworkError(f"poll {ticket.ticket}: {type(exc).__name__}") from exc
            try:
                return dict((decode_json(answer).get("data") or {}).get("result") or {})
            except FeishuTokenInvalid as exc:
                await asyncio.to_thread(tokens.invalidate, token)
                if refresh:
                    raise rejected_twice("export_poll", tokens.kind, code=exc.code) from exc
                rejected = token
        raise AssertionError("unreachable")

    async def poll(self, ticket: ExportTicket) -> dict[str, Any]:
        async for attempt in AsyncRetrying(**self._policy):
            with attempt:
                return await self._poll_once(ticket)
        raise AssertionError("unreachable")


async def poll_tickets(
    poller: AsyncExportPoller,
    tickets: list[ExportTicket],
    *,
    deadline: float,
    interval: float = 1.0,
    max_interval: float = 15.0,
) -> list[ExportTicket]:
    """Poll every pending ticket concurrently until each is terminal or ``deadline`` (epoch s).

    Each ticket backs off on its own (interval doubling up to ``max_interval``): small documents
    finish in a poll or two, large ones are not hammered.
    """

    async def follow(t: ExportTicket) -> None:
        delay = interval
        while t.state == "pending":
            try:
                t.apply(await poller.poll(t))
            except FeishuError as exc:
                # Deleted or unshared while rendering is final; anything else may pass next run.
                reason = "export_poll_error"
                if isinstance(exc, FeishuNotFoundError):
                    reason = "not_found"
                elif isinstance(exc, FeishuPermissionError):
                    reason = "permission_denied"
                t.state, t.error_reason, t.job_error_msg = "failed", reason, str(exc)[:300]
                return
            if t.state != "pending":
                return
            if time.time() + delay > deadline:
                t.state, t.error_reason = "failed", "export_timeout"
                return
            await asyncio.sleep(delay)
            delay = min(max_interval, delay * 2)

    await asyncio.gather(*(follow(t) for t in tickets if t.state == "pending"))
    return tickets


def poll_in_process(
    client: FeishuClient, tickets: list[ExportTicket], *, deadline: float, interval: float, max_interval: float
) -> list[ExportTicket]:
    """The non-deferrable path: the same concurrent polling, run in this process."""

    async def run() -> list[ExportTicket]:
        poller = AsyncExportPoller(client.settings, client=client)
        try:
            return await poll_tickets(poller, tickets, deadline=deadline, interval=interval, max_interval=max_interval)
        finally:
            await poller.aclose()

    return asyncio.run(run())
