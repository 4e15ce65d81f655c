"""One discovery walk over a Yuque space: repos, their docs (in full or incrementally), TOCs.

The walk is *complete* only when every repo the source covers was listed and every listing
provably saw every doc: only then may the engine infer deletions from absent keys. A repo that
answers 404 is **not** taken as deleted: Yuque answers 404 for a repo the token cannot see (a
typo in ``namespaces``, a token of another team) exactly as for a missing one, so the walk is
marked incomplete and nothing is inferred deleted; a repo that is really gone is dropped from
``namespaces`` (or vanishes from the owner's repo list), and its docs then go the normal way.

Incremental listing (``changed_at_gte``, in the OpenAPI spec for ``GET /repos/:id/docs``): for a
repo we hold docs of, only docs changed since the *oldest* listing that vouched for a stored
version (each version's ``l=``, minus an overlap for clock skew) are listed. The oldest, not the
newest: a doc whose fetch failed keeps the ``l`` of its last committed version, so the listings
keep reaching back to it until it is indexed (with the newest, an edit that failed to fetch
would never be listed again). Docs not listed are unchanged, and the repo's key set is still known
exactly when the known docs plus the newly listed ones, minus tombstones, add up to the repo's
``items_count``; when they do not (a doc we never indexed, a draft, a count Yuque computes
differently), the repo is listed in full, as every run did before.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from include.contract import VersionEvidence
from plugins.connectors.yuque.client import YuqueClient
from plugins.connectors.yuque.errors import YuqueError, YuqueNotFoundError, YuquePermissionError
from plugins.connectors.yuque.models import DocSummary, RecordError, Repo, TocItem, build_breadcrumbs, parse_time
from plugins.connectors.yuque.versions import book_id_of, doc_id_of, item_key, revision_parts

__all__ = ["RepoDocs", "Walk", "Walker"]

_log = logging.getLogger(__name__)


@dataclass(slots=True)
class RepoDocs:
    repo: Repo
    docs: list[DocSummary] = field(default_factory=list)
    tombstones: list[DocSummary] = field(default_factory=list)
    # doc ids known and not listed because the listing was incremental (unchanged since)
    unlisted: set[int] = field(default_factory=set)
    toc: dict[int, list[str]] | None = None  # doc id -> ancestor titles; None: TOC unreadable
    drafts: int = 0


@dataclass(slots=True)
class Walk:
    repos: list[RepoDocs] = field(default_factory=list)
    complete: bool = True
    incomplete_reasons: list[str] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    extra_keys: set[str] = field(default_factory=set)  # exist, but unreadable records
    incremental_repos: int = 0

    def incomplete(self, reason: str) -> None:
        self.complete = False
        self.incomplete_reasons.append(reason)


def known_by_repo(known: Iterable[str], repo: Repo) -> set[int]:
    """Doc ids of the known keys that belong to ``repo`` (current or legacy key form)."""
    out: set[int] = set()
    for key in known:
        book, doc = book_id_of(key), doc_id_of(key)
        if doc is None:
            continue
        if book == repo.id or (book is None and key.rpartition("/")[0] == repo.namespace):
            out.add(doc)
    return out


class Walker:
    def __init__(self, client: YuqueClient, options: dict[str, Any], log: Any = None) -> None:
        self.client = client
        self.options = options
        self.log = log or _log
        namespaces = options.get("namespaces")
        self.namespaces = None if namespaces in (None, "all") else [str(n) for n in namespaces]
        self.include_drafts = bool(options.get("include_drafts", False))

    # ------------------------------------------------------------------ repos

    def repos(self, walk: Walk) -> list[Repo]:
        if self.namespaces is not None:
            return [r for r in (self._named_repo(ns, walk) for ns in self.namespaces) if r is not None]
        opts = self.options
        login, owner_type = opts.get("login"), opts.get("owner_type")
        if not login or not owner_type:
            user = self.client.get_user()
            login = login or user.get("login")
            owner_type = owner_type or ("group" if user.get("type") == "Group" else "user")
        types = opts.get("repo_types")
        repos = []
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
                repos.append(repo)
        return repos

    def _named_repo(self, ns: str, walk: Walk) -> Repo | None:
        try:
            return Repo.from_api(self.client.get_repo(ns))
        except YuqueNotFoundError:
            # 404 is also what a token of another team gets: never "deleted", only "not seen"
            self.log.warning("Yuque repo %s answered 404 (missing, or not visible to this token)", ns)
            walk.incomplete(f"repo {ns}: not found or not visible to this token (404); nothing inferred deleted")
        except YuquePermissionError as exc:
            walk.incomplete(f"repo {ns}: {exc.message}")
        except RecordError as exc:
            walk.incomplete(f"repo {ns}: malformed record: {exc.reason}")
        return None

    # ------------------------------------------------------------------ docs

    def list_repo(self, repo: Repo, walk: Walk, known: dict[str, VersionEvidence], *, incremental: bool) -> None:
        entry = RepoDocs(repo)
        known_ids = known_by_repo(known, repo)
        try:
            entry.tombstones = self._tombstones(repo) if known_ids and self.options.get("deleted_listing", True) else []
            since = self._watermark(known, repo) if incremental and known_ids else None
            if since is None or not self._incremental(entry, walk, known_ids, since):
                self._full(entry, walk)
        except YuqueNotFoundError:
            walk.incomplete(f"repo {repo.namespace}: 404 while listing (deleted, or not visible); nothing inferred")
            return
        except YuquePermissionError as exc:
            walk.incomplete(f"repo {repo.namespace}: {exc.message}")
            return
        if self.options.get("breadcrumbs", True):
            entry.toc = self._toc(repo)
        walk.repos.append(entry)

    def _full(self, entry: RepoDocs, walk: Walk) -> None:
        listing = self.client.list_docs(entry.repo.namespace)
        if not listing.complete:
            walk.incomplete(f"repo {entry.repo.namespace}: {listing.reason}")
        self._keep_published(entry, self._summaries(entry.repo, walk, listing.records))
        entry.unlisted = set()

    def _incremental(self, entry: RepoDocs, walk: Walk, known_ids: set[int], since: datetime) -> bool:
        """List only what changed since ``since``; False when the key set cannot be proven."""
        if entry.repo.items_count is None:
            return False
        stamp = since.strftime("%Y-%m-%dT%H:%M:%S.") + f"{since.microsecond // 1000:03d}Z"
        listing = self.client.list_docs(entry.repo.namespace, changed_at_gte=stamp)
        if not listing.complete:
            return False
        probe = Walk()
        docs = self._summaries(entry.repo, probe, listing.records)
        gone = {t.id for t in entry.tombstones}
        alive = (known_ids | {d.id for d in docs} | {doc_id_of(k) for k in probe.extra_keys}) - gone
        if probe.skipped or len(alive) != entry.repo.items_count:
            self.log.info(
                "Yuque %s: %d docs accounted for, items_count %s: listing in full",
                entry.repo.namespace,
                len(alive),
                entry.repo.items_count,
            )
            return False
        self._keep_published(entry, docs)
        entry.unlisted = known_ids - {d.id for d in docs} - gone
        walk.incremental_repos += 1
        return True

    def _keep_published(self, entry: RepoDocs, docs: list[DocSummary]) -> None:
        """Drafts (``status`` 0, never published) are not indexed unless ``include_drafts``."""
        entry.docs = [d for d in docs if d.status != 0 or self.include_drafts]
        entry.drafts = len(docs) - len(entry.docs)

    def _summaries(self, repo: Repo, walk: Walk, records: list[Any]) -> list[DocSummary]:
        docs = []
        for position, raw in enumerate(records):
            try:
                doc = DocSummary.from_api(raw)
            except RecordError as exc:
                key = item_key(repo.id, exc.record_id) if exc.record_id is not None else None
                label = key or f"{repo.namespace}/<record #{position}>"
                self.log.warning("Yuque doc record skipped (%s): %s", label, exc.reason)
                walk.skipped.append({"item_key": label, "reason": f"malformed list record: {exc.reason}"})
                if key is None:
                    walk.incomplete(f"repo {repo.namespace}: a doc record without a readable id")
                else:
                    walk.extra_keys.add(key)  # it still exists: keep what is indexed
                continue
            docs.append(doc)
        return docs

    def _watermark(self, known: dict[str, VersionEvidence], repo: Repo) -> datetime | None:
        """The oldest ``l=`` of the repo's known versions, minus the overlap; None: list in full."""
        oldest: datetime | None = None
        for key, version in known.items():
            if doc_id_of(key) not in known_by_repo([key], repo):
                continue
            try:
                moment = parse_time(revision_parts(version.revision).get("l"))
            except ValueError:
                return None
            if moment is None:
                return None  # a version of an earlier release, never vouched for by a listing
            oldest = moment if oldest is None or moment < oldest else oldest
        if oldest is None:
            return None
        return oldest - timedelta(minutes=float(self.options.get("incremental_overlap_minutes", 10)))

    def _tombstones(self, repo: Repo) -> list[DocSummary]:
        try:
            listing = self.client.list_docs(repo.namespace, deleted=True)
        except YuqueError as exc:
            self.log.warning("Yuque deleted listing of %s failed: %s", repo.namespace, exc.message)
            return []
        out = []
        for raw in listing.records:
            try:
                out.append(DocSummary.from_api(raw))
            except RecordError:
                continue
        return out

    def _toc(self, repo: Repo) -> dict[int, list[str]] | None:
        try:
            raw_toc = self.client.get_toc(repo.namespace)
        except YuqueError as exc:
            self.log.warning("Yuque TOC of %s unavailable (%s); paths kept as they were", repo.namespace, exc.message)
            return None
        toc = []
        for raw in raw_toc:
            try:
                toc.append(TocItem.from_api(raw))
            except RecordError:
                continue
        return build_breadcrumbs(toc)
