"""Who may read a Yuque doc, and who the members of the groups that own repos are.

Yuque's OpenAPI v2 (2.0.1 spec, ``yuque-openapi.yaml``) carries permissions in two places:

- a ``public`` level on every repo (V2Book) and doc (V2Doc / V2DocDetail): 0 private, 1 public,
  2 public within the enterprise space (企业内公开). A doc is readable by the *narrower* of its
  repo's level and its own (a public doc in a private repo is private to the repo's readers);
- the members of a group (``GET /groups/{login}/users``, V2GroupUser with ``role`` 0 admin,
  1 member, 2 read-only member; 100 a page, paged by ``offset``).

The spec has no per-repo collaborator endpoint, so a private repo maps to its owner: a
group-owned repo to ``group:yuque:<login>`` (expanded through :func:`list_group_members`), a
user-owned one to ``user:yuque:<login>``. A tenant-wide level maps to ``tenant:yuque:<host>``
(plus the owner's entry, so its readers keep it while the tenant listing is incomplete).

Fail-closed: a level that is missing or not 0/1/2, an owner type other than ``Group``/``User``,
or any failed request makes the doc ``AccessControl.unknown("acl_unknown:<cause>")``.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from include.acl import AccessControl, group_entry, tenant_entry, user_entry
from plugins.connectors.base import AccessRequest, GroupListing
from plugins.connectors.yuque.client import PAGE_LIMIT, YuqueClient
from plugins.connectors.yuque.errors import YuqueBudgetExhausted, YuqueError, YuqueTransportError
from plugins.connectors.yuque.models import RecordError, Repo, public_level
from plugins.connectors.yuque.versions import book_id_of, doc_id_of

__all__ = [
    "NAMESPACE",
    "AccessReader",
    "RepoAccess",
    "access_metadata",
    "doc_access",
    "list_group_members",
    "narrower",
]

_log = logging.getLogger(__name__)

NAMESPACE = "yuque"  # of every entry this source writes (include.acl)
PRIVATE, PUBLIC, TENANT = 0, 1, 2
_BREADTH = {PRIVATE: 0, TENANT: 1, PUBLIC: 2}  # how many people a level lets in, in order


def narrower(repo_level: int, doc_level: int) -> int:
    """The level letting in fewer people: what a doc's readers really are."""
    return min(repo_level, doc_level, key=_BREADTH.__getitem__)


def _unknown(cause: str, warning: str) -> AccessControl:
    return AccessControl.unknown(f"acl_unknown:{cause}", warning)


@dataclass(frozen=True, slots=True)
class RepoAccess:
    """What a repo contributes to its docs' permissions."""

    book_id: int
    namespace: str
    public: int | None
    owner_login: str | None
    owner_type: str | None  # "Group" | "User"
    items_count: int | None = None

    @classmethod
    def of(cls, repo: Repo) -> RepoAccess:
        return cls(repo.id, repo.namespace, repo.public, repo.owner_login, repo.owner_type, repo.items_count)

    def owner_entries(self) -> tuple[list[str], list[str]] | None:
        """([user entries], [group entries]) of the owner's readers; None: owner unreadable."""
        if not self.owner_login:
            return None
        if self.owner_type == "Group":
            return [], [group_entry(NAMESPACE, self.owner_login)]
        if self.owner_type == "User":
            return [user_entry(NAMESPACE, self.owner_login)], []
        return None


def access_metadata(repo: Repo, doc_public: int | None) -> dict[str, Any]:
    """The ``access`` block a discovered Change carries, so the fetch stage's permission read
    needs no request: the repo's level and owner, and the doc's level when listed."""
    block: dict[str, Any] = {
        "repo_public": repo.public,
        "owner_login": repo.owner_login,
        "owner_type": repo.owner_type,
    }
    if doc_public is not None:
        block["doc_public"] = doc_public
    return block


def doc_access(repo: RepoAccess, doc_public: int | None, tenant: str) -> AccessControl:
    """One doc's permissions from its repo's and its own level."""
    if repo.public is None:
        return _unknown("repo_level", f"repo {repo.namespace}: 'public' level missing or not 0/1/2")
    if doc_public is None:
        return _unknown("doc_level", f"a doc of {repo.namespace}: 'public' level missing or not 0/1/2")
    level = narrower(repo.public, doc_public)
    if level == PUBLIC:
        return AccessControl.everyone()
    owner = repo.owner_entries()
    if owner is None:
        return _unknown("owner", f"repo {repo.namespace}: owner {repo.owner_login!r} of type {repo.owner_type!r}")
    users, groups = owner
    tenants = [tenant_entry(NAMESPACE, tenant)] if level == TENANT else []
    return AccessControl.of(users=users, groups=groups, tenants=tenants)


def _cause(exc: BaseException) -> str:
    """A short, countable cause of a failed read (never the token or a body)."""
    if isinstance(exc, YuqueBudgetExhausted):
        return "rate_budget"
    if isinstance(exc, YuqueError) and exc.status:
        return f"http_{exc.status}"
    if isinstance(exc, YuqueTransportError):
        return "transport"  # timeouts, refused connections, non-JSON answers
    if isinstance(exc, RecordError):
        return "malformed"
    return type(exc).__name__


def _from_metadata(book_id: int, meta: Mapping[str, Any]) -> tuple[RepoAccess, int | None] | None:
    """The repo's access and the doc's level from a Change's ``access`` block; None: absent."""
    block = meta.get("access")
    if not isinstance(block, Mapping) or "repo_public" not in block:
        return None
    login, kind = block.get("owner_login"), block.get("owner_type")
    repo = RepoAccess(
        book_id,
        str(meta.get("namespace") or book_id),
        public_level(block.get("repo_public")),
        login if isinstance(login, str) else None,
        kind if isinstance(kind, str) else None,
    )
    return repo, public_level(block.get("doc_public"))


class AccessReader:
    """Reads the permissions of a batch of items; ``errors`` counts the causes of unknowns."""

    def __init__(self, client: YuqueClient, tenant: str, log: Any = None) -> None:
        self.client = client
        self.tenant = tenant
        self.log = log or _log
        self.errors: Counter[str] = Counter()

    def read(self, items: Sequence[AccessRequest]) -> dict[str, AccessControl]:
        out: dict[str, AccessControl] = {}
        # book id -> [(item key, doc id)] whose permissions need the repo or the doc read
        pending: dict[int, list[tuple[str, int]]] = {}
        known_repos: dict[int, RepoAccess] = {}
        for item in items:
            book, doc = book_id_of(item.item_key), doc_id_of(item.item_key)
            if book is None or doc is None:
                out[item.item_key] = self._count(_unknown("key", f"{item.item_key!r} is not <book_id>/<doc_id>"))
                continue
            found = _from_metadata(book, item.metadata)
            if found is not None and found[1] is not None:
                out[item.item_key] = self._count(doc_access(found[0], found[1], self.tenant))
                continue
            if found is not None and found[0].public is not None:
                known_repos[book] = found[0]  # the repo is known; only the doc's level is not
            pending.setdefault(book, []).append((item.item_key, doc))
        for book, docs in pending.items():
            out.update(self._read_repo(book, docs, known_repos.get(book)))
        return out

    def _count(self, access: AccessControl) -> AccessControl:
        if access.unknown_reason is not None:
            self.errors[access.unknown_reason] += 1
        return access

    def _read_repo(self, book: int, docs: list[tuple[str, int]], repo: RepoAccess | None) -> dict[str, AccessControl]:
        """Permissions of some docs of one repo: its detail once (unless known), then the docs'
        levels from its listing or their details, whichever takes fewer requests."""
        if repo is None:  # from the metadata it is known, but for its size: details then
            try:
                repo = RepoAccess.of(Repo.from_api(self.client.get_repo(book)))
            except (YuqueError, RecordError) as exc:
                cause = _cause(exc)
                self.log.warning("Yuque permissions of repo %s unreadable: %s", book, cause)
                failed = _unknown(cause, f"repo {book}: {exc}")
                return {key: self._count(failed) for key, _ in docs}
        levels = self._doc_levels(repo, [doc for _, doc in docs])
        out = {}
        for key, doc in docs:
            level = levels.get(doc)
            if isinstance(level, AccessControl):
                out[key] = self._count(level)
            else:
                out[key] = self._count(doc_access(repo, level, self.tenant))
        return out

    def _doc_levels(self, repo: RepoAccess, doc_ids: list[int]) -> dict[int, int | AccessControl | None]:
        levels: dict[int, int | AccessControl | None] = {}
        pages = max(1, math.ceil((repo.items_count or 0) / PAGE_LIMIT))
        if repo.items_count is not None and len(doc_ids) > pages:
            wanted = set(doc_ids)
            try:
                for raw in self.client.list_docs(repo.book_id).records:
                    if isinstance(raw, dict) and raw.get("id") in wanted:
                        levels[raw["id"]] = public_level(raw.get("public"))
            except YuqueError as exc:  # the details below may still answer
                self.log.warning("Yuque doc listing of %s failed (%s); reading details", repo.namespace, _cause(exc))
        for doc in doc_ids:
            if doc in levels:
                continue
            try:
                levels[doc] = public_level(self.client.get_doc(repo.book_id, doc).get("public"))
            except YuqueError as exc:
                levels[doc] = _unknown(_cause(exc), f"doc {repo.book_id}/{doc}: {exc}")
        return levels


def _member_entries(record: Any) -> list[str]:
    """A V2GroupUser's user entries: the login, and the e-mail when one is present (the 2.0.1
    V2User has none; a private deployment may add it)."""
    user = record.get("user") if isinstance(record, dict) else None
    login = user.get("login") if isinstance(user, dict) else None
    if not isinstance(login, str) or not login:
        return []
    entries = [user_entry(NAMESPACE, login)]
    email = user.get("email") if isinstance(user, dict) else None
    if isinstance(email, str) and "@" in email:
        entries.append(user_entry("email", email))
    return entries


def list_group_members(client: YuqueClient, groups: Iterable[str], tenant: str, log: Any = None) -> GroupListing:
    """Members of each group (every role reads). A group whose listing failed is left out and
    the listing is incomplete (the engine keeps its stored members); the tenant entry (every
    member seen) is given only when every group was listed in full."""
    log = log or _log
    listing = GroupListing()
    start = client.sent
    everyone: set[str] = set()
    errors: Counter[str] = Counter()
    logins = sorted(set(groups))
    for login in logins:
        members: set[str] = set()
        try:
            for record in client.iter_group_users(login):
                found = _member_entries(record)
                if not found:
                    errors["malformed_member"] += 1  # that person sees less: fail-closed
                members.update(found)
        except YuqueError as exc:
            listing.complete = False
            errors[_cause(exc)] += 1
            log.warning("Yuque members of group %s unreadable: %s", login, _cause(exc))
            continue
        listing.members[group_entry(NAMESPACE, login)] = frozenset(members)
        everyone |= members
    if listing.complete and logins:
        listing.members[tenant_entry(NAMESPACE, tenant)] = frozenset(everyone)
    listing.errors = dict(errors)
    listing.requests = client.sent - start
    return listing
