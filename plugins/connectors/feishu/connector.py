"""The Feishu drive connector (``kind: feishu``).

Options (``SourceConfig.options``)::

    folders: [fldcn...]            # drive folders shared with the app, walked recursively
    wiki_spaces: []                # optional wiki space ids
    types: [doc, docx, sheet, bitable, file]
    export_formats: {doc: docx, docx: docx, sheet: xlsx, bitable: xlsx}
    max_file_bytes: 104857600      # downloads beyond this are refused (streamed, never buffered whole)
    export_deadline_seconds: 900   # overall wait for one batch's exports
    export_poll_interval: 1.0      # first poll delay, doubling per ticket up to the max
    export_poll_max_interval: 8.0
    deferrable: true               # wait for exports in the triggerer
    client: {timeout: 30, max_attempts: 5, rate_limit_max_wait: 300, token_margin: 300}
    rate_limits: {file_download: [[5, 1], [10000, 86400]]}   # per-API budget overrides

Item key = the file token (a shortcut's *target* token). Version evidence = the listing's
``modified_time``; changed means it differs from the stored one, so unchanged items cost no
export. A run window (backfill data interval, or a scheduled window widened by the engine's
``window_overlap_minutes``) limits the reported changes to items modified inside it. Discovery is complete only when every folder listed; with an incomplete walk, known
items that were not seen are re-checked with the batch meta query and those in its
``failed_list`` (deleted, unshared) are reported as deletions.
"""

from __future__ import annotations

import mimetypes
import time
from datetime import datetime
from typing import Any, ClassVar

from include.contract import Change, ChangeKind, RawDocument, VersionEvidence
from plugins.connectors.base import Connector, Discovery, DiscoveryRequest, FetchError, register_connector
from plugins.connectors.feishu.client import FeishuClient, FeishuSettings
from plugins.connectors.feishu.errors import FeishuError, FeishuParamError
from plugins.connectors.feishu.exports import (
    DEFAULT_FORMATS,
    ExportTicket,
    fetch_error_for,
    poll_in_process,
    start_export,
)
from plugins.connectors.feishu.listing import DriveItem, walk_drive

__all__ = ["FeishuConnector"]

_MIME = {
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "pdf": "application/pdf",
    "csv": "text/csv",
}
_GONE_CODES = {970003, 970005}


@register_connector
class FeishuConnector(Connector):
    kind: ClassVar[str] = "feishu"
    fetch_operator: ClassVar[str | None] = "plugins.connectors.feishu.operators.FeishuExportFetchOperator"

    def __init__(self, source, context=None) -> None:
        super().__init__(source, context)
        self.options: dict[str, Any] = dict(source.options)
        self._client: FeishuClient | None = None
        self._settings: FeishuSettings | None = None

    # ----------------------------------------------------------------- plumbing

    @property
    def conn_id(self) -> str:
        return self.source.conn_id or "feishu_default"

    @property
    def redis_url(self) -> str | None:
        if self.context.redis_url:
            return self.context.redis_url
        from include.settings import get_settings

        return get_settings().redis_url

    def client_overrides(self) -> dict[str, Any]:
        overrides = {
            k: v
            for k, v in (self.options.get("client") or {}).items()
            if k in ("timeout", "max_attempts", "rate_limit_max_wait", "token_margin")
        }
        if self.options.get("rate_limits"):
            overrides["limits"] = self.options["rate_limits"]
        return overrides

    @property
    def settings(self) -> FeishuSettings:
        if self._settings is None:
            from plugins.connectors.feishu.hook import settings_from_connection

            self._settings = settings_from_connection(self.conn_id, redis_url=self.redis_url, **self.client_overrides())
        return self._settings

    @property
    def client(self) -> FeishuClient:
        if self._client is None:
            self._client = FeishuClient(self.settings)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def input_dataset(self) -> tuple[str, str]:
        return (self.settings.host if self._settings else "feishu", ",".join(self.options.get("folders") or []))

    @property
    def formats(self) -> dict[str, str]:
        return {**DEFAULT_FORMATS, **(self.options.get("export_formats") or {})}

    # ----------------------------------------------------------------- discover

    def _in_window(self, item: DriveItem, start: datetime | None, end: datetime | None) -> bool:
        if start is None and end is None:
            return True
        try:
            modified = int(item.modified_time)
        except ValueError:
            return True  # no usable time: do not silently drop the item
        if start is not None and modified < start.timestamp():
            return False
        return not (end is not None and modified > end.timestamp())

    def discover(self, request: DiscoveryRequest) -> Discovery:
        started = time.perf_counter()
        walk = walk_drive(
            self.client,
            self.options.get("folders") or [],
            wiki_spaces=self.options.get("wiki_spaces") or [],
            types=self.options.get("types") or ("doc", "docx", "sheet", "bitable", "file"),
        )
        changes: list[Change] = []
        counts = {"new": 0, "changed": 0, "unchanged": 0, "outside_window": 0, "deleted": 0}
        for key, item in walk.items.items():
            if request.only_keys and key not in request.only_keys:
                continue
            if not self._in_window(item, request.window_start, request.window_end):
                counts["outside_window"] += 1
                continue
            known = request.known.get(key)
            if known is None:
                kind = ChangeKind.NEW
            elif known.modified_time != item.modified_time:
                kind = ChangeKind.CHANGED
            else:
                kind = ChangeKind.UNCHANGED
            counts[kind.value] += 1
            changes.append(
                Change(
                    item_key=key,
                    kind=kind,
                    version=VersionEvidence(modified_time=item.modified_time),
                    url=item.url,
                    title=item.name,
                    reason=None if kind is ChangeKind.NEW else f"modified_time {item.modified_time}",
                    metadata={"feishu_type": item.type, "path": list(item.path), "via": item.via},
                )
            )
        if not walk.complete:
            changes += self._confirm_missing(set(request.known) - set(walk.items), request.known)
            counts["deleted"] = sum(1 for c in changes if c.kind is ChangeKind.DELETED)
        stats = {
            **counts,
            "listed": len(walk.items),
            "folders": walk.folders,
            "skipped_types": walk.skipped_types,
            "errors": walk.errors[:20],
            "list_ms": round((time.perf_counter() - started) * 1000, 1),
        }
        return Discovery(
            changes=changes, complete=walk.complete, all_keys=set(walk.items) if walk.complete else None, stats=stats
        )

    def _confirm_missing(self, missing: set[str], known: dict) -> list[Change]:
        """After an incomplete walk: ask the meta API about known items we did not see."""
        out: list[Change] = []
        keys = sorted(missing)
        for i in range(0, len(keys), 200):
            # The stored type is not part of VersionEvidence; try the common online types.
            batch = keys[i : i + 200]
            gone: dict[str, set[int]] = {k: set() for k in batch}
            for doc_type in ("docx", "doc", "sheet", "bitable", "file"):
                try:
                    metas, failed = self.client.batch_query_metas([(k, doc_type) for k in batch if k in gone])
                except FeishuError:
                    return out  # cannot confirm anything: delete nothing
                for m in metas:
                    gone.pop(m.get("doc_token"), None)
                for f in failed:
                    if f.get("token") in gone:
                        gone[f["token"]].add(int(f.get("code", 0)))
                if not gone:
                    break
            for key, codes in gone.items():
                if codes and codes <= _GONE_CODES:
                    reason = (
                        "no permission (970003)" if 970003 in codes and 970005 not in codes else "deleted at source"
                    )
                    out.append(Change(item_key=key, kind=ChangeKind.DELETED, reason=reason))
        return out

    # ----------------------------------------------------------------- fetch

    def _raw(self, change: Change, data: bytes, file_name: str, media_type: str | None, **meta: Any) -> RawDocument:
        return RawDocument(
            item_key=change.item_key,
            data=data,
            file_name=file_name,
            media_type=media_type,
            url=change.url,
            title=change.title,
            version=change.version,
            metadata={**change.metadata, **meta},
        )

    def download_file_item(self, change: Change) -> RawDocument:
        try:
            dl = self.client.download_file(change.item_key, max_bytes=self.max_bytes)
        except FeishuError as exc:
            raise fetch_error_for(exc, f"downloading file {change.item_key}") from exc
        name = dl.file_name or change.title or change.item_key
        media = dl.media_type if dl.media_type not in (None, "application/octet-stream") else None
        return self._raw(change, dl.data, name, media or mimetypes.guess_type(name)[0])

    def download_export(self, change: Change, ticket: ExportTicket) -> RawDocument:
        try:
            dl = self.client.download_export(ticket.file_token or "", max_bytes=self.max_bytes)
        except FeishuParamError as exc:
            if exc.code != 1060001:
                raise fetch_error_for(exc, f"downloading export of {change.item_key}") from exc
            # The file is deleted 10 minutes after the task ends; the next run exports again.
            raise FetchError(
                f"export file of {change.item_key} expired before download: {exc}",
                reason="export_file_expired",
                retryable=True,
            ) from exc
        except FeishuError as exc:
            raise fetch_error_for(exc, f"downloading export of {change.item_key}") from exc
        title = change.title or ticket.file_name or change.item_key
        name = title if title.lower().endswith(f".{ticket.extension}") else f"{title}.{ticket.extension}"
        return self._raw(change, dl.data, name, _MIME.get(ticket.extension), export_ticket=ticket.ticket)

    @property
    def max_bytes(self) -> int:
        return int(self.options.get("max_file_bytes", 100 * 1024 * 1024))

    def is_export(self, change: Change) -> bool:
        return change.metadata.get("feishu_type", "file") != "file"

    def start_exports(self, changes: list[Change]) -> tuple[list[ExportTicket], list[tuple[str, FetchError]]]:
        tickets, failures = [], []
        for change in changes:
            if not self.is_export(change):
                continue
            try:
                tickets.append(start_export(self.client, change.item_key, change.metadata["feishu_type"], self.formats))
            except FetchError as exc:
                failures.append((change.item_key, exc))
        return tickets, failures

    def poll_exports(self, tickets: list[ExportTicket]) -> list[ExportTicket]:
        """In-process polling (the non-deferred path)."""
        if not any(t.state == "pending" for t in tickets):
            return tickets
        return poll_in_process(self.client, tickets, **self.poll_kwargs())

    def poll_kwargs(self) -> dict[str, float]:
        return {
            "deadline": time.time() + float(self.options.get("export_deadline_seconds", 900)),
            "interval": float(self.options.get("export_poll_interval", 1.0)),
            "max_interval": float(self.options.get("export_poll_max_interval", 8.0)),
        }

    def finish_batch(
        self, changes: list[Change], tickets: list[ExportTicket]
    ) -> tuple[list[RawDocument], list[tuple[str, FetchError]]]:
        """Download finished exports (first: their files expire) and plain files."""
        by_key = {t.item_key: t for t in tickets}
        docs, failures = [], []
        ordered = sorted(changes, key=lambda c: not self.is_export(c))
        for change in ordered:
            try:
                if not self.is_export(change):
                    docs.append(self.download_file_item(change))
                    continue
                ticket = by_key.get(change.item_key)
                if ticket is None:
                    continue  # creation failed: already recorded
                if ticket.state == "pending":  # the waiter gave up without a verdict
                    ticket.state, ticket.error_reason = "failed", "export_timeout"
                if ticket.state == "failed":
                    raise ticket.failure()
                docs.append(self.download_export(change, ticket))
            except FetchError as exc:
                failures.append((change.item_key, exc))
        return docs, failures

    def fetch_batch(self, changes: list[Change]) -> tuple[list[RawDocument], list[tuple[str, FetchError]]]:
        """Create every export of a batch, poll them together, download: the in-task path."""
        tickets, failures = self.start_exports(changes)
        self.poll_exports(tickets)
        docs, more = self.finish_batch(changes, tickets)
        return docs, failures + more

    def fetch(self, change: Change) -> RawDocument:
        if not self.is_export(change):
            return self.download_file_item(change)
        docs, failures = self.fetch_batch([change])
        if failures:
            raise failures[0][1]
        return docs[0]
