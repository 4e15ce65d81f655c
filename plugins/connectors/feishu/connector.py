"""The Feishu drive connector (``kind: feishu``).

Options (``SourceConfig.options``, read only through :class:`.options.FeishuOptions`)::

    folders: [fldcn..., root]      # drive folders walked recursively; root = the caller's own root
    wiki_spaces: []                # wiki space ids, or "all" (every space the caller can read)
    types: [doc, docx, sheet, bitable, slides, file]
    export_formats: {doc: docx, docx: docx, sheet: xlsx, bitable: xlsx, slides: pptx}  # csv: per sheet
    tenant_url: https://acme.feishu.cn   # for wiki links (else learnt from listing URLs)
    docx_fetch: export             # or raw_content: the plain text in one call, nothing expires
    docx_revision_check: false     # a docx whose modified_time moved is refetched only if revision_id did
    export_concurrency: 20         # in-task exports in flight (each downloaded when done)
    export_resume_after_done_seconds: 120   # deferred: resume to download what is done
    max_file_bytes: 104857600      # downloads beyond this are refused (streamed, never buffered whole)
    export_deadline_seconds: 900   # overall wait for one batch's exports
    export_poll_interval: 1.0      # first poll delay, doubling per ticket up to the max
    export_poll_max_interval: 8.0
    deferrable: true               # wait in the triggerer (unset: [operators] default_deferrable)
    client: {timeout: 30, max_attempts: 5, rate_limit_max_wait: 300, token_margin: 300}
    rate_limits: {file_download: [[5, 1], [10000, 86400]]}   # per-API budget overrides

Item key = the file token (a shortcut's *target* token). Version evidence = the listing's
``modified_time``; changed means it differs from the stored one, so unchanged items cost no
export. A run window (backfill data interval, or a scheduled window widened by the engine's
``window_overlap_minutes``) limits the reported changes to items modified inside it. Discovery is complete only when every folder listed; with an incomplete walk, known
items that were not seen are re-checked with the batch meta query and those in its
``failed_list`` (deleted, unshared) are reported as deletions.

The app's credentials come from the Connection ``conn_id`` (default ``feishu_default``), read
through ``include.connections`` when the first client is built (:mod:`.connection`). The fetch
stage may wait for exports in the triggerer: the DAG factory picks that operator for this kind.
"""

from __future__ import annotations

import logging
import mimetypes
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar
from urllib.parse import urlsplit

from include.acl import AccessControl
from include.config import SourceConfig
from include.connections import get_connection
from include.contract import Change, ChangeKind, RawDocument, VersionEvidence
from include.settings import get_settings
from include.stores.source_notes import SourceNotes
from plugins.connectors.base import (
    AccessRequest,
    Committed,
    Connector,
    ConnectorContext,
    Discovery,
    DiscoveryRequest,
    FetchError,
    GroupListing,
    read_fail_closed,
    register_connector,
)
from plugins.connectors.feishu.client import Download, FeishuClient, FeishuSettings
from plugins.connectors.feishu.connection import DEFAULT_CONN_ID, settings_from_conn
from plugins.connectors.feishu.discovery import meta_status, resolve_folders, resolve_spaces
from plugins.connectors.feishu.errors import CONTENT_TOO_LARGE, FeishuError
from plugins.connectors.feishu.exports import (
    DEFAULT_FORMATS,
    ExportTicket,
    fetch_error_for,
    poll_in_process,
    start_item_exports,
)
from plugins.connectors.feishu.groups import list_memberships
from plugins.connectors.feishu.listing import DEFAULT_TYPES, DriveItem, Walk, walk_drive
from plugins.connectors.feishu.named import named_walk
from plugins.connectors.feishu.options import FeishuOptions
from plugins.connectors.feishu.permissions import AccessReader, access_metadata
from plugins.connectors.feishu.pipeline import download_ticket, join_csv, run_exports
from plugins.connectors.feishu.slides import SKIP_REASON, SlidesGate
from plugins.connectors.feishu.subscriptions import maintain_subscriptions

__all__ = ["FeishuConnector", "default_tenant_url"]

log = logging.getLogger(__name__)

_MIME = {
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "pdf": "application/pdf",
    "csv": "text/csv",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
}


def default_tenant_url(host: str) -> str:
    """Where documents live when no listing URL told us: the site of the API host (wiki links
    on ``feishu.cn``/``larksuite.com`` redirect to the tenant's own domain)."""
    site = host.rstrip("/").removesuffix("/open-apis")
    return site.replace("://open.", "://", 1)


@register_connector
class FeishuConnector(Connector):
    kind: ClassVar[str] = "feishu"
    options_model = FeishuOptions

    def __init__(self, source: SourceConfig, context: ConnectorContext | None = None) -> None:
        super().__init__(source, context)
        self.options = FeishuOptions.model_validate(source.options)
        self._client: FeishuClient | None = None
        self._settings: FeishuSettings | None = None
        self._slides: SlidesGate | None = None
        self._notes: SourceNotes | None = None
        self.log = self.context.log or log
        # the last permission read: requests sent and causes of unknowns (a permission sync's report)
        self.access_stats: dict[str, Any] = {}

    # ----------------------------------------------------------------- plumbing

    @property
    def conn_id(self) -> str:
        return self.source.conn_id or DEFAULT_CONN_ID

    @property
    def redis_url(self) -> str | None:
        if self.context.redis_url:
            return self.context.redis_url
        return get_settings().redis_url

    def client_overrides(self) -> dict[str, Any]:
        """``FeishuSettings`` fields the source's options set (JSON-ready: the trigger gets them)."""
        overrides: dict[str, Any] = self.options.client.model_dump(exclude_none=True)
        if self.options.rate_limits:
            overrides["limits"] = {
                api: [list(rule) for rule in rules] for api, rules in self.options.rate_limits.items()
            }
        return overrides

    @property
    def settings(self) -> FeishuSettings:
        if self._settings is None:
            conn = get_connection(self.conn_id)
            self._settings = settings_from_conn(conn, redis_url=self.redis_url, **self.client_overrides())
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
        if self._notes is not None:
            self._notes.close()
            self._notes = None

    def input_dataset(self) -> tuple[str, str]:
        return (self.settings.host if self._settings else "feishu", ",".join(self.options.folders))

    @property
    def slides(self) -> SlidesGate:
        if self._slides is None:
            self._slides = SlidesGate(self._source_notes, self.source.source_id, self.settings.app_id)
        return self._slides

    def _source_notes(self) -> SourceNotes:
        if self._notes is None:
            settings = get_settings()
            settings.ensure_dirs()  # the default state database is a file under TRIBUTARY_HOME
            self._notes = SourceNotes(settings.state_url)
        return self._notes

    @property
    def formats(self) -> dict[str, str]:
        return {**DEFAULT_FORMATS, **self.options.export_formats}

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

    def _walk(self) -> Walk:
        folders = resolve_folders(self.client, self.options.folders)
        return walk_drive(
            self.client,
            folders,
            wiki_spaces=resolve_spaces(self.client, self.options.wiki_spaces),
            types=self.options.types or DEFAULT_TYPES,
            tenant_url=self.options.tenant_url,
            site_url=default_tenant_url(self.settings.host),
        )

    def _change(self, key: str, item: DriveItem, known: VersionEvidence | None) -> Change:
        if known is None:
            kind = ChangeKind.NEW
        elif known.modified_time != item.modified_time:
            kind = ChangeKind.CHANGED
        else:
            kind = ChangeKind.UNCHANGED
        return Change(
            item_key=key,
            kind=kind,
            version=VersionEvidence(modified_time=item.modified_time, revision=known.revision if known else None),
            url=item.url,
            title=item.name,
            reason=None if kind is ChangeKind.NEW else f"modified_time {item.modified_time}",
            metadata={"feishu_type": item.type, "path": list(item.path), "via": item.via, **access_metadata(item)},
        )

    def discover(self, request: DiscoveryRequest) -> Discovery:
        started = time.perf_counter()
        named = named_walk(self.client, request, self.options.types or DEFAULT_TYPES, bool(self.options.wiki_spaces))
        if named is not None:
            walk, deleted = named
        else:
            walk, deleted = self._walk(), []
            # a run naming items re-checks only the named indexed ones it missed (an event's deletion)
            asked = request.stored & set(request.only_keys) if request.only_keys else set(request.known)
            if missing := set(asked) - set(walk.items):
                deleted = self._recheck_missing(walk, missing)
        changes: list[Change] = []
        counts = {"outside_window": 0, "deleted": len(deleted)}
        for key, item in walk.items.items():
            if request.only_keys and key not in request.only_keys:
                continue
            if not self._in_window(item, request.window_start, request.window_end):
                counts["outside_window"] += 1
                continue
            changes.append(self._change(key, item, request.known.get(key)))
        if self.options.docx_revision_check:
            changes = [self._by_revision(ch, request.known.get(ch.item_key)) for ch in changes]
        changes, slides = self.slides.split(self.client, changes, self.formats.get("slides", "pptx"))
        counts.update({k: sum(c.kind.value == k for c in changes) for k in ("new", "changed", "unchanged")})
        changes += deleted
        stats = {
            **counts,
            # same shape as the engine plan's "skipped" entries: lineage "skipped", not a failure
            "skipped": [{"item_key": c.item_key, "reason": SKIP_REASON} for c in slides],
            SKIP_REASON: len(slides),
            "listed": len(walk.items),
            "folders": walk.folders,
            "skipped_types": walk.skipped_types,
            "errors": walk.errors[:20],
            "list_ms": round((time.perf_counter() - started) * 1000, 1),
            # the shared retry policy's and request budget's counters (retry/feishu/*, ratelimit/feishu/*)
            "limits": {**self.client.retries.stats, **self.client.budget.limiter.stats},
        }
        return Discovery(
            changes=changes, complete=walk.complete, all_keys=set(walk.items) if walk.complete else None, stats=stats
        )

    def _by_revision(self, change: Change, known: VersionEvidence | None) -> Change:
        """A docx whose modified_time moved is re-fetched only if its revision_id moved too
        (``docx/v1/documents/:id``, 5/s): modified_time also moves for edits that leave the
        content alone. New documents get their revision recorded for the next run."""
        if change.metadata.get("feishu_type") != "docx" or change.kind is ChangeKind.UNCHANGED:
            return change
        try:
            revision = str(self.client.docx_document(change.item_key).get("revision_id") or "") or None
        except FeishuError as exc:
            log.info("revision of %s unavailable, keeping %s: %s", change.item_key, change.kind.value, exc)
            return change
        change.version = VersionEvidence(modified_time=change.version.modified_time, revision=revision)
        if known is not None and revision is not None and known.revision == revision:
            change.kind, change.reason = ChangeKind.UNCHANGED, f"revision_id {revision} unchanged"
        return change

    def _recheck_missing(self, walk: Walk, missing: set[str]) -> list[Change]:
        """Known items this walk did not list: deleted only when Feishu confirms it.

        Items the meta query says are gone are explicit deletions. After a complete walk,
        items still there are looked for in one more walk (what a single walk missed, e.g. a
        page cursor that moved under it); found ones join ``walk.items``, the rest stay absent
        (the engine's missing-run rule deletes them: moved out of the configured folders).
        """
        status = meta_status(self.client, missing)
        deleted = [Change(item_key=k, kind=ChangeKind.DELETED, reason=r) for k, r in sorted(status.gone.items())]
        still_there = status.alive | status.unknown
        if walk.complete and still_there:
            second = self._walk()
            if not second.complete:  # cannot tell: keep everything that may still be there
                walk.complete = False
                walk.errors += [f"second walk: {e}" for e in second.errors]
            for key in still_there & set(second.items):
                walk.items[key] = second.items[key]
            walk.errors.append(f"re-walk found {len(still_there & set(second.items))} of {len(still_there)} missed")
        return deleted

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

    def raw_content_item(self, change: Change) -> RawDocument:
        """The docx fast path: the document's plain text in one call, nothing to expire."""
        try:
            text = self.client.docx_raw_content(change.item_key)
        except FeishuError as exc:
            if exc.code == CONTENT_TOO_LARGE:  # over raw_content's limit: the export still works
                log.info("raw_content of %s is too large (1770033); exporting it instead", change.item_key)
                return self._export_one(change)
            raise fetch_error_for(exc, f"reading raw_content of {change.item_key}") from exc
        data = text.encode("utf-8")
        if len(data) > self.max_bytes:
            raise FetchError(f"raw_content of {change.item_key} is over {self.max_bytes} bytes", reason="too_large")
        name = f"{change.title or change.item_key}.txt"
        return self._raw(change, data, name, "text/plain", fetched_via="raw_content")

    def document_from_parts(self, change: Change, parts: list[tuple[ExportTicket, Download]]) -> RawDocument:
        ticket, dl = parts[0]
        data = join_csv(parts) if ticket.extension == "csv" else dl.data
        title = change.title or ticket.file_name or change.item_key
        name = title if title.lower().endswith(f".{ticket.extension}") else f"{title}.{ticket.extension}"
        meta: dict[str, Any] = {"export_ticket": ticket.ticket}
        if ticket.sub_id:
            meta["sheets"] = [t.sub_title or t.sub_id for t, _ in parts]
        return self._raw(change, data, name, _MIME.get(ticket.extension), **meta)

    @property
    def max_bytes(self) -> int:
        return self.options.max_file_bytes

    def is_export(self, change: Change) -> bool:
        kind = change.metadata.get("feishu_type", "file")
        return kind != "file" and not (kind == "docx" and self.options.docx_fetch == "raw_content")

    def start_exports(self, changes: list[Change]) -> tuple[list[ExportTicket], list[tuple[str, FetchError]]]:
        """Create a batch's export tickets (the deferred path; one per sheet/table for CSV)."""
        tickets, failures = [], []
        for change in changes:
            if not self.is_export(change):
                continue
            try:
                tickets += start_item_exports(
                    self.client, change.item_key, change.metadata["feishu_type"], self.formats
                )
            except FetchError as exc:
                failures.append((change.item_key, exc))
        self.slides.note_fetch_refusals(failures)
        return tickets, failures

    def poll_exports(self, tickets: list[ExportTicket]) -> list[ExportTicket]:
        """In-process polling of already created tickets."""
        if not any(t.state == "pending" for t in tickets):
            return tickets
        return poll_in_process(self.client, tickets, **self.poll_kwargs())

    def poll_kwargs(self) -> dict[str, float]:
        return {
            "deadline": time.time() + self.options.export_deadline_seconds,
            "interval": self.options.export_poll_interval,
            "max_interval": self.options.export_poll_max_interval,
        }

    def _direct(self, change: Change) -> RawDocument:
        return (
            self.download_file_item(change)
            if change.metadata.get("feishu_type") == "file"
            else self.raw_content_item(change)
        )

    def finish_batch(
        self, changes: list[Change], tickets: list[ExportTicket]
    ) -> tuple[list[RawDocument], list[tuple[str, FetchError]]]:
        """After the trigger: download finished exports (first: their files expire), then the rest.

        A file that expired anyway (a slow resume) is exported again at once, in-task, through
        the streaming pipeline rather than left for the next run.
        """
        by_key: dict[str, list[ExportTicket]] = {}
        for t in tickets:
            by_key.setdefault(t.item_key, []).append(t)
        docs, failures, expired = [], [], []
        for change in sorted(changes, key=lambda c: not self.is_export(c)):
            try:
                if not self.is_export(change):
                    docs.append(self._direct(change))
                    continue
                own = by_key.get(change.item_key)
                if not own:
                    continue  # creation failed: already recorded
                docs.append(self.document_from_parts(change, [(t, self._download(t)) for t in own]))
            except FetchError as exc:
                if exc.reason == "export_file_expired":
                    expired.append(change)
                else:
                    failures.append((change.item_key, exc))
        if expired:
            log.warning("%d export files expired before download; exporting them again now", len(expired))
            more_docs, more_failures = self._stream_exports(expired)
            docs, failures = docs + more_docs, failures + more_failures
        return docs, failures

    def _download(self, ticket: ExportTicket) -> Download:
        if ticket.state == "pending":  # the waiter gave up without a verdict
            ticket.state, ticket.error_reason = "failed", "export_timeout"
        if ticket.state == "failed":
            raise ticket.failure()
        return download_ticket(self.client, ticket, self.max_bytes)

    def _stream_exports(self, changes: list[Change]) -> tuple[list[RawDocument], list[tuple[str, FetchError]]]:
        if not changes:
            return [], []
        by_key = {c.item_key: c for c in changes}
        poll = self.poll_kwargs()
        results = run_exports(
            self.client,
            [(c.item_key, c.metadata["feishu_type"]) for c in changes],
            formats=self.formats,
            max_bytes=self.max_bytes,
            max_in_flight=self.options.export_concurrency,
            deadline=poll["deadline"],
            interval=poll["interval"],
            max_interval=poll["max_interval"],
        )
        docs, failures = [], []
        for res in results:
            if res.error is not None:
                failures.append((res.item_key, res.error))
            else:
                docs.append(self.document_from_parts(by_key[res.item_key], res.parts))
        self.slides.note_fetch_refusals(failures)
        return docs, failures

    def fetch_batch(self, changes: list[Change]) -> tuple[list[RawDocument], list[tuple[str, FetchError]]]:
        """The in-task path: exports stream (each downloaded when done), then files and text."""
        docs, failures = self._stream_exports([c for c in changes if self.is_export(c)])
        for change in changes:
            if self.is_export(change):
                continue
            try:
                docs.append(self._direct(change))
            except FetchError as exc:
                failures.append((change.item_key, exc))
        return docs, failures

    def _export_one(self, change: Change) -> RawDocument:
        docs, failures = self._stream_exports([change])
        if failures:
            raise failures[0][1]
        return docs[0]

    def fetch(self, change: Change) -> RawDocument:
        return self._export_one(change) if self.is_export(change) else self._direct(change)

    def after_commit(self, committed: Committed) -> dict[str, Any]:
        """Drive event subscriptions kept in step with the index (:mod:`.subscriptions`)."""
        return maintain_subscriptions(self, committed)

    # ----------------------------------------------------------------- permissions

    def _tenant(self) -> str:
        """The tenant's id in entries: the host of its documents (``acme.feishu.cn``)."""
        return urlsplit(self.options.tenant_url or default_tenant_url(self.settings.host)).netloc.lower()

    def read_access(self, items: Sequence[AccessRequest]) -> dict[str, AccessControl]:
        """Each document's collaborators, link sharing and owner (:mod:`.permissions`). Never
        raises, never widens: what could not be read is unknown (private)."""
        if not items:
            return {}
        found, self.access_stats = read_fail_closed(
            "Feishu",
            items,
            lambda: AccessReader(self.client, self._tenant(), self.log),
            lambda: self.client.sent,
            self.log,
        )
        return found

    def group_memberships(self) -> GroupListing:
        """Departments, the bot's chats and the source's wiki spaces, flattened (:mod:`.groups`)."""
        try:
            spaces = resolve_spaces(self.client, self.options.wiki_spaces)
        except FeishuError as exc:
            self.log.warning("Feishu group sync: wiki spaces unreadable: %s", exc)
            return GroupListing(complete=False, errors={type(exc).__name__: 1})
        return list_memberships(self.client, spaces, self._tenant(), self.log)
