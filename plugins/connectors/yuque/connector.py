"""The Yuque connector: knowledge-base docs -> changes -> Markdown / HTML / .xlsx bytes.

Options (``SourceConfig.options``):

- ``namespaces``: list of ``login/slug`` repos to sync; absent or ``"all"`` = every repo of the
  owner.
- ``login`` / ``owner_type`` (``user`` | ``group``): whose repos "all" means; default the
  token's own account (a team token's ``/user`` is a ``Group``).
- ``repo_types``: only repos of these types (``Book``, ``Sheet``, ...); default all.
- ``window_overlap_minutes``: read by the sync operator, which widens *scheduled* windows by it
  (backfills keep their exact interval); the connector applies the window it is given as is.
- ``breadcrumbs`` (default true): read each changed repo's TOC for the doc's heading path.
- ``deleted_listing`` (default true): read ``?deleted=true`` for explicit tombstones.
- ``max_sheet_bytes``: inflate cap for lakesheet bodies (default 64 MiB).

Item key ``<namespace>/<doc id>``; version evidence ``modified_time`` = ``content_updated_at``
(``updated_at`` when absent). Discovery never downloads a body: an unchanged space costs one
listing per repo and nothing else.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from include.config import SourceConfig
from include.contract import Change, ChangeKind, RawDocument, VersionEvidence
from plugins.connectors.base import (
    Connector,
    ConnectorContext,
    Discovery,
    DiscoveryRequest,
    FetchError,
    register_connector,
)
from plugins.connectors.yuque.client import YuqueClient
from plugins.connectors.yuque.errors import (
    YuqueBudgetExhausted,
    YuqueError,
    YuqueNotFoundError,
    YuquePermissionError,
)
from plugins.connectors.yuque.formats import UnsupportedFormat, render_doc
from plugins.connectors.yuque.lakesheet import DEFAULT_MAX_SHEET_BYTES, LakesheetError
from plugins.connectors.yuque.models import (
    DocDetail,
    DocSummary,
    RecordError,
    Repo,
    TocItem,
    build_breadcrumbs,
    parse_time,
)

__all__ = ["YuqueConnector"]

_log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Walk:
    repos: list[Repo] = field(default_factory=list)
    docs: dict[str, tuple[Repo, DocSummary]] = field(default_factory=dict)
    all_keys: set[str] = field(default_factory=set)
    complete: bool = True
    incomplete_reasons: list[str] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def incomplete(self, reason: str) -> None:
        self.complete = False
        self.incomplete_reasons.append(reason)


@register_connector
class YuqueConnector(Connector):
    kind = "yuque"
    # rebuilt lakesheet workbooks (and the other bodies) stay in staging after a run, for audit
    retain_raw = True

    def __init__(
        self, source: SourceConfig, context: ConnectorContext | None = None, *, client: YuqueClient | None = None
    ) -> None:
        super().__init__(source, context)
        self._client = client
        self._hook: Any = None
        self.log = self.context.log or _log
        opts = source.options
        namespaces = opts.get("namespaces")
        self.namespaces: list[str] | None = None if namespaces in (None, "all") else [str(n) for n in namespaces]
        self.max_sheet_bytes = int(opts.get("max_sheet_bytes", DEFAULT_MAX_SHEET_BYTES))

    # ------------------------------------------------------------------ client

    @property
    def client(self) -> YuqueClient:
        if self._client is None:
            from plugins.connectors.yuque.hook import YuqueHook  # Airflow imported only when needed

            self._hook = YuqueHook(self.source.conn_id or YuqueHook.default_conn_name, redis_url=self.context.redis_url)
            self._client = self._hook.get_conn()
        return self._client

    def close(self) -> None:
        if self._hook is not None:
            self._hook.close()
        elif self._client is not None:
            self._client.close()
        self._client = self._hook = None

    def input_dataset(self) -> tuple[str, str]:
        """(Yuque host, "/" or "/<ns>,<ns>"): reads the Connection, sends no request."""
        base = self.client.base_url.removesuffix("/api/v2")
        return (base, "/" + ",".join(self.namespaces) if self.namespaces else "/")

    def _web_url(self, namespace: str, slug: str | None, doc_id: int) -> str:
        return f"{self.client.base_url.removesuffix('/api/v2')}/{namespace}/{slug or doc_id}"

    # ------------------------------------------------------------------ listing

    def _repos(self, walk: _Walk) -> None:
        opts = self.source.options
        types = opts.get("repo_types")
        if self.namespaces is not None:
            for ns in self.namespaces:
                try:
                    walk.repos.append(Repo.from_api(self.client.get_repo(ns)))
                except YuqueNotFoundError:
                    # the repo is gone: its docs are absent from a complete listing -> deleted
                    self.log.warning("Yuque repo %s not found; treating it as deleted", ns)
                except YuquePermissionError as exc:
                    walk.incomplete(f"repo {ns}: {exc.message}")
                except RecordError as exc:
                    walk.incomplete(f"repo {ns}: malformed record: {exc.reason}")
            return
        login, owner_type = opts.get("login"), opts.get("owner_type")
        if not login or not owner_type:
            user = self.client.get_user()
            login = login or user.get("login")
            owner_type = owner_type or ("group" if user.get("type") == "Group" else "user")
        for raw in self.client.iter_repos(str(login), group=owner_type == "group"):
            try:
                repo = Repo.from_api(raw)
            except RecordError as exc:
                # its docs are unknown this run, so nothing may be inferred deleted
                self.log.warning("Yuque repo record skipped: %s", exc.reason)
                walk.skipped.append(
                    {"item_key": f"{login}/<repo record>", "reason": f"malformed repo record: {exc.reason}"}
                )
                walk.incomplete("a repo record was unreadable")
                continue
            if not types or repo.type in types:
                walk.repos.append(repo)

    def _walk(self) -> _Walk:
        walk = _Walk()
        self._repos(walk)
        for repo in walk.repos:
            try:
                listing = self.client.list_docs(repo.namespace)
            except YuqueNotFoundError:
                self.log.warning("Yuque repo %s vanished while listing", repo.namespace)
                continue
            except YuquePermissionError as exc:
                walk.incomplete(f"repo {repo.namespace}: {exc.message}")
                continue
            if not listing.complete:
                walk.incomplete(f"repo {repo.namespace}: {listing.reason}")
            for position, raw in enumerate(listing.records):
                try:
                    doc = DocSummary.from_api(raw)
                except RecordError as exc:
                    key = f"{repo.namespace}/{exc.record_id}" if exc.record_id is not None else None
                    label = key or f"{repo.namespace}/<record #{position}>"
                    self.log.warning("Yuque doc record skipped (%s): %s", label, exc.reason)
                    walk.skipped.append({"item_key": label, "reason": f"malformed list record: {exc.reason}"})
                    if key is None:
                        walk.incomplete(f"repo {repo.namespace}: a doc record without a readable id")
                    else:
                        walk.all_keys.add(key)  # it still exists: keep what is indexed
                    continue
                key = f"{repo.namespace}/{doc.id}"
                walk.all_keys.add(key)
                walk.docs[key] = (repo, doc)
        return walk

    def _in_window(self, doc: DocSummary, request: DiscoveryRequest) -> bool:
        if request.window_start is None and request.window_end is None:
            return True
        modified = parse_time(doc.modified_time)
        if modified is None:
            return True
        start, end = _aware(request.window_start), _aware(request.window_end)
        if start is not None and modified < start:
            return False
        return not (end is not None and modified >= end)

    def _breadcrumbs(self, repo: Repo) -> dict[int, list[str]]:
        try:
            toc = []
            for raw in self.client.get_toc(repo.namespace):
                try:
                    toc.append(TocItem.from_api(raw))
                except RecordError:
                    continue
        except YuqueError as exc:
            self.log.warning("Yuque TOC of %s unavailable (%s); no breadcrumbs", repo.namespace, exc.message)
            return {}
        return build_breadcrumbs(toc)

    def _deletions(self, walk: _Walk, request: DiscoveryRequest) -> list[Change]:
        """Explicit tombstones from ``?deleted=true``, for repos we hold items of."""
        changes: list[Change] = []
        for repo in walk.repos:
            prefix = f"{repo.namespace}/"
            if not any(k.startswith(prefix) for k in request.known):
                continue
            try:
                listing = self.client.list_docs(repo.namespace, deleted=True)
            except YuqueError as exc:
                self.log.warning("Yuque deleted listing of %s failed: %s", repo.namespace, exc.message)
                continue
            for raw in listing.records:
                try:
                    doc = DocSummary.from_api(raw)
                except RecordError:
                    continue
                key = prefix + str(doc.id)
                # a restored doc is listed again and stays
                if key in request.known and key not in walk.all_keys:
                    changes.append(
                        Change(
                            key,
                            ChangeKind.DELETED,
                            url=self._web_url(repo.namespace, doc.slug, doc.id),
                            title=doc.title,
                            reason=f"deleted at {doc.deleted_at or 'unknown time'}",
                        )
                    )
        return changes

    def discover(self, request: DiscoveryRequest) -> Discovery:
        walk = self._walk()
        only = set(request.only_keys) if request.only_keys is not None else None
        changes: list[Change] = []
        unchanged: list[Change] = []
        for key, (repo, doc) in walk.docs.items():
            if only is not None and key not in only:
                continue
            evidence = VersionEvidence(modified_time=doc.modified_time)
            known = request.known.get(key)
            if known is not None and known.modified_time == evidence.modified_time:
                # reported so the engine's lineage and last-seen marks cover it; never fetched
                unchanged.append(Change(key, ChangeKind.UNCHANGED, evidence, title=doc.title, reason="not modified"))
                continue
            if not self._in_window(doc, request):
                continue
            changes.append(
                Change(
                    key,
                    ChangeKind.NEW if known is None else ChangeKind.CHANGED,
                    evidence,
                    url=self._web_url(repo.namespace, doc.slug, doc.id),
                    title=doc.title,
                    metadata={
                        "namespace": repo.namespace,
                        "repo": repo.name,
                        "book_id": repo.id,
                        "doc_id": doc.id,
                        "slug": doc.slug,
                        "doc_type": doc.type,
                        **({"format": doc.format} if doc.format else {}),
                    },
                )
            )
        if request.max_items is not None:
            changes = changes[: request.max_items]
        if self.source.options.get("breadcrumbs", True):
            for repo in {c.metadata["namespace"]: walk.docs[c.item_key][0] for c in changes}.values():
                crumbs = self._breadcrumbs(repo)
                for c in changes:
                    if c.metadata["namespace"] == repo.namespace:
                        c.metadata["breadcrumbs"] = [repo.name, *crumbs.get(c.metadata["doc_id"], [])]
        changes.extend(unchanged)
        if self.source.options.get("deleted_listing", True):
            changes.extend(self._deletions(walk, request))
        stats = {
            "repos": len(walk.repos),
            "docs_listed": len(walk.docs),
            # same shape as the engine plan's "skipped" entries: {"item_key", "reason"}
            "skipped": walk.skipped,
            "incomplete_reasons": walk.incomplete_reasons,
        }
        if walk.skipped:
            self.log.warning("Yuque: %d list record(s) skipped", len(walk.skipped))
        return Discovery(
            changes, complete=walk.complete, all_keys=walk.all_keys if walk.complete else None, stats=stats
        )

    def list_keys(self) -> set[str] | None:
        walk = self._walk()
        return walk.all_keys if walk.complete else None

    # ------------------------------------------------------------------ fetch

    def fetch(self, change: Change) -> RawDocument:
        namespace, _, doc_ref = change.item_key.rpartition("/")
        meta = change.metadata
        try:
            detail = DocDetail.from_api(self.client.get_doc(namespace, doc_ref))
            rendered = render_doc(
                detail,
                table_records=lambda first: self.client.iter_table_records(namespace, doc_ref, first),
                max_sheet_bytes=self.max_sheet_bytes,
            )
        except UnsupportedFormat as exc:
            raise FetchError(str(exc), reason=f"skipped: unsupported format {exc.format}", retryable=False) from None
        except LakesheetError as exc:
            raise FetchError(f"lakesheet not rebuilt: {exc}", reason=f"lakesheet_{exc.code}", retryable=False) from None
        except RecordError as exc:
            raise FetchError(f"malformed doc detail: {exc.reason}", reason="malformed", retryable=False) from None
        except YuqueBudgetExhausted as exc:
            raise FetchError(str(exc), reason="rate_budget", retryable=True) from None
        except YuqueNotFoundError as exc:
            raise FetchError(exc.message, reason="not_found", retryable=False) from None
        except YuqueError as exc:
            reason = f"http_{exc.status}" if exc.status else type(exc).__name__
            raise FetchError(exc.message, reason=reason, retryable=exc.retryable) from None
        # the listing's time, not the detail's: it is what the next discovery compares against, so a
        # format difference between the two endpoints can never make a doc look changed forever
        # (an edit between listing and fetch then only costs one extra fetch next run)
        modified = change.version.modified_time or detail.content_updated_at or detail.updated_at
        return RawDocument(
            item_key=change.item_key,
            data=rendered.data,
            file_name=f"{detail.slug or detail.id}{rendered.extension}",
            media_type=rendered.media_type,
            url=change.url or self._web_url(namespace, detail.slug, detail.id),
            title=detail.title or change.title,
            version=VersionEvidence(modified_time=modified),
            metadata={
                "source_format": rendered.format,
                "doc_type": detail.type,
                "namespace": namespace,
                "doc_id": detail.id,
                **({"repo": meta["repo"]} if "repo" in meta else {}),
                **({"breadcrumbs": meta["breadcrumbs"]} if "breadcrumbs" in meta else {}),
            },
        )


def _aware(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)
