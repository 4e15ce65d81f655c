"""The state of a simulated Yuque space: accounts, tokens, repos and docs, how edits move their
timestamps, and their JSON as the API serves it (see :mod:`tests.simulators.yuque`)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.simulators._yuque_bodies import EPOCH, body_sheet_of, encode_lakesheet, iso, laketable_bodies, toc_nodes
from tests.simulators._yuque_hooks import YuqueWebhooks
from tests.support.leakscan import register_secret

__all__ = ["SimDoc", "SimRepo", "YuqueSpace"]


@dataclass
class SimDoc:
    id: int
    slug: str
    title: str
    format: str = "markdown"  # markdown | lake | html | lakesheet | laketable | anything (unsupported)
    body: str = ""  # Markdown / HTML source
    sheets: list[dict[str, Any]] | None = None  # lakesheet model (compressed into body)
    sheet_in: str = "body"  # body | draft | none (only body_sheet)
    raw_body: str | None = None  # verbatim body (e.g. a zlib bomb wrapper)
    columns: list[dict[str, Any]] = field(default_factory=list)  # laketable schema
    records: list[list[Any]] = field(default_factory=list)  # laketable rows (values)
    toc_path: list[str] | None = None  # TITLE nodes above it in the TOC; None = not in the TOC
    list_override: dict[str, Any] | None = None  # merged into its list record (schema drift)
    created_at: str = ""
    updated_at: str = ""
    content_updated_at: str = ""
    deleted_at: str | None = None
    status: int = 1  # 0 = draft (never published): its text is in body_draft only
    columns_in: str = "body"  # laketable schema in: body | meta (body_table.meta.columns) | both
    public: int = 0  # 0 private, 1 public, 2 tenant-wide (the spec's levels); see set_public

    @property
    def type(self) -> str:
        return {"lakesheet": "Sheet", "laketable": "Table", "html": "HtmlDoc"}.get(self.format, "Doc")


@dataclass
class SimRepo:
    id: int
    slug: str
    name: str
    owner: str
    type: str = "Book"
    docs: dict[int, SimDoc] = field(default_factory=dict)
    updated_at: str = ""
    public: int = 0  # 0 private, 1 public, 2 tenant-wide

    @property
    def namespace(self) -> str:
        return f"{self.owner}/{self.slug}"


class _TokenTable(dict[str, str]):
    """token -> login; every token put in (``add_account`` or a test writing the table directly)
    is registered for the session-end log scan."""

    def __setitem__(self, token: str, login: str) -> None:
        register_secret("yuque token", token)
        super().__setitem__(token, login)


class YuqueSpace:
    """The simulated space; :class:`tests.simulators.yuque.YuqueSimulator` serves it over HTTP."""

    def __init__(self) -> None:
        # login -> {"id", "type", "name", "members", "roles", "email"}: a group's ``members`` (logins)
        # and their ``roles`` (0 admin, 1 member, 2 read-only, the spec's V2GroupUser.role)
        self.accounts: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, str] = _TokenTable()  # token -> login
        self.repos: dict[int, SimRepo] = {}
        self.list_includes_format = False  # the 2.0.1 list schema has no 'format'
        self.toc_move_touches_doc = True  # a TOC move bumps the doc's updated_at (unverified)
        self.sheet_autosave_moves = "both"  # content | updated | both | none (unverified)
        # what a repo's items_count counts (the spec says only "number of docs"): every live doc
        # ("all", drafts included) or the published ones ("published")
        self.items_count_counts = "all"
        self.counters: Counter[str] = Counter()
        self.requests: list[dict[str, Any]] = []
        self._clock = EPOCH
        self._ids = 1000
        self._lock = threading.Lock()
        self.webhooks = YuqueWebhooks(self)  # per-repo webhook URLs and their deliveries

    # ------------------------------------------------------------------ space building

    def tick(self) -> str:
        """Now, by the wall clock (the connector stamps its listings with it, as it would with
        Yuque's), and always later than the last tick, so every edit has its own time."""
        self._clock = max(datetime.now(UTC), self._clock + timedelta(milliseconds=1))
        return iso(self._clock)

    def settle(self, limit: float = 5.0) -> None:
        """Wait (at most ``limit`` s) until the wall clock has passed the last tick: edits made in
        a quick loop run ahead of it by a millisecond each."""
        deadline = time.monotonic() + limit
        while datetime.now(UTC) <= self._clock and time.monotonic() < deadline:
            time.sleep(0.005)

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    def add_account(
        self,
        login: str,
        *,
        group: bool = False,
        token: str | None = None,
        members: tuple[str, ...] = (),
        email: str | None = None,
    ) -> None:
        """``email``: served on the user object, which the 2.0.1 V2User does not have (a private
        deployment might): the permission reader maps it when present."""
        self.accounts[login] = {
            "id": self._next_id(),
            "type": "Group" if group else "User",
            "name": login.title(),
            "members": set(members),
            "roles": dict.fromkeys(members, 1),
            "email": email,
        }
        if token:
            self.tokens[token] = login

    def add_member(self, group: str, login: str, role: int = 1) -> None:
        """``login`` joins ``group`` (an account is made for a new login)."""
        if login not in self.accounts:
            self.add_account(login)
        self.accounts[group]["members"].add(login)
        self.accounts[group]["roles"][login] = role

    def remove_member(self, group: str, login: str) -> None:
        self.accounts[group]["members"].discard(login)
        self.accounts[group]["roles"].pop(login, None)

    def set_public(self, target: SimRepo | SimDoc, level: int, *, touches: bool = False) -> None:
        """Change a repo's or doc's visibility. Whether Yuque moves ``updated_at`` for it is
        unverified; by default nothing moves (only a permission sync can see the change)."""
        target.public = level
        if touches:
            target.updated_at = self.tick()

    def add_repo(self, owner: str, slug: str, name: str | None = None, *, type: str = "Book") -> SimRepo:
        repo = SimRepo(self._next_id(), slug, name or slug, owner, type=type, updated_at=self.tick())
        self.repos[repo.id] = repo
        return repo

    def add_doc(self, repo: SimRepo, title: str, *, slug: str | None = None, **kw: Any) -> SimDoc:
        now = self.tick()
        doc_id = self._next_id()
        doc = SimDoc(
            doc_id, slug or f"doc-{doc_id}", title, created_at=now, updated_at=now, content_updated_at=now, **kw
        )
        repo.docs[doc.id] = doc
        self.webhooks.emit(doc, "publish")
        return doc

    def edit_doc(self, doc: SimDoc, **changes: Any) -> None:
        for key, value in changes.items():
            setattr(doc, key, value)
        doc.updated_at = doc.content_updated_at = self.tick()
        self.webhooks.emit(doc, "update")

    def edit_meta(self, doc: SimDoc, **changes: Any) -> None:
        """A metadata-only edit (slug, title in some clients): ``updated_at`` moves alone."""
        for key, value in changes.items():
            setattr(doc, key, value)
        doc.updated_at = self.tick()
        self.webhooks.emit(doc, "update")

    def move_doc(self, doc: SimDoc, toc_path: list[str] | None) -> None:
        """Move the doc in its repo's TOC (content untouched)."""
        doc.toc_path = toc_path
        if self.toc_move_touches_doc:
            doc.updated_at = self.tick()

    def autosave_sheet(self, doc: SimDoc, sheets: list[dict[str, Any]]) -> None:
        """A sheet's autosave: which timestamp it moves is ``sheet_autosave_moves``."""
        doc.sheets = sheets
        now = self.tick()
        if self.sheet_autosave_moves in ("content", "both"):
            doc.content_updated_at = now
        if self.sheet_autosave_moves in ("updated", "both"):
            doc.updated_at = now

    def move_doc_to_repo(self, doc: SimDoc, target: SimRepo, *, touches_doc: bool = False) -> None:
        """Move the doc to another repo, keeping its id; whether its ``updated_at`` moves is
        unverified (``touches_doc``; off: the move the count check alone cannot see)."""
        source = next(r for r in self.repos.values() if doc.id in r.docs)
        target.docs[doc.id] = source.docs.pop(doc.id)
        if touches_doc:
            doc.updated_at = self.tick()

    def rename_repo(self, repo: SimRepo, slug: str, name: str | None = None) -> None:
        """A routine rename: namespace changes, ids stay; the docs' own timestamps do not move."""
        repo.slug = slug
        repo.name = name or repo.name
        repo.updated_at = self.tick()

    def delete_doc(self, doc: SimDoc) -> None:
        doc.deleted_at = self.tick()
        self.webhooks.emit(doc, "delete")

    def reset_counters(self) -> None:
        with self._lock:
            self.counters.clear()
            self.requests.clear()

    # ------------------------------------------------------------------ serialisation

    def _user_json(self, login: str) -> dict[str, Any]:
        acc = self.accounts[login]
        return {
            "id": acc["id"],
            "type": acc["type"],
            "login": login,
            "name": acc["name"],
            "avatar_url": "",
            "books_count": sum(1 for r in self.repos.values() if r.owner == login),
            "public_books_count": 0,
            "followers_count": 0,
            "following_count": 0,
            "public": 0,
            "description": "",
            "created_at": iso(EPOCH),
            "updated_at": iso(EPOCH),
            **({"email": acc["email"]} if acc.get("email") else {}),
        }

    def _group_user_json(self, group: str, login: str) -> dict[str, Any]:
        """One V2GroupUser record (``group`` is a V2Group: the user object's fields, near enough)."""
        acc = self.accounts[group]
        return {
            "id": self.accounts[login]["id"] * 7,
            "group_id": acc["id"],
            "user_id": self.accounts[login]["id"],
            "role": acc["roles"].get(login, 1),
            "created_at": iso(EPOCH),
            "updated_at": iso(EPOCH),
            "group": {**self._user_json(group), "members_count": len(acc["members"])},
            "user": self._user_json(login),
        }

    def _repo_json(self, repo: SimRepo) -> dict[str, Any]:
        live = [d for d in repo.docs.values() if d.deleted_at is None]
        counted = live if self.items_count_counts == "all" else [d for d in live if d.status != 0]
        return {
            "id": repo.id,
            "type": repo.type,
            "slug": repo.slug,
            "name": repo.name,
            "user_id": self.accounts[repo.owner]["id"],
            "description": "",
            "creator_id": self.accounts[repo.owner]["id"],
            "public": repo.public,
            "items_count": len(counted),
            "likes_count": 0,
            "watches_count": 0,
            "content_updated_at": max((d.content_updated_at for d in live), default=repo.updated_at),
            "created_at": repo.updated_at,
            "updated_at": repo.updated_at,
            "user": self._user_json(repo.owner),
            "namespace": repo.namespace,
        }

    def _doc_json(self, repo: SimRepo, doc: SimDoc, *, listing: bool) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": doc.id,
            "type": doc.type,
            "slug": doc.slug,
            "title": doc.title,
            "description": "",
            "cover": None,
            "user_id": self.accounts[repo.owner]["id"],
            "book_id": repo.id,
            "last_editor_id": self.accounts[repo.owner]["id"],
            "public": doc.public,
            "status": doc.status,
            "likes_count": 0,
            "read_count": 0,
            "comments_count": 0,
            "word_count": len(doc.body),
            "created_at": doc.created_at,
            "updated_at": doc.updated_at,
            "content_updated_at": doc.content_updated_at,
            "published_at": doc.content_updated_at,
            "first_published_at": doc.created_at,
        }
        if listing:
            if doc.deleted_at is not None:
                out["deleted_at"] = doc.deleted_at
                out["deleted_slug"] = f"{doc.slug}-deleted"
            if self.list_includes_format:
                out["format"] = doc.format
            if doc.list_override:
                out.update(doc.list_override)
        return out

    def _detail_json(self, repo: SimRepo, doc: SimDoc, page: int, page_size: int) -> dict[str, Any]:
        out = self._doc_json(repo, doc, listing=False)
        out.update(format=doc.format, body="", body_draft="", body_html="", body_lake="")
        out["creator"] = self._user_json(repo.owner)
        if doc.format in ("markdown", "lake") and doc.status == 0:
            out["body_draft"] = doc.body  # never published: nothing in body / body_html
        elif doc.format in ("markdown", "lake"):
            out["body"] = doc.body
            out["body_html"] = f"<p>{doc.body}</p>"
            out["body_lake"] = f'<!doctype lake><p data-lake-id="x">{doc.body}</p>'
        elif doc.format == "html":
            out["body"] = out["body_html"] = doc.body
        elif doc.format == "lakesheet":
            wrapper = doc.raw_body if doc.raw_body is not None else encode_lakesheet(doc.sheets or [])
            if doc.sheet_in == "body":
                out["body"] = wrapper
            elif doc.sheet_in == "draft":
                out["body_draft"] = wrapper
            out["body_sheet"] = body_sheet_of(doc.sheets or [])
        elif doc.format == "laketable":
            out["body"], out["body_table"] = laketable_bodies(doc, page, page_size)
        else:
            out["body"] = doc.body
        return out

    def _toc_json(self, repo: SimRepo) -> list[dict[str, Any]]:
        return toc_nodes(repo)
