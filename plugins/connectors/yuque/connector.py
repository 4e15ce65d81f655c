"""The Yuque connector: knowledge-base docs -> changes -> Markdown / HTML / .xlsx bytes.

Options (``SourceConfig.options``, read only through :class:`.options.YuqueOptions`):

- ``namespaces``: list of ``login/slug`` repos to sync; absent or ``"all"`` = every repo of the
  owner. A configured repo answering 404 (a typo, a token of another team: Yuque answers 404
  for what a token may not see) makes the walk incomplete; it never deletes anything.
- ``login`` / ``owner_type`` (``user`` | ``group``): whose repos "all" means; default the
  token's own account (a team token's ``/user`` is a ``Group``).
- ``repo_types``: only repos of these types (``Book``, ``Sheet``, ...); default all.
- ``include_drafts`` (default false): index never-published docs (``status`` 0) from
  ``body_draft``; by default they are skipped (and counted in the stats).
- ``window_overlap_minutes``: read by the sync operator, which widens *scheduled* windows by it
  (backfills keep their exact interval); the connector applies the window it is given as is.
- ``breadcrumbs`` (default true): read every repo's TOC each run: the doc's path in it is part
  of its version (a move re-indexes it) and, with ``toc_headings`` (default true), the heading
  path its Markdown is written under (:mod:`.headings`), so chunks carry it.
- ``deleted_listing`` (default true): read ``?deleted=true`` for explicit tombstones.
- ``incremental_listing`` (default true) / ``incremental_overlap_minutes`` (10): list only docs
  changed since the oldest listing that vouched for a stored version (:mod:`.walk`), falling
  back to a full listing whenever the repo's count disagrees; ``full_listing_every`` (24): list
  each repo in full at least every that many runs (the spec does not say which timestamp
  ``changed_at_gte`` filters on). Deletions are decided on full listings only.
- ``max_sheet_bytes``: inflate cap for lakesheet bodies (default 64 MiB).

Item key ``<book_id>/<doc_id>`` (stable across repo renames; keys of earlier releases are
renamed to it through ``Discovery.renames``, keeping doc and chunk ids); version evidence in
:mod:`.versions`. Discovery never downloads a body: an unchanged space costs, per repo, one
incremental listing page, one tombstone listing and one TOC.

A run limited to indexed docs (``only_keys``: change events) reads their details instead of
listing repos (:mod:`.named`), falling back to the walk whenever a detail leaves anything open.

The token comes from the Connection ``conn_id`` (default ``yuque_default``), read through
``include.connections`` when the first request needs a client (:mod:`.connection`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from include.acl import AccessControl
from include.config import SourceConfig
from include.connections import get_connection
from include.contract import Change, ChangeKind, RawDocument, VersionEvidence
from plugins.connectors.base import (
    AccessRequest,
    Connector,
    ConnectorContext,
    Discovery,
    DiscoveryRequest,
    FetchError,
    GroupListing,
    read_fail_closed,
    register_connector,
)
from plugins.connectors.yuque.client import YuqueClient
from plugins.connectors.yuque.connection import DEFAULT_CONN_ID, client_from_conn
from plugins.connectors.yuque.errors import (
    YuqueBudgetExhausted,
    YuqueError,
    YuqueNotFoundError,
    YuqueResponseTooLarge,
)
from plugins.connectors.yuque.formats import UnsupportedFormat, render_doc
from plugins.connectors.yuque.headings import with_heading_path
from plugins.connectors.yuque.lakesheet import LakesheetError
from plugins.connectors.yuque.models import DocDetail, DocSummary, RecordError, parse_time
from plugins.connectors.yuque.named import named_walk
from plugins.connectors.yuque.options import YuqueOptions
from plugins.connectors.yuque.permissions import AccessReader, access_metadata, list_group_members
from plugins.connectors.yuque.versions import (
    UNKNOWN,
    Comparison,
    Verdict,
    compare,
    doc_id_of,
    fingerprint,
    item_key,
    legacy_renames,
    revision_parts,
    toc_part,
    with_listed_at,
    with_toc,
)
from plugins.connectors.yuque.walk import RepoDocs, Walk, Walker

__all__ = ["YuqueConnector"]

_log = logging.getLogger(__name__)


@register_connector
class YuqueConnector(Connector):
    kind = "yuque"
    options_model = YuqueOptions
    # rebuilt lakesheet workbooks (and the other bodies) stay in staging after a run, for audit
    retain_raw = True

    def __init__(
        self, source: SourceConfig, context: ConnectorContext | None = None, *, client: YuqueClient | None = None
    ) -> None:
        super().__init__(source, context)
        self.options = YuqueOptions.model_validate(source.options)
        self._client = client
        self.log = self.context.log or _log
        namespaces = self.options.namespaces
        self.namespaces: list[str] | None = None if namespaces in (None, "all") else list(namespaces or [])
        self.max_sheet_bytes = self.options.max_sheet_bytes
        self.include_drafts = self.options.include_drafts
        self.toc_headings = self.options.toc_headings
        self._listed_at = ""
        # the last permission read: requests sent and causes of unknowns (a permission sync's report)
        self.access_stats: dict[str, Any] = {}

    # ------------------------------------------------------------------ client

    @property
    def client(self) -> YuqueClient:
        if self._client is None:
            conn = get_connection(self.source.conn_id or DEFAULT_CONN_ID)
            self._client = client_from_conn(conn, redis_url=self.context.redis_url)
        return self._client

    def _limit_stats(self) -> dict[str, int]:
        client = self.client
        budget = dict(client.budget.limiter.stats) if client.budget is not None else {}
        return {**client.retry_policy.stats, **budget}

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = None

    def canonical_key(self, key: str) -> str:
        """``<book_id>/<doc_id>``; a key of the earlier ``<login>/<slug>/<doc_id>`` form is refused
        (its stored state is renamed at the next discovery, after which it names nothing)."""
        canonical = super().canonical_key(key)
        if doc_id_of(canonical) is None or canonical.count("/") != 1 or not canonical.partition("/")[0].isdigit():
            raise ValueError(f"a Yuque item key is <book_id>/<doc_id> (both numbers), not {canonical!r}")
        return canonical

    def input_dataset(self) -> tuple[str, str]:
        """(Yuque host, "/" or "/<ns>,<ns>"): reads the Connection, sends no request."""
        base = self.client.base_url.removesuffix("/api/v2")
        return (base, "/" + ",".join(self.namespaces) if self.namespaces else "/")

    def _web_url(self, namespace: str, slug: str | None, doc_id: int) -> str:
        return f"{self.client.base_url.removesuffix('/api/v2')}/{namespace}/{slug or doc_id}"

    # ------------------------------------------------------------------ listing

    def _walk(self, request: DiscoveryRequest | None = None) -> Walk:
        known = dict(request.known) if request is not None else {}
        incremental = (
            request is not None
            and self.options.incremental_listing
            and not request.full_resync
            and request.window_start is None
            and request.window_end is None
            and request.only_keys is None
        )
        # a run limited to some keys or a window compares only some docs: its full listings do
        # not stand for the periodic one (see .walk)
        limited = request is not None and not (
            request.window_start is None and request.window_end is None and request.only_keys is None
        )
        walker = Walker(self.client, self.options.model_dump(), self.log, resets=not limited)
        return walker.walk(known, incremental=incremental)

    def _in_window(self, doc: DocSummary, request: DiscoveryRequest) -> bool:
        if request.window_start is None and request.window_end is None:
            return True
        # the later of the two times: a metadata-only edit inside the window counts too
        times = [t for t in (parse_time(doc.content_updated_at), parse_time(doc.updated_at)) if t is not None]
        if not times:
            return True
        modified = max(times)
        start, end = _aware(request.window_start), _aware(request.window_end)
        if start is not None and modified < start:
            return False
        return not (end is not None and modified >= end)

    def _change(self, entry: RepoDocs, doc: DocSummary, key: str, seen: Comparison) -> Change:
        repo = entry.repo
        crumbs = [repo.name, *(entry.toc or {}).get(doc.id, [])] if entry.toc is not None else None
        metadata: dict[str, Any] = {
            "namespace": repo.namespace,
            "repo": repo.name,
            "book_id": repo.id,
            "doc_id": doc.id,
            "slug": doc.slug,
            "doc_type": doc.type,
            **({"format": doc.format} if doc.format else {}),
            **({"breadcrumbs": crumbs} if crumbs is not None else {}),
            # what the fetch stage's read_access needs, so it sends no request (.permissions)
            "access": access_metadata(repo, doc.public),
        }
        if seen.verdict is Verdict.MOVED:
            metadata["rewrite"] = True  # same text, new URL: the index record must be rewritten
        return Change(
            key,
            ChangeKind.NEW if seen.verdict is Verdict.NEW else ChangeKind.CHANGED,
            seen.evidence,
            url=self._web_url(repo.namespace, doc.slug, doc.id),
            title=doc.title,
            reason=seen.reason,
            metadata=metadata,
        )

    def _evidence(self, entry: RepoDocs, doc: DocSummary) -> VersionEvidence:
        toc = None if entry.toc is None else [entry.repo.name, *entry.toc.get(doc.id, [])]
        revision = fingerprint(doc.updated_at, entry.repo.namespace, doc.slug, toc, self._listed_at, entry.cursor)
        return VersionEvidence(modified_time=doc.modified_time, revision=revision)

    def _unlisted(self, entry: RepoDocs, known: dict[str, VersionEvidence], by_doc: dict[int, str]) -> list[Change]:
        """Known docs an incremental listing did not return: unchanged, unless the TOC moved them."""
        out = []
        for doc_id in sorted(entry.unlisted):
            key = by_doc.get(doc_id)
            version = known.get(key) if key is not None else None
            if key is None or version is None:
                continue
            parts = revision_parts(version.revision)
            toc = None if entry.toc is None else toc_part([entry.repo.name, *entry.toc.get(doc_id, [])])
            stamped = with_listed_at(version.revision, self._listed_at, entry.cursor) or ""
            if parts and toc is not None and parts["t"] not in (toc, UNKNOWN):
                moved = VersionEvidence(modified_time=version.modified_time, revision=with_toc(stamped, toc))
                stub = DocSummary(doc_id, None, "", "Doc", None, parts["u"] or None, version.modified_time, 1)
                out.append(self._change(entry, stub, key, Comparison(Verdict.CHANGED, moved, "moved in the TOC")))
            else:
                vouched = VersionEvidence(modified_time=version.modified_time, revision=stamped)
                out.append(Change(key, ChangeKind.UNCHANGED, vouched, reason="not modified (incremental listing)"))
        return out

    def discover(self, request: DiscoveryRequest) -> Discovery:
        # when this walk began: what its reports vouch for (``l=``; see .walk, .versions)
        self._listed_at = _iso(datetime.now(UTC))
        # a run limited to indexed docs reads their details instead of listing repos (.named)
        named = named_walk(self.client, self.options, request, self.log)
        walk, deleted = named if named is not None else (self._walk(request), [])
        only = set(request.only_keys) if request.only_keys is not None else None
        current: dict[int, str] = {}
        for entry in walk.repos:
            for doc in entry.docs:
                current[doc.id] = item_key(entry.repo.id, doc.id)
        for entry in walk.repos:  # a doc listed in one repo is not kept under another's key
            for doc_id in entry.unlisted:
                current.setdefault(doc_id, item_key(entry.repo.id, doc_id))
        for key in walk.extra_keys:  # unreadable records still exist: their state moves too
            if (extra_id := doc_id_of(key)) is not None:
                current.setdefault(extra_id, key)
        # forced items (full resync, new options) are not ``known`` but their keys still move
        renames = legacy_renames(frozenset(request.known) | request.stored, current)
        known = {renames.get(k, k): v for k, v in request.known.items()}
        by_doc = _by_doc_id(known)
        changes: list[Change] = []
        unchanged: list[Change] = []
        all_keys = set(walk.extra_keys)
        for entry in walk.repos:
            for doc in entry.docs:
                key = current[doc.id]
                all_keys.add(key)
                if only is not None and key not in only:
                    continue
                seen = compare(known.get(key), self._evidence(entry, doc))
                if seen.verdict is Verdict.UNCHANGED:
                    # reported so the engine's lineage and last-seen marks cover it; never fetched
                    unchanged.append(
                        Change(key, ChangeKind.UNCHANGED, seen.evidence, title=doc.title, reason=seen.reason)
                    )
                elif self._in_window(doc, request):
                    changes.append(self._change(entry, doc, key, seen))
            all_keys.update(current[d] for d in entry.unlisted)
            for change in self._unlisted(entry, known, by_doc):
                (unchanged if change.kind is ChangeKind.UNCHANGED else changes).append(change)
        if request.max_items is not None:
            changes = changes[: request.max_items]
        changes.extend(unchanged)
        # tombstones of every indexed doc, also those withheld from ``known`` (named in only_keys)
        changes.extend(self._deletions(walk, set(known) | {renames.get(k, k) for k in request.stored}, all_keys))
        changes.extend(deleted)  # named docs whose detail says they are gone
        if walk.skipped:
            self.log.warning("Yuque: %d list record(s) skipped", len(walk.skipped))
        return Discovery(
            changes,
            complete=walk.complete,
            all_keys=all_keys if walk.complete else None,
            stats=self._stats(walk, len(renames), len(deleted)),
            renames=renames,
        )

    def _stats(self, walk: Walk, renamed: int, gone_by_detail: int) -> dict[str, Any]:
        by_detail = [e for e in walk.repos if e.by_detail]
        return {
            "repos": len(walk.repos),
            "docs_listed": sum(len(e.docs) for e in walk.repos if not e.by_detail),
            # a run limited to indexed docs that read their details instead of listing (.named)
            **({"docs_by_detail": sum(len(e.docs) for e in by_detail) + gone_by_detail} if by_detail else {}),
            "drafts_skipped": sum(e.drafts for e in walk.repos),
            "incremental_repos": walk.incremental_repos,
            "full_listing_reasons": walk.full_reasons,  # namespace -> why (beyond "nothing known")
            "renamed_keys": renamed,
            # same shape as the engine plan's "skipped" entries: {"item_key", "reason"}
            "skipped": walk.skipped,
            "incomplete_reasons": walk.incomplete_reasons,
            "limits": self._limit_stats(),  # retry/yuque/*, ratelimit/yuque/*, as the web crawl's
        }

    def _deletions(self, walk: Walk, known: Iterable[str], alive: set[str]) -> list[Change]:
        """Explicit tombstones from ``?deleted=true`` (a restored doc is listed again and stays),
        only when every repo was listed in full (the walk made sure of it when one was pending)."""
        if walk.incremental_repos:
            return []
        by_doc = _by_doc_id(known)
        changes = []
        for entry in walk.repos:
            for doc in entry.tombstones:
                key = by_doc.get(doc.id)
                if key is not None and key not in alive:
                    changes.append(
                        Change(
                            key,
                            ChangeKind.DELETED,
                            url=self._web_url(entry.repo.namespace, doc.slug, doc.id),
                            title=doc.title,
                            reason=f"deleted at {doc.deleted_at or 'unknown time'}",
                        )
                    )
        return changes

    # ------------------------------------------------------------------ permissions

    def _tenant(self) -> str:
        """The space's tenant id: the API host (a team space has its own, ``acme.yuque.com``)."""
        return urlsplit(self.client.base_url).netloc.lower()

    def read_access(self, items: Sequence[AccessRequest]) -> dict[str, AccessControl]:
        """Each doc's permissions from the repo's and the doc's ``public`` levels
        (:mod:`.permissions`): no request when the discovery's metadata has them, else the
        repo detail once and the docs' levels. Never raises, never widens: what could not be
        read is unknown (private)."""
        if not items:
            return {}
        found, self.access_stats = read_fail_closed(
            "Yuque",
            items,
            lambda: AccessReader(self.client, self._tenant(), self.log),
            lambda: self.client.sent,
            self.log,
        )
        return found

    def group_memberships(self) -> GroupListing:
        """Members of every group owning a synced repo (``GET /groups/{login}/users``), and the
        tenant entry; ``requests`` counts the repo reads that found the owners too."""
        client = self.client
        start = client.sent
        walk = Walk()
        try:
            repos = Walker(client, self.options.model_dump(), self.log).repos(walk)
        except YuqueError as exc:
            self.log.warning("Yuque group sync: repos unreadable: %s", exc.message)
            cause = f"http_{exc.status}" if exc.status else type(exc).__name__
            return GroupListing(complete=False, errors={cause: 1}, requests=client.sent - start)
        groups = {r.owner_login for r in repos if r.owner_type == "Group" and r.owner_login}
        listing = list_group_members(client, groups, self._tenant(), self.log)
        if not walk.complete:  # a named repo unreadable: its owner's members may be missing
            listing.complete = False
            listing.errors["repo_unreadable"] = len(walk.incomplete_reasons)
            listing.members = {k: v for k, v in listing.members.items() if not k.startswith("tenant:")}
        listing.requests = client.sent - start
        return listing

    # ------------------------------------------------------------------ fetch

    def fetch(self, change: Change) -> RawDocument:
        meta = change.metadata
        doc_ref = change.item_key.rpartition("/")[2]
        # the repo by its id: a rename since discovery cannot break the request
        repo_ref = str(meta.get("book_id") or change.item_key.rpartition("/")[0])
        namespace = str(meta.get("namespace") or repo_ref)
        try:
            detail = DocDetail.from_api(self.client.get_doc(repo_ref, doc_ref))
            rendered = render_doc(
                detail,
                table_records=lambda first: self.client.iter_table_records(repo_ref, doc_ref, first),
                max_sheet_bytes=self.max_sheet_bytes,
                use_draft=self.include_drafts and detail.status == 0,
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
        except YuqueResponseTooLarge as exc:
            raise FetchError(exc.message, reason="too_large", retryable=False) from None
        except YuqueError as exc:
            reason = f"http_{exc.status}" if exc.status else type(exc).__name__
            raise FetchError(exc.message, reason=reason, retryable=exc.retryable) from None
        crumbs = meta.get("breadcrumbs")
        title = detail.title or change.title or ""
        if rendered.media_type == "text/markdown" and crumbs is not None and self.toc_headings:
            # the TOC path becomes the heading path of every chunk (see .headings)
            rendered.data = with_heading_path(rendered.data.decode("utf-8"), [*crumbs, title], title).encode("utf-8")
        # the listing's evidence, not the detail's: it is what the next discovery compares against,
        # so a format difference between the two endpoints can never make a doc look changed
        # forever (an edit between listing and fetch then only costs one extra fetch next run)
        modified = change.version.modified_time or detail.content_updated_at or detail.updated_at
        return RawDocument(
            item_key=change.item_key,
            data=rendered.data,
            file_name=f"{detail.slug or detail.id}{rendered.extension}",
            media_type=rendered.media_type,
            url=self._web_url(namespace, detail.slug, detail.id),
            title=title or None,
            version=VersionEvidence(modified_time=modified, revision=change.version.revision),
            metadata={
                "source_format": rendered.format,
                "doc_type": detail.type,
                "namespace": namespace,
                "doc_id": detail.id,
                **({"repo": meta["repo"]} if "repo" in meta else {}),
                **({"breadcrumbs": crumbs} if crumbs is not None else {}),
            },
        )


def _by_doc_id(known: Iterable[str]) -> dict[int, str]:
    """Known item keys by Yuque doc id (a key naming no doc id names nothing here)."""
    return {doc_id: key for key in known if (doc_id := doc_id_of(key)) is not None}


def _iso(moment: datetime) -> str:
    """Yuque's own timestamp form, ``2026-01-05T08:00:00.000Z``."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _aware(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)
