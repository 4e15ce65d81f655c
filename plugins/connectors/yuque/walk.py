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
would never be listed again). Docs not listed are taken as unchanged.

The spec says neither what ``changed_at_gte`` filters on ("lower bound of change time": an edit
that moves only the other timestamp is not listed) nor what ``items_count`` counts ("number of
docs": drafts?), so the listing is built to be right under every reading:

- every repo is listed in full at least every ``full_listing_every`` runs (the repo's
  :class:`~.versions.RepoCursor`, stamped into its docs' revisions), so an edit the filter
  missed is seen within that many runs;
- the count check: the known docs plus the newly listed ones, minus tombstones, plus the
  repo's ``count_offset`` (what ``items_count`` counted beyond the docs the last full listing
  showed us: its drafts, when it counts drafts) must add up to ``items_count``, else the repo
  is listed in full; drafts listed by an incremental listing count the same way as in the
  full one (not at all: they are in the offset), so a draft costs one full listing when it
  appears or is published, not one every run;
- deletions are decided on full listings only: a known doc no listing of this run vouches for
  (a tombstone, absent from its repo's full listing) may have moved, without a timestamp, to a
  repo listed incrementally (one doc leaving a repo while another enters keeps its count), so
  then every repo is listed in full before anything is deleted (``Walk.incremental_repos`` is
  0 whenever the connector reports a deletion).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from include.contract import VersionEvidence
from plugins.connectors.yuque.client import YuqueClient
from plugins.connectors.yuque.errors import YuqueError, YuqueNotFoundError, YuquePermissionError
from plugins.connectors.yuque.models import DocSummary, RecordError, Repo, TocItem, build_breadcrumbs, parse_time
from plugins.connectors.yuque.versions import (
    RepoCursor,
    book_id_of,
    doc_id_of,
    item_key,
    repo_cursor,
    revision_parts,
)

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
    known_ids: set[int] = field(default_factory=set)  # doc ids of the repo's indexed docs
    full: bool = False  # listed in full this run (else incrementally)
    previous: RepoCursor | None = None  # the cursor the last listing stamped
    cursor: RepoCursor | None = None  # the cursor this run's reports stamp (None: none)
    by_detail: bool = False  # its docs were read one by one, not listed (:mod:`.named`)

    def carry_cursor(self) -> None:
        """Stamp the cursor a run that compared only some docs leaves: the count goes on."""
        self.cursor = self.previous.advanced() if self.previous is not None else None


@dataclass(slots=True)
class Walk:
    repos: list[RepoDocs] = field(default_factory=list)
    complete: bool = True
    incomplete_reasons: list[str] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    extra_keys: set[str] = field(default_factory=set)  # exist, but unreadable records
    full_reasons: dict[str, str] = field(default_factory=dict)  # namespace -> why listed in full

    @property
    def incremental_repos(self) -> int:
        return sum(1 for entry in self.repos if not entry.full and not entry.by_detail)

    def incomplete(self, reason: str) -> None:
        self.complete = False
        self.incomplete_reasons.append(reason)


def group_known(known: Mapping[str, VersionEvidence]) -> dict[int | str, dict[str, VersionEvidence]]:
    """Known versions by repo: its book id (current keys) or namespace (legacy keys), one pass."""
    groups: dict[int | str, dict[str, VersionEvidence]] = {}
    for key, version in known.items():
        if doc_id_of(key) is None:
            continue
        book = book_id_of(key)
        groups.setdefault(book if book is not None else key.rpartition("/")[0], {})[key] = version
    return groups


class Walker:
    """One walk. ``resets``: whether this walk's full listings count as the periodic full
    listing (not in runs limited to ``only_keys`` or a window, which compare only some docs)."""

    def __init__(self, client: YuqueClient, options: dict[str, Any], log: Any = None, *, resets: bool = True) -> None:
        self.client = client
        self.options = options
        self.log = log or _log
        namespaces = options.get("namespaces")
        self.namespaces = None if namespaces in (None, "all") else [str(n) for n in namespaces]
        self.include_drafts = bool(options.get("include_drafts", False))
        self.full_listing_every = int(options.get("full_listing_every", 24))
        self.resets = resets

    def walk(self, known: dict[str, VersionEvidence], *, incremental: bool) -> Walk:
        """Every repo listed (incrementally where allowed), then in full wherever a deletion
        would otherwise be decided on an incremental listing."""
        walk = Walk()
        groups = group_known(known)
        for repo in self.repos(walk):
            repo_known = {**groups.get(repo.id, {}), **groups.get(repo.namespace, {})}
            self.list_repo(repo, walk, repo_known, incremental=incremental)
        if walk.incremental_repos and (doubt := self._doubt(walk, known)) is not None:
            self._relist_in_full(walk, doubt)
        return walk

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
        """List one repo; ``known``: the stored versions of its docs."""
        entry = RepoDocs(repo, known_ids={i for k in known if (i := doc_id_of(k)) is not None})
        try:
            deleted_listing = entry.known_ids and self.options.get("deleted_listing", True)
            entry.tombstones = self._tombstones(repo) if deleted_listing else []
            entry.previous = repo_cursor(v.revision for v in known.values())
            since = self._incremental_since(entry, walk, known) if incremental else None
            if since is None or not self._incremental(entry, walk, since):
                self._full(entry, walk)
        except YuqueNotFoundError:
            walk.incomplete(f"repo {repo.namespace}: 404 while listing (deleted, or not visible); nothing inferred")
            return
        except YuquePermissionError as exc:
            walk.incomplete(f"repo {repo.namespace}: {exc.message}")
            return
        if self.options.get("breadcrumbs", True):
            entry.toc = self.toc_of(repo)
        walk.repos.append(entry)

    def _incremental_since(self, entry: RepoDocs, walk: Walk, known: dict[str, VersionEvidence]) -> datetime | None:
        """Where an incremental listing of the repo starts; None: list it in full (why: noted)."""
        ns, previous = entry.repo.namespace, entry.previous
        if not entry.known_ids:
            return None  # nothing indexed yet: there is nothing to be incremental against
        if previous is None or entry.repo.items_count is None:
            walk.full_reasons[ns] = "no listing cursor" if previous is None else "no items_count"
            return None
        if previous.since_full + 1 >= self.full_listing_every:
            walk.full_reasons[ns] = f"due: {previous.since_full} incremental listings since the last full one"
            return None
        since = self._watermark(known)
        if since is None:
            walk.full_reasons[ns] = "a stored version no listing vouched for"
        return since

    def _full(self, entry: RepoDocs, walk: Walk) -> None:
        listing = self.client.list_docs(entry.repo.namespace)
        if not listing.complete:
            walk.incomplete(f"repo {entry.repo.namespace}: {listing.reason}")
        self.keep_published(entry, self._summaries(entry.repo, walk, listing.records))
        entry.unlisted = set()
        entry.full = True
        if not self.resets:  # only some docs were compared: the count goes on
            entry.carry_cursor()
        elif listing.complete and entry.repo.items_count is not None:
            shown = {d.id for d in entry.docs} | {
                doc_id_of(k) for k in walk.extra_keys if book_id_of(k) == entry.repo.id
            }
            entry.cursor = RepoCursor(0, entry.repo.items_count - len(shown))
        else:
            entry.cursor = None  # the next run lists it in full again

    def _incremental(self, entry: RepoDocs, walk: Walk, since: datetime) -> bool:
        """List only what changed since ``since``; False when the key set cannot be proven."""
        ns, previous, items_count = entry.repo.namespace, entry.previous, entry.repo.items_count
        if previous is None or items_count is None:  # _incremental_since lists these in full
            return False
        stamp = since.strftime("%Y-%m-%dT%H:%M:%S.") + f"{since.microsecond // 1000:03d}Z"
        listing = self.client.list_docs(ns, changed_at_gte=stamp)
        probe = Walk()
        docs = self._summaries(entry.repo, probe, listing.records)
        if not listing.complete or probe.skipped:
            walk.full_reasons[ns] = "the incremental listing was incomplete or had unreadable records"
            return False
        self.keep_published(entry, docs)  # drafts are in the offset, not in the listed docs
        gone = {t.id for t in entry.tombstones}
        alive = (entry.known_ids | {d.id for d in entry.docs}) - gone
        if len(alive) + previous.count_offset != items_count:
            walk.full_reasons[ns] = (
                f"count: {len(alive)} docs + offset {previous.count_offset}, items_count {items_count}"
            )
            self.log.info("Yuque %s: %s: listing in full", ns, walk.full_reasons[ns])
            return False
        entry.unlisted = entry.known_ids - {d.id for d in docs} - gone
        entry.cursor = previous.advanced()
        return True

    def _doubt(self, walk: Walk, known: dict[str, VersionEvidence]) -> str | None:
        """Why a deletion might be decided this run (so every repo must be listed in full first)."""
        listed = {d.id for e in walk.repos for d in e.docs} | {doc_id_of(k) for k in walk.extra_keys}
        for entry in walk.repos:
            ns = entry.repo.namespace
            if not entry.full and (elsewhere := entry.unlisted & listed):
                return f"doc {min(elsewhere)} of {ns} is listed in another repo"
            if tombstoned := ({t.id for t in entry.tombstones} & entry.known_ids) - listed:
                return f"doc {min(tombstoned)} of {ns} was deleted"
        if walk.complete:
            vouched = listed | {i for e in walk.repos for i in e.unlisted}
            if unseen := {i for k in known if (i := doc_id_of(k)) is not None} - vouched:
                return f"doc {min(unseen)} was in no listing"
        return None

    def _relist_in_full(self, walk: Walk, doubt: str) -> None:
        for entry in walk.repos:
            if entry.full:
                continue
            walk.full_reasons[entry.repo.namespace] = f"confirming before deleting: {doubt}"
            try:
                self._full(entry, walk)
            except YuqueNotFoundError:
                walk.incomplete(f"repo {entry.repo.namespace}: 404 while listing in full; nothing inferred")
            except YuquePermissionError as exc:
                walk.incomplete(f"repo {entry.repo.namespace}: {exc.message}")

    def keep_published(self, entry: RepoDocs, docs: list[DocSummary]) -> None:
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

    def _watermark(self, known: dict[str, VersionEvidence]) -> datetime | None:
        """The oldest ``l=`` of the repo's known versions, minus the overlap; None: list in full."""
        oldest: datetime | None = None
        for version in known.values():
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

    def toc_of(self, repo: Repo) -> dict[int, list[str]] | None:
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
