"""Discovery of named docs without listing repos: a run limited to ``only_keys`` (the docs change
events name) reads each named doc's detail (``GET /repos/{book_id}/docs/{id}``) instead of
listing the source's repos.

Per repo named: its detail (``GET /repos/{book_id}``: namespace, name, permission levels, and
that it still answers) and, with ``breadcrumbs``, its TOC, as the walk reads them; then each named
doc's detail. The walk this builds (:class:`~.walk.Walk`, one :class:`~.walk.RepoDocs` per repo,
``by_detail``) goes through the connector's own comparison and :class:`~include.contract.Change`
making, so a doc answered is compared and re-fetched exactly as a listed one (same version
evidence, title, URL, access block; the repo's cursor carried as in any run limited to keys).

A detail answering 404 while its repo answers, and the doc by its global id
(``GET /repos/docs/{id}``) answering 404 too, is an explicit deletion, through the plan's usual
path and mass-delete guard (the global read tells a deleted doc from one moved to another repo,
which the walk renames, keeping its doc id). Anything else makes the connector list the repos as
it always did, so a named run is never less careful than a full one: a key never indexed (its
repo's membership in the source is then unknown), a repo that does not answer or is outside the
configured ``namespaces`` / owner / ``repo_types``, a 403, a 5xx or transport failure after the
client's retries, an unreadable record, a doc found in another repo, a draft the source skips,
and lakesheets (the type whose timestamps an autosave may move unverified; the walk compares
their listed records).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from include.contract import Change, ChangeKind, VersionEvidence
from plugins.connectors.base import DiscoveryRequest
from plugins.connectors.yuque.client import YuqueClient
from plugins.connectors.yuque.errors import YuqueError, YuqueNotFoundError
from plugins.connectors.yuque.models import DocSummary, RecordError, Repo
from plugins.connectors.yuque.options import YuqueOptions
from plugins.connectors.yuque.versions import book_id_of, doc_id_of, item_key, repo_cursor
from plugins.connectors.yuque.walk import RepoDocs, Walk, Walker, group_known

__all__ = ["GONE_REASON", "named_walk"]

_log = logging.getLogger(__name__)

GONE_REASON = "deleted at source (its detail and its global id answer 404; its repo answers)"


class _Undecided(Exception):
    """The named docs cannot be decided from their details: the connector walks."""


def named_walk(
    client: YuqueClient, options: YuqueOptions, request: DiscoveryRequest, log: Any = None
) -> tuple[Walk, list[Change]] | None:
    """The walk and deletions of a run limited to indexed docs (``only_keys``), read from their
    details; None: the connector lists the repos, as for any other run (see the module's doc)."""
    log = log or _log
    keys = request.only_keys or []
    if not keys or request.full_resync or not set(keys) <= request.stored:
        return None
    by_repo: dict[int, list[int]] = {}
    for key in keys:
        book_id, doc_id = book_id_of(key), doc_id_of(key)
        if book_id is None or doc_id is None:
            return None
        by_repo.setdefault(book_id, []).append(doc_id)
    reader = _Reader(client, options)
    known = group_known(request.known)
    walk, deleted = Walk(complete=False), []  # nothing was listed: no absence means anything
    try:
        for book_id, doc_ids in by_repo.items():
            entry, gone = reader.repo_docs(book_id, doc_ids, known.get(book_id, {}))
            walk.repos.append(entry)
            deleted += [Change(item_key(book_id, d), ChangeKind.DELETED, reason=GONE_REASON) for d in gone]
    except _Undecided as why:
        log.info("Yuque: named doc(s) undecided by their details (%s): listing the repos", why)
        return None
    return walk, deleted


class _Reader:
    def __init__(self, client: YuqueClient, options: YuqueOptions) -> None:
        self.client = client
        self.options = options
        self.walker = Walker(client, options.model_dump(), resets=False)
        self._login: str | None = options.login

    def repo_docs(
        self, book_id: int, doc_ids: list[int], known: dict[str, VersionEvidence]
    ) -> tuple[RepoDocs, list[int]]:
        """The repo's entry holding the named docs that answered, and the ids of those gone."""
        repo = self._repo(book_id)
        entry = RepoDocs(repo, known_ids={i for k in known if (i := doc_id_of(k)) is not None}, by_detail=True)
        entry.previous = repo_cursor(v.revision for v in known.values())
        entry.carry_cursor()
        docs: list[DocSummary] = []
        gone: list[int] = []
        for doc_id in dict.fromkeys(doc_ids):
            doc = self._doc(repo, doc_id)
            if doc is None:
                gone.append(doc_id)
            else:
                docs.append(doc)
        self.walker.keep_published(entry, docs)
        if entry.drafts:
            raise _Undecided(f"repo {repo.namespace}: a named doc is a draft the source skips")
        if self.options.breadcrumbs:
            entry.toc = self.walker.toc_of(repo)
        return entry, gone

    def _repo(self, book_id: int) -> Repo:
        try:
            repo = Repo.from_api(self.client.get_repo(book_id))
        except YuqueError as exc:
            raise _Undecided(f"repo {book_id}: {exc.message}") from None
        except RecordError as exc:
            raise _Undecided(f"repo {book_id}: malformed record: {exc.reason}") from None
        if not self._member(repo):
            raise _Undecided(f"repo {repo.namespace} is not one the source lists")
        return repo

    def _member(self, repo: Repo) -> bool:
        """Whether the walk would list ``repo`` (its namespace, owner and type as configured)."""
        types = self.options.repo_types
        if types and repo.type not in types:
            return False
        namespaces = self.options.namespaces
        if namespaces not in (None, "all"):
            return repo.namespace in (namespaces or [])
        if self._login is None:
            try:
                self._login = str(self.client.account().get("login") or "")
            except YuqueError as exc:
                raise _Undecided(f"the token's account: {exc.message}") from None
        return bool(self._login) and repo.owner_login == self._login

    def _doc(self, repo: Repo, doc_id: int) -> DocSummary | None:
        """The doc's record from its detail, None when it is gone (see the module's doc)."""
        try:
            raw = self.client.get_doc(repo.id, doc_id)
        except YuqueNotFoundError:
            if self._anywhere(doc_id):
                raise _Undecided(f"doc {doc_id} answers by its global id: moved from {repo.namespace}?") from None
            return None
        except YuqueError as exc:
            raise _Undecided(f"doc {doc_id} of {repo.namespace}: {exc.message}") from None
        try:
            doc = DocSummary.from_api(raw)
        except RecordError as exc:
            raise _Undecided(f"doc {doc_id} of {repo.namespace}: malformed detail: {exc.reason}") from None
        book = raw.get("book_id")
        if doc.id != doc_id or (book is not None and str(book) != str(repo.id)):
            raise _Undecided(f"doc {doc_id}: its detail names doc {doc.id} of repo {book}")
        if doc.type == "Sheet" or doc.format == "lakesheet":
            raise _Undecided(f"doc {doc_id} of {repo.namespace} is a lakesheet")
        # the 2.0.1 list schema has no ``format``: the change says what a listed doc's says
        return dataclasses.replace(doc, format=None)

    def _anywhere(self, doc_id: int) -> bool:
        """Whether the doc answers by its global id (in another repo, or undecidable)."""
        try:
            self.client.get_doc_by_id(doc_id)
        except YuqueNotFoundError:
            return False
        except YuqueError:
            return True
        return True
