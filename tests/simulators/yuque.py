"""A local Yuque OpenAPI v2 server for tests, following ../shared/reference/yuque-api.md (beside the repository).

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
- ``changed_at_gte`` filters on ``updated_at`` (the spec names it only 变更时间下界, "lower
  bound of change time"; ``changed_at_field`` switches it to ``content_updated_at``), and a
  repo's ``items_count`` counts every live doc, drafts included (the spec: 文档数量, "number of
  docs"; ``items_count_counts`` = "published" leaves drafts out): the connector must be right
  under every reading of both;
- a doc can move to another repo keeping its id, with or without touching its ``updated_at``
  (:meth:`YuqueSimulator.move_doc_to_repo`);
- a burst limit per account (``per_second_limit``, a sliding second): exporters firing ~200
  fetches at once get 429 (web-farmer/yuque-exporter PR #1);
- 3xx answers (``redirect_to``: every API request redirects there, as a team space's host does);
- data tables may carry their schema in ``body_table.meta.columns`` instead of ``body``
  (``SimDoc.columns_in``; yuque/yuque-mcp-server PR #88 reads both);
- permissions (issue 35): repos and docs carry ``public`` (0 private, 1 public, 2 tenant-wide;
  :meth:`YuqueSimulator.set_public` changes it, moving no timestamp by default), and
  ``GET /groups/{login}/users`` pages V2GroupUser records by ``offset``, 100 a page (the spec
  fixes the size), filtered by ``role``; a token outside the group gets ``members_outsider_status``
  (403), and ``member_errors`` = {(group, offset): status} fails those pages on every try;
  membership changes with :meth:`YuqueSimulator.add_member` / ``remove_member``;
- ``doc_errors`` = {doc id: status} fails that doc's detail on every try and every route (a doc
  the token may not read, 403, while its repo answers; a doc whose reads fail, 500);
- lakesheet cells of the real classes (checkbox, select, link, image, file, formula) go through
  :func:`encode_lakesheet` as given (yuque-dl's real mock ``test/mocks/data/sheetData.json``).

Lakesheet bodies are produced by compressing a sheet model the test supplies
(:func:`encode_lakesheet`), so a test can check every rebuilt cell against what it put in.

Hostile answers: ``oversize_body`` = N pads every successful answer (error answers too with
``oversize_errors``; only those whose path ``oversize_only`` accepts, if set) past N bytes,
padding first, streamed without a Content-Length (``oversize_gzip`` sends it gzip-compressed,
a few KiB on the wire), to test the client's cap.

Layout: the body builders live in :mod:`._yuque_bodies`, the space (model, edits, JSON) in
:mod:`._yuque_space`, the HTTP routes here; every public name is importable from this module.

Run standalone with a small demo space: ``python -m tests.simulators.yuque --port 8765``.
"""

from __future__ import annotations

import argparse
import json
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from tests.simulators._yuque_bodies import body_sheet_of, encode_lakesheet, oversized_json
from tests.simulators._yuque_space import SimDoc, SimRepo, YuqueSpace

__all__ = ["SimDoc", "SimRepo", "YuqueSimulator", "body_sheet_of", "encode_lakesheet"]


class YuqueSimulator(YuqueSpace):
    """The simulated space plus the FastAPI app serving it; mutate it between requests."""

    def __init__(self) -> None:
        super().__init__()
        self.require_user_agent = True
        self.hourly_limit = 5000
        self.burst_429 = 0  # the next N API requests answer 429
        self.burst_500 = 0
        self.retry_after: str | None = "0"
        self.invisible_status = 404  # what a repo the token cannot see answers (real: 404)
        self.changed_at_field = "updated_at"
        self.per_second_limit: int | None = None
        self.redirect_to: str | None = None
        self.oversize_body: int | None = None  # pad every 200 answer past this many bytes
        self.oversize_gzip = False  # ... and send that padding gzip-compressed
        self.oversize_errors = False  # ... error answers too (their message after the padding)
        self.oversize_only: Callable[[str], bool] | None = None  # which paths (all when None)
        self.members_outsider_status = 403  # a token neither the group nor a member lists members
        self.member_errors: dict[tuple[str, int], int] = {}  # (group, offset) -> status, always
        self.doc_errors: dict[int, int] = {}  # doc id -> status of its detail, always
        self._recent: dict[str, list[float]] = {}
        # called after each answered request with its path: lets a test edit the space mid-walk
        self.on_request: Callable[[str], None] | None = None
        self._hour_counts: Counter[str] = Counter()
        self.app = self._build_app()

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
        # a public or tenant-wide repo is readable by every account (all of them are one space)
        return repo.public in (1, 2) or repo.owner == login or login in owner.get("members", set())

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
            if self._pads(path, response):
                return self._oversized(response, self.oversize_body or 0)
            return response

        return app

    def _pads(self, path: str, response: Any) -> bool:
        if self.oversize_body is None or (self.oversize_only is not None and not self.oversize_only(path.strip("/"))):
            return False
        return isinstance(response, dict) or (self.oversize_errors and isinstance(response, JSONResponse))

    def _oversized(self, response: dict[str, Any] | JSONResponse, size: int) -> StreamingResponse:
        """``response`` padded past ``size`` bytes, streamed without a Content-Length."""
        self.counters["oversized"] += 1
        status, headers = 200, {}
        answer: dict[str, Any]
        if isinstance(response, JSONResponse):  # an error answer: same status and headers
            status = response.status_code
            headers = {k: v for k, v in response.headers.items() if k not in ("content-length", "content-type")}
            answer = json.loads(bytes(response.body))
        else:
            answer = response
        body: Iterator[bytes] = oversized_json(answer, size)
        if self.oversize_gzip:
            body, headers["Content-Encoding"] = _gzipped(body), "gzip"
        return StreamingResponse(body, status_code=status, media_type="application/json", headers=headers)

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
        if len(parts) == 3 and parts[0] == "groups" and parts[2] == "users":
            self.counters["group_users"] += 1
            return self._list_members(parts[1], q, login)
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

    def _list_members(self, group: str, q: Any, login: str) -> Any:
        acc = self.accounts.get(group)
        if acc is None or acc["type"] != "Group":
            return self._error(404, "Not Found")
        if login != group and login not in acc["members"]:
            return self._error(self.members_outsider_status, "无操作权限")
        try:
            offset = int(q.get("offset", 0))
            role = int(q["role"]) if q.get("role") not in (None, "") else None
        except ValueError:
            return self._error(400, "offset/role must be integers")
        if role is not None and role not in (0, 1, 2):
            return self._error(422, "role 参数非法")
        if (failing := self.member_errors.get((group, offset))) is not None:
            return self._error(failing, "Internal Server Error" if failing >= 500 else "无操作权限")
        members = [m for m in sorted(acc["members"]) if role is None or acc["roles"].get(m, 1) == role]
        return {"data": [self._group_user_json(group, m) for m in members[offset : offset + 100]]}

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
        if (failing := self.doc_errors.get(doc.id)) is not None:
            return self._error(failing, "Internal Server Error" if failing >= 500 else "无操作权限")
        try:
            page, page_size = int(q.get("page", 1)), int(q.get("page_size", 100))
        except ValueError:
            return self._error(400, "page/page_size must be integers")
        if page < 1 or not 1 <= page_size <= 200:
            return self._error(422, "page_size 范围 1-200")
        self.counters[f"doc:{doc.id}"] += 1
        return {"data": self._detail_json(repo, doc, page, page_size)}


def _gzipped(chunks: Iterator[bytes]) -> Iterator[bytes]:
    packer = zlib.compressobj(wbits=zlib.MAX_WBITS | 16)  # gzip framing (RFC 1952)
    for chunk in chunks:
        yield packer.compress(chunk)
    yield packer.flush()


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
