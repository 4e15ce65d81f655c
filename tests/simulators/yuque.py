"""A local Yuque OpenAPI v2 server for tests, following /work/shared/reference/yuque-api.md.

What it does like Yuque: ``X-Auth-Token`` auth (401 ``{"status","message"}``), a required
non-empty User-Agent (403, switchable), the ``{"data"}`` / ``{"meta":{"total"},"data"}`` envelopes,
repos of users and groups by login, docs paged by ``offset``/``limit`` (422 above 100),
``deleted=true`` and ``changed_at_gte`` listings, details by id or slug on all three routes,
per-format bodies (Markdown, HTML, lakesheet wrapper + ``body_sheet``, laketable schema +
paged ``body_table``), ``format`` only on details, the flat TOC with TITLE nodes carrying ``""``
ids, and per-token hourly limits (429).

Invented but harmless extensions, as the reference suggests: ``X-RateLimit-Limit`` /
``X-RateLimit-Remaining`` and ``Retry-After`` on 429, and injectable 429/500 bursts.

Behaviour of the real service the tests depend on (issue 20, checked against yuque.com; where it
is uncertain the simulator is configurable, and says so):

- a repo the token cannot see answers **404**, like a missing one, on every route (the real
  service hides existence; ``invisible_status`` = 403 gives the older simulator's answer);
- repos can be renamed (:meth:`YuqueSimulator.rename_repo`): the slug and so the namespace
  change, ``book_id`` and doc ids do not;
- metadata-only edits move ``updated_at`` alone (:meth:`YuqueSimulator.edit_meta`; content
  edits move both, :meth:`YuqueSimulator.edit_doc`); a TOC move may or may not touch the doc
  (``toc_move_touches_doc``), and which timestamp a sheet autosave moves is unverified
  (``sheet_autosave_moves``: "content" | "updated" | "both" | "none");
- drafts (``status`` 0) carry their text in ``body_draft`` with an empty ``body``; the spec's
  V2Doc ``status`` is "0 draft, 1 published" (yuque-openapi.yaml; RSSHub PR #2156 checks
  ``status === 1``);
- ``changed_at_gte`` filters on ``updated_at`` (the spec names it 变更时间, "change time";
  ``changed_at_field`` switches it to ``content_updated_at``);
- a burst limit per account (``per_second_limit``, a sliding second): exporters firing ~200
  fetches at once get 429 (web-farmer/yuque-exporter PR #1);
- 3xx answers (``redirect_to``: every API request redirects there, as a team space's host does);
- data tables may carry their schema in ``body_table.meta.columns`` instead of ``body``
  (``SimDoc.columns_in``; yuque/yuque-mcp-server PR #88 reads both);
- lakesheet cells of the real classes (checkbox, select, link, image, file, formula) go through
  :func:`encode_lakesheet` as given (yuque-dl's real mock ``test/mocks/data/sheetData.json``).

Lakesheet bodies are produced by compressing a sheet model the test supplies
(:func:`encode_lakesheet`), so a test can check every rebuilt cell against what it put in.

Run standalone with a small demo space: ``python -m tests.simulators.yuque --port 8765``.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.support.leakscan import register_secret

__all__ = ["SimDoc", "SimRepo", "YuqueSimulator", "body_sheet_of", "encode_lakesheet"]

_EPOCH = datetime(2026, 1, 5, 8, 0, 0, tzinfo=UTC)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def encode_lakesheet(sheets: Any, **wrapper_extra: Any) -> str:
    """The ``body`` string of a lakesheet doc holding ``sheets`` (the wrapper real docs carry)."""
    packed = zlib.compress(json.dumps(sheets, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    wrapper = {
        "format": "lakesheet",
        "version": "3.5.5",
        "larkJson": True,
        "sheet": packed.decode("latin-1"),
        "calcChain": [],
        "vessels": {},
        "useUTC": True,
        "useIndex": True,
        "customColors": [],
        "meta": {"sort": 0, "shareFilter": 0},
        "formulaCalclated": True,
        "versionId": "SimVersion0001",
        **wrapper_extra,
    }
    return json.dumps(wrapper, ensure_ascii=False)


def _plain(v: Any) -> str:
    if isinstance(v, dict):
        if v.get("class") == "formula":
            return "" if v.get("value") is None else str(v.get("value"))
        return str(v.get("text") or v.get("name") or v.get("value") or "")
    return "" if v is None else str(v)


def body_sheet_of(sheets: list[dict[str, Any]]) -> str:
    """The simplified, uncompressed ``body_sheet`` Yuque sends beside the wrapper (strings only)."""
    out = []
    for sheet in sheets:
        data = sheet.get("data") or {}
        cells = {(int(r), int(c)): _plain(cell.get("v")) for r, row in data.items() for c, cell in row.items() if cell}
        rows = max((r for r, _ in cells), default=-1) + 1
        cols = max((c for _, c in cells), default=-1) + 1
        table = [[cells.get((r, c), "") for c in range(cols)] for r in range(rows)]
        out.append(
            {"name": sheet.get("name"), "index": sheet.get("index", 0), "rowCount": 200, "colCount": 26, "table": table}
        )
    return json.dumps({"version": "1.0", "data": out}, ensure_ascii=False)


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

    @property
    def namespace(self) -> str:
        return f"{self.owner}/{self.slug}"


class _TokenTable(dict[str, str]):
    """token -> login; every token put in (``add_account`` or a test writing the table directly)
    is registered for the session-end log scan."""

    def __setitem__(self, token: str, login: str) -> None:
        register_secret("yuque token", token)
        super().__setitem__(token, login)


class YuqueSimulator:
    """The simulated space plus the FastAPI app serving it; mutate it between requests."""

    def __init__(self) -> None:
        self.accounts: dict[str, dict[str, Any]] = {}  # login -> {"id", "type", "name", "members"}
        self.tokens: dict[str, str] = _TokenTable()  # token -> login
        self.repos: dict[int, SimRepo] = {}
        self.require_user_agent = True
        self.list_includes_format = False  # the 2.0.1 list schema has no 'format'
        self.hourly_limit = 5000
        self.burst_429 = 0  # the next N API requests answer 429
        self.burst_500 = 0
        self.retry_after: str | None = "0"
        self.invisible_status = 404  # what a repo the token cannot see answers (real: 404)
        self.toc_move_touches_doc = True  # a TOC move bumps the doc's updated_at (unverified)
        self.sheet_autosave_moves = "both"  # content | updated | both | none (unverified)
        self.changed_at_field = "updated_at"
        self.per_second_limit: int | None = None
        self.redirect_to: str | None = None
        self._recent: dict[str, list[float]] = {}
        self.counters: Counter[str] = Counter()
        self.requests: list[dict[str, Any]] = []
        # called after each answered request with its path: lets a test edit the space mid-walk
        self.on_request: Callable[[str], None] | None = None
        self._hour_counts: Counter[str] = Counter()
        self._clock = _EPOCH
        self._ids = 1000
        self._lock = threading.Lock()
        self.app = self._build_app()

    # ------------------------------------------------------------------ space building

    def tick(self) -> str:
        """Now, by the wall clock (the connector stamps its listings with it, as it would with
        Yuque's), and always later than the last tick, so every edit has its own time."""
        self._clock = max(datetime.now(UTC), self._clock + timedelta(milliseconds=1))
        return _iso(self._clock)

    def settle(self, limit: float = 5.0) -> None:
        """Wait (at most ``limit`` s) until the wall clock has passed the last tick: edits made in
        a quick loop run ahead of it by a millisecond each."""
        deadline = time.monotonic() + limit
        while datetime.now(UTC) <= self._clock and time.monotonic() < deadline:
            time.sleep(0.005)

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    def add_account(self, login: str, *, group: bool = False, token: str | None = None, members: tuple = ()) -> None:
        self.accounts[login] = {
            "id": self._next_id(),
            "type": "Group" if group else "User",
            "name": login.title(),
            "members": set(members),
        }
        if token:
            self.tokens[token] = login

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
        return doc

    def edit_doc(self, doc: SimDoc, **changes: Any) -> None:
        for key, value in changes.items():
            setattr(doc, key, value)
        doc.updated_at = doc.content_updated_at = self.tick()

    def edit_meta(self, doc: SimDoc, **changes: Any) -> None:
        """A metadata-only edit (slug, title in some clients): ``updated_at`` moves alone."""
        for key, value in changes.items():
            setattr(doc, key, value)
        doc.updated_at = self.tick()

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

    def rename_repo(self, repo: SimRepo, slug: str, name: str | None = None) -> None:
        """A routine rename: namespace changes, ids stay; the docs' own timestamps do not move."""
        repo.slug = slug
        repo.name = name or repo.name
        repo.updated_at = self.tick()

    def delete_doc(self, doc: SimDoc) -> None:
        doc.deleted_at = self.tick()

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
            "created_at": _iso(_EPOCH),
            "updated_at": _iso(_EPOCH),
        }

    def _repo_json(self, repo: SimRepo) -> dict[str, Any]:
        live = [d for d in repo.docs.values() if d.deleted_at is None]
        return {
            "id": repo.id,
            "type": repo.type,
            "slug": repo.slug,
            "name": repo.name,
            "user_id": self.accounts[repo.owner]["id"],
            "description": "",
            "creator_id": self.accounts[repo.owner]["id"],
            "public": 0,
            "items_count": len(live),
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
            "public": 0,
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
            schema = doc.columns if doc.columns_in in ("body", "both") else []
            out["body"] = json.dumps(
                {"format": "laketable", "type": "Table", "version": "1.0", "sheet": [{"columns": schema}]},
                ensure_ascii=False,
            )
            start = (page - 1) * page_size
            records = [
                {"values": [{"value": v} for v in row], "createdAt": doc.created_at, "updatedAt": doc.updated_at}
                for row in doc.records[start : start + page_size]
            ]
            table: dict[str, Any] = {"totalCount": len(doc.records), "records": records, "pageSize": page_size}
            table["page"] = page
            if doc.columns_in in ("meta", "both"):
                table["meta"] = {"columns": doc.columns}
            out["body_table"] = json.dumps(table, ensure_ascii=False)
        else:
            out["body"] = doc.body
        return out

    def _toc_json(self, repo: SimRepo) -> list[dict[str, Any]]:
        nodes: list[dict[str, Any]] = []
        titles: dict[tuple[str, ...], str] = {}
        for doc in sorted(repo.docs.values(), key=lambda d: d.id):
            if doc.deleted_at is not None or doc.toc_path is None:
                continue
            parent = None
            for depth in range(1, len(doc.toc_path) + 1):
                path = tuple(doc.toc_path[:depth])
                if path not in titles:
                    titles[path] = f"title-{repo.id}-{len(titles)}"
                    nodes.append(
                        {"uuid": titles[path], "type": "TITLE", "title": path[-1], "url": "", "doc_id": "",
                         "level": "", "parent_uuid": parent or "", "visible": 1, "open_window": 0}
                    )  # fmt: skip
                parent = titles[path]
            nodes.append(
                {"uuid": f"doc-{doc.id}", "type": "DOC", "title": doc.title, "url": doc.slug, "doc_id": doc.id,
                 "id": doc.id, "level": len(doc.toc_path), "parent_uuid": parent or "", "visible": 1,
                 "open_window": 0}
            )  # fmt: skip
        return nodes

    # ------------------------------------------------------------------ HTTP

    def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
        self.counters[f"status:{status}"] += 1
        return JSONResponse({"status": status, "message": message}, status_code=status, headers=headers)

    def _hidden(self) -> JSONResponse:
        """A repo the token may not see: real Yuque answers 404 (``invisible_status``)."""
        if self.invisible_status == 404:
            return self._error(404, "Not Found")
        return self._error(self.invisible_status, "Forbidden")

    def _visible(self, login: str, repo: SimRepo) -> bool:
        owner = self.accounts.get(repo.owner, {})
        return repo.owner == login or login in owner.get("members", set())

    def _find_repo(self, ref: list[str]) -> SimRepo | None:
        if len(ref) == 1 and ref[0].isdigit():
            return self.repos.get(int(ref[0]))
        if len(ref) == 2:
            return next((r for r in self.repos.values() if r.owner == ref[0] and r.slug == ref[1]), None)
        return None

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="Yuque OpenAPI simulator")

        @app.get("/api/v2/{path:path}")
        def api(path: str, request: Request) -> Any:
            with self._lock:
                response = self._handle(path.strip("/").split("/"), request)
                if self.on_request is not None:
                    self.on_request(path)
                return response

        return app

    def _handle(self, parts: list[str], request: Request) -> Any:
        q = request.query_params
        self.counters["requests"] += 1
        # the token is never recorded; the User-Agent is, so tests can check it was sent
        self.requests.append(
            {"path": "/".join(parts), "query": dict(q), "user_agent": request.headers.get("user-agent")}
        )
        if self.require_user_agent and not request.headers.get("user-agent", "").strip():
            return self._error(403, "请设置 User-Agent 请求头")
        token = request.headers.get("x-auth-token", "")
        login = self.tokens.get(token)
        if login is None:
            return self._error(401, "Unauthorized")
        if self.redirect_to is not None:
            self.counters["status:302"] += 1
            return JSONResponse(None, status_code=302, headers={"Location": self.redirect_to})
        if self._over_burst(login):
            return self._error(429, "Too Many Requests", {"X-RateLimit-Limit": str(self.per_second_limit)})
        self._hour_counts[token] += 1
        if self._hour_counts[token] > self.hourly_limit:
            return self._error(
                429, "Too Many Requests", {"X-RateLimit-Limit": str(self.hourly_limit), "X-RateLimit-Remaining": "0"}
            )
        if self.burst_429 > 0:
            self.burst_429 -= 1
            headers = {"X-RateLimit-Limit": str(self.hourly_limit), "X-RateLimit-Remaining": "0"}
            if self.retry_after is not None:
                headers["Retry-After"] = self.retry_after
            return self._error(429, "Too Many Requests", headers)
        if self.burst_500 > 0:
            self.burst_500 -= 1
            return self._error(500, "Internal Server Error")
        return self._route(parts, q, login)

    def _over_burst(self, login: str) -> bool:
        """More than ``per_second_limit`` requests of one account within any one second."""
        if self.per_second_limit is None:
            return False
        now = time.monotonic()
        recent = [t for t in self._recent.get(login, []) if now - t < 1.0]
        over = len(recent) >= self.per_second_limit
        if not over:
            recent.append(now)
        self._recent[login] = recent
        return over

    def _route(self, parts: list[str], q: Any, login: str) -> Any:
        if parts == ["hello"]:
            return {"data": {"message": f"Hello {login}"}}
        if parts == ["user"]:
            self.counters["user"] += 1
            return {"data": self._user_json(login)}
        if len(parts) == 3 and parts[0] in ("users", "groups") and parts[2] == "repos":
            self.counters["repos"] += 1
            return self._list_repos(parts[1], q, login)
        if parts[0] != "repos" or len(parts) < 2:
            return self._error(404, "Not Found")
        if parts[1] == "docs" and len(parts) == 3:  # /repos/docs/:id
            repo = next((r for r in self.repos.values() if self._doc_ref(r, parts[2])), None)
            return self._doc_detail(repo, parts[2], q, login)
        for split in (1, 2):  # /repos/:id/... or /repos/:login/:slug/...
            ref, rest = parts[1 : 1 + split], parts[1 + split :]
            if split == 1 and not ref[0].isdigit():
                continue
            repo = self._find_repo(ref)
            if repo is None:
                continue
            if not rest:
                self.counters["repo"] += 1
                return (
                    {"data": {**self._repo_json(repo), "toc_yml": ""}} if self._visible(login, repo) else self._hidden()
                )
            if rest == ["docs"]:
                return self._list_docs(repo, q, login)
            if rest == ["toc"]:
                self.counters["toc"] += 1
                return {"data": self._toc_json(repo)} if self._visible(login, repo) else self._hidden()
            if len(rest) == 2 and rest[0] == "docs":
                return self._doc_detail(repo, rest[1], q, login)
        return self._error(404, "Not Found")

    def _limit(self, q: Any) -> tuple[int, int] | JSONResponse:
        try:
            offset, limit = int(q.get("offset", 0)), int(q.get("limit", 100))
        except ValueError:
            return self._error(400, "offset/limit must be integers")
        if limit > 100 or limit < 1 or offset < 0:
            return self._error(422, "limit 参数不能大于 100")
        return offset, limit

    def _list_repos(self, owner: str, q: Any, login: str) -> Any:
        if owner not in self.accounts:
            return self._error(404, "Not Found")
        paging = self._limit(q)
        if isinstance(paging, JSONResponse):
            return paging
        offset, limit = paging
        repos = [
            r for r in sorted(self.repos.values(), key=lambda r: r.id) if r.owner == owner and self._visible(login, r)
        ]
        if q.get("type"):
            repos = [r for r in repos if r.type == q["type"]]
        return {"data": [self._repo_json(r) for r in repos[offset : offset + limit]]}

    def _list_docs(self, repo: SimRepo, q: Any, login: str) -> Any:
        deleted = str(q.get("deleted", "false")).lower() in ("true", "1")
        self.counters["docs_deleted" if deleted else "docs"] += 1
        if not self._visible(login, repo):
            return self._hidden()
        paging = self._limit(q)
        if isinstance(paging, JSONResponse):
            return paging
        offset, limit = paging
        docs = [d for d in sorted(repo.docs.values(), key=lambda d: d.id) if (d.deleted_at is not None) == deleted]
        if q.get("changed_at_gte"):
            field_name = self.changed_at_field
            docs = [d for d in docs if (d.deleted_at or getattr(d, field_name)) >= q["changed_at_gte"]]
        page = [self._doc_json(repo, d, listing=True) for d in docs[offset : offset + limit]]
        return {"meta": {"total": len(docs)}, "data": page}

    @staticmethod
    def _doc_ref(repo: SimRepo, ref: str) -> SimDoc | None:
        doc = repo.docs.get(int(ref)) if ref.isdigit() else next((d for d in repo.docs.values() if d.slug == ref), None)
        return doc if doc is not None and doc.deleted_at is None else None

    def _doc_detail(self, repo: SimRepo | None, ref: str, q: Any, login: str) -> Any:
        self.counters["doc"] += 1
        doc = self._doc_ref(repo, ref) if repo is not None else None
        if repo is None or doc is None:
            return self._error(404, "Not Found")
        if not self._visible(login, repo):
            return self._hidden()
        try:
            page, page_size = int(q.get("page", 1)), int(q.get("page_size", 100))
        except ValueError:
            return self._error(400, "page/page_size must be integers")
        if page < 1 or not 1 <= page_size <= 200:
            return self._error(422, "page_size 范围 1-200")
        self.counters[f"doc:{doc.id}"] += 1
        return {"data": self._detail_json(repo, doc, page, page_size)}


def demo_space() -> YuqueSimulator:
    """A small space for manual runs: one Markdown doc, one lakesheet, one data table."""
    sim = YuqueSimulator()
    sim.add_account("demo", token="demo-token")
    repo = sim.add_repo("demo", "handbook", "员工手册")
    sim.add_doc(repo, "入职指南", body="# 入职指南\n\n第一天请到前台领取工牌。", toc_path=["入门"])
    sim.add_doc(
        repo,
        "预算表",
        format="lakesheet",
        sheets=[{"name": "2026", "index": 0, "data": {"0": {"0": {"v": "项目"}, "1": {"v": "金额"}},
                                                      "1": {"0": {"v": "服务器"}, "1": {"v": "1200"}}}}],
        toc_path=["财务"],
    )  # fmt: skip
    sim.add_doc(
        repo,
        "任务表",
        format="laketable",
        columns=[{"id": "c1", "name": "任务", "type": "text"}, {"id": "c2", "name": "完成", "type": "checkbox"}],
        records=[["写文档", True], ["评审", False]],
    )
    return sim


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    sim = demo_space()
    print(f"Yuque simulator on http://127.0.0.1:{args.port}/api/v2 (token: demo-token)", flush=True)
    uvicorn.run(sim.app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
