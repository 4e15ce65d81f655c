"""The in-task fetch path: every export goes create -> poll -> download on its own, at once.

An exported file is deleted 10 minutes after its task ends, and create, poll and download are
each limited to 100 calls/min per app (export-user-guide; drive-v1 export_task pages). Creating
a whole batch, polling it and only then downloading (and several batches doing so in parallel
against one budget) lets a large first sync age files past the expiry. Here each document is
downloaded as soon as its ticket is done, and at most ``max_in_flight`` tickets exist at a time,
so a finished file waits for at most the ``max_in_flight`` downloads ahead of it, whatever the
batch size. The blocking client calls (whose budget waits sleep) run in a dedicated thread pool,
the polls on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from plugins.connectors.base import FetchError
from plugins.connectors.feishu.client import Download, FeishuClient
from plugins.connectors.feishu.errors import FeishuError, FeishuParamError
from plugins.connectors.feishu.exports import (
    AsyncExportPoller,
    ExportTicket,
    export_extension,
    fetch_error_for,
    poll_tickets,
    start_export,
    sub_ids,
)

__all__ = ["ExportJob", "ExportResult", "download_ticket", "join_csv", "run_exports"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ExportJob:
    item_key: str
    doc_type: str
    sub: tuple[str, str] | None = None  # (sub_id, title) for a CSV part


@dataclass(slots=True)
class ExportResult:
    item_key: str
    parts: list[tuple[ExportTicket, Download]] = field(default_factory=list)
    error: FetchError | None = None


def download_ticket(client: FeishuClient, ticket: ExportTicket, max_bytes: int) -> Download:
    """Download a done ticket's file, mapping an expired file (400 1060001) to a retryable failure."""
    try:
        return client.download_export(ticket.file_token or "", max_bytes=max_bytes)
    except FeishuParamError as exc:
        if exc.code != 1060001:
            raise fetch_error_for(exc, f"downloading export of {ticket.item_key}") from exc
        raise FetchError(
            f"export file of {ticket.item_key} expired before download: {exc}",
            reason="export_file_expired",
            retryable=True,
        ) from exc
    except FeishuError as exc:
        raise fetch_error_for(exc, f"downloading export of {ticket.item_key}") from exc


def join_csv(parts: list[tuple[ExportTicket, Download]]) -> bytes:
    """One CSV per sheet/table, separated by an empty line (a CSV reader sees one table)."""
    blocks = [dl.data.rstrip(b"\r\n") for _t, dl in parts]
    return b"\r\n\r\n".join(blocks) + b"\r\n"


def _plan(client: FeishuClient, item_key: str, doc_type: str, formats: dict[str, str]) -> list[ExportJob]:
    if export_extension(doc_type, formats) == "csv" and doc_type in ("sheet", "bitable"):
        return [ExportJob(item_key, doc_type, sub) for sub in sub_ids(client, item_key, doc_type)]
    return [ExportJob(item_key, doc_type)]


async def _one(
    job: ExportJob,
    *,
    client: FeishuClient,
    poller: AsyncExportPoller,
    pool: ThreadPoolExecutor,
    formats: dict[str, str],
    poll: dict[str, float],
    max_bytes: int,
) -> tuple[ExportTicket, Download]:
    loop = asyncio.get_running_loop()
    ticket = await loop.run_in_executor(
        pool, lambda: start_export(client, job.item_key, job.doc_type, formats, job.sub)
    )
    # Each ticket gets the whole wait from its own creation: a ticket created late in a large
    # batch (the create budget is 100/min) must not inherit a deadline that is nearly spent.
    span = poll["deadline"] - poll["started"]
    await poll_tickets(
        poller, [ticket], deadline=time.time() + span, interval=poll["interval"], max_interval=poll["max_interval"]
    )
    if ticket.state != "done":
        if ticket.state == "pending":
            ticket.state, ticket.error_reason = "failed", "export_timeout"
        raise ticket.failure()
    return ticket, await loop.run_in_executor(pool, download_ticket, client, ticket, max_bytes)


async def _run(
    client: FeishuClient,
    items: list[tuple[str, str]],
    *,
    formats: dict[str, str],
    poll: dict[str, float],
    max_bytes: int,
    max_in_flight: int,
    on_done: Callable[[ExportResult], Any] | None,
) -> list[ExportResult]:
    results = {key: ExportResult(key) for key, _ in items}
    gate = asyncio.Semaphore(max_in_flight)
    poller = AsyncExportPoller(client.settings, client=client)
    pool = ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix="feishu-export")
    loop = asyncio.get_running_loop()

    async def item(key: str, doc_type: str) -> None:
        res = results[key]
        try:
            async with gate:
                jobs = await loop.run_in_executor(pool, _plan, client, key, doc_type, formats)
            for job in jobs:  # the parts of one item in order; other items run alongside
                async with gate:
                    res.parts.append(
                        await _one(
                            job,
                            client=client,
                            poller=poller,
                            pool=pool,
                            formats=formats,
                            poll=poll,
                            max_bytes=max_bytes,
                        )
                    )
        except FetchError as exc:
            res.error, res.parts = exc, []
        if on_done is not None:
            on_done(res)

    try:
        await asyncio.gather(*(item(key, doc_type) for key, doc_type in items))
    finally:
        await poller.aclose()
        pool.shutdown(wait=True)
    return [results[key] for key, _ in items]


def run_exports(
    client: FeishuClient,
    items: list[tuple[str, str]],
    *,
    formats: dict[str, str],
    deadline: float,
    interval: float,
    max_interval: float,
    max_bytes: int,
    max_in_flight: int = 20,
    on_done: Callable[[ExportResult], Any] | None = None,
) -> list[ExportResult]:
    """Export ``(item_key, doc_type)`` pairs, each downloaded the moment its ticket is done."""
    started = time.perf_counter()
    poll = {"deadline": deadline, "started": time.time(), "interval": interval, "max_interval": max_interval}
    out = asyncio.run(
        _run(
            client, items, formats=formats, poll=poll, max_bytes=max_bytes,
            max_in_flight=max(1, int(max_in_flight)), on_done=on_done,
        )
    )  # fmt: skip
    log.info("%d exports in %.1f s", len(items), time.perf_counter() - started)
    return out
