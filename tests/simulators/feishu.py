"""A local Feishu Open Platform simulator (FastAPI) faithful to ../shared/reference/feishu-api.md.

Implements the calls a drive sync makes, with the documented shapes and codes:

- ``POST /open-apis/auth/v3/tenant_access_token/internal`` — same token while >= 30 min are left,
  a new one otherwise (the old one stays valid until its own expiry); :meth:`expire_tokens`
  invalidates every issued token on demand (business calls then answer 99991663).
- ``GET /open-apis/drive/v1/files`` — one folder level, ``page_size`` <= 200 (else 1064001),
  ``page_token`` pagination, shortcuts; the root (no ``folder_token``) returns everything
  unpaginated and without shortcuts.
- ``POST /open-apis/drive/v1/metas/batch_query`` — ``metas`` plus ``failed_list`` (970003/970005).
- ``POST/GET /open-apis/drive/v1/export_tasks[/:ticket]`` — tasks stay pending (``job_status``
  1 then 2) for a configurable number of polls, then end with a configurable status (0, 3, 107,
  108, 109, 110, 111, 122, 123, 6000); the exported file (a real .docx/.xlsx) expires
  ``export_file_ttl`` seconds after the task ends; ``export_render_seconds`` adds a wall-clock
  render time (benchmarks).
- ``GET /open-apis/drive/v1/export_tasks/file/:file_token/download`` and
  ``GET /open-apis/drive/v1/files/:file_token/download`` with either Content-Disposition style.
- ``GET /open-apis/wiki/v2/spaces/:space_id/nodes``.
- 429 bursts with ``x-ogw-ratelimit-reset`` (:meth:`burst`), optional enforcement of per-API
  limits (``enforce_limits``), and counters the tests read (:attr:`counters`).

Control from the same process through the methods, or over HTTP under ``/_sim/`` (used by
multi-process tests and the demo). ``python -m tests.simulators.feishu --port N`` serves a demo
drive.
"""

from __future__ import annotations

import argparse
import base64
import io
import itertools
import secrets
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

__all__ = ["DEMO_ROOT", "FeishuSimulator", "SimItem", "demo_drive"]

ONLINE_TYPES = ("doc", "docx", "sheet", "bitable")
_ALLOWED_EXT = {"doc": {"docx", "pdf"}, "docx": {"docx", "pdf"}, "sheet": {"xlsx", "csv"}, "bitable": {"xlsx", "csv"}}
_JOB_MSG = {
    0: "success",
    3: "internal error",
    107: "export documents too large",
    108: "processing timeout",
    109: "export content has no permission",
    110: "no permission",
    111: "docs deleted",
    122: "export forbidden while creating a copy",
    123: "docs not exist",
    6000: "too many images in document",
}
_MIME = {
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "pdf": "application/pdf",
    "csv": "text/csv",
}
_PREFIX = {"folder": "fld", "doc": "doc", "docx": "dox", "sheet": "sht", "bitable": "bas", "file": "box"}


@dataclass
class SimItem:
    token: str
    name: str
    type: str  # folder, doc, docx, sheet, bitable, mindnote, slides, file, shortcut
    parent: str  # folder token ("" = the app's root)
    content: Any = None  # str for docs, list[list] for sheets, bytes for files
    modified_time: int = 0
    created_time: int = 0
    target: str | None = None  # shortcut target token
    trashed: bool = False
    shared: bool = True
    export_status: int = 0
    export_pending_polls: int | None = None
    export_render_seconds: float | None = None  # wall time the export takes (on top of polls)
    disposition: str = "rfc5987"  # or "raw": raw UTF-8 bytes in filename=
    wiki_space: str | None = None
    wiki_parent: str | None = None
    media_type: str | None = None
    list_error: tuple[int, int] | None = None  # (HTTP status, code) answered when listing this folder


@dataclass
class _Task:
    ticket: str
    token: str
    type: str
    ext: str
    pending_polls: int
    status: int
    ready_at: float = 0.0
    polls: int = 0
    file_token: str | None = None
    finished_at: float | None = None
    data: bytes = b""
    file_name: str = ""


@dataclass
class _Burst:
    api: str | None
    remaining: int
    reset: int
    status: int
    code: int


@dataclass
class FeishuSimulator:
    app_id: str = "cli_sim_app"
    app_secret: str = "sim-secret-value"
    token_lifetime: int = 7200
    export_pending_polls: int = 2
    export_render_seconds: float = 0.0
    export_file_ttl: float = 600.0
    enforce_limits: dict[str, tuple[int, float]] = field(default_factory=dict)
    items: dict[str, SimItem] = field(default_factory=dict)
    counters: Counter = field(default_factory=Counter)
    clock_offset: float = 0.0

    def __post_init__(self) -> None:
        self._lock = threading.RLock()
        self._tokens: dict[str, float] = {}
        self._current: str | None = None
        self._tasks: dict[str, _Task] = {}
        self._files: dict[str, _Task] = {}
        self._bursts: list[_Burst] = []
        self._seen: dict[str, deque[float]] = {}
        self._seq = itertools.count(1)
        self.export_creations_by_token: Counter = Counter()
        self.app = self._build_app()

    # ----------------------------------------------------------------- control

    def now(self) -> float:
        return time.time() + self.clock_offset

    def _new_token(self, kind: str) -> str:
        return f"{_PREFIX.get(kind, 'nod')}cn{secrets.token_hex(8)}{next(self._seq):04d}"[:27]

    def add(self, kind: str, name: str, parent: str = "", content: Any = None, **kw: Any) -> str:
        with self._lock:
            token = kw.pop("token", None) or self._new_token(kind)
            t = int(kw.pop("modified_time", None) or self.now())
            self.items[token] = SimItem(token, name, kind, parent, content, t, t, **kw)
            return token

    def add_folder(self, name: str, parent: str = "", **kw: Any) -> str:
        return self.add("folder", name, parent, **kw)

    def add_shortcut(self, name: str, parent: str, target: str) -> str:
        return self.add("shortcut", name, parent, target=target)

    def edit(self, token: str, content: Any, *, modified_time: int | None = None) -> None:
        with self._lock:
            item = self.items[token]
            item.content = content
            item.modified_time = modified_time or max(int(self.now()), item.modified_time + 1)

    def trash(self, token: str) -> None:
        with self._lock:
            self.items[token].trashed = True

    def unshare(self, token: str) -> None:
        with self._lock:
            self.items[token].shared = False

    def break_folder(self, token: str, status: int = 500, code: int = 1061001) -> None:
        """Make listing this folder fail (default: a persistent internal error)."""
        with self._lock:
            self.items[token].list_error = (status, code)

    def set_export(
        self, token: str, status: int, pending_polls: int | None = None, render_seconds: float | None = None
    ) -> None:
        """How this item's exports end (``job_status``) and how long they stay pending."""
        with self._lock:
            self.items[token].export_status = status
            self.items[token].export_pending_polls = pending_polls
            self.items[token].export_render_seconds = render_seconds

    def expire_tokens(self) -> None:
        """Invalidate every issued tenant token (the next business calls answer 99991663)."""
        with self._lock:
            self._tokens.clear()
            self._current = None

    def burst(
        self, count: int, *, api: str | None = None, reset: int = 1, status: int = 429, code: int = 99991400
    ) -> None:
        """Answer the next ``count`` calls (to ``api``, or any business API) with a rate limit."""
        with self._lock:
            self._bursts.append(_Burst(api, count, reset, status, code))

    def expire_export_files(self) -> None:
        with self._lock:
            for task in self._files.values():
                task.finished_at = -1e12

    # ----------------------------------------------------------------- helpers

    @staticmethod
    def _err(status: int, code: int, msg: str, headers: dict[str, str] | None = None) -> JSONResponse:
        body = {"code": code, "msg": msg, "error": {"log_id": secrets.token_hex(8)}}
        return JSONResponse(body, status_code=status, headers=headers)

    @staticmethod
    def _ok(data: dict[str, Any]) -> JSONResponse:
        return JSONResponse({"code": 0, "msg": "success", "data": data})

    def _gate(self, request: Request, api: str) -> JSONResponse | None:
        """Auth check, rate-limit bursts and enforced limits, counting. None = proceed."""
        with self._lock:
            self.counters[f"{api}_requests"] += 1
            auth = request.headers.get("authorization", "")
            if not auth.startswith("Bearer ") or not auth[7:].strip():
                return self._err(400, 99991661, "Missing access token for authorization.")
            token = auth[7:].strip()
            if not token.startswith(("t-", "u-")):
                return self._err(400, 99991671, "Invalid token format.")
            if self._tokens.get(token, 0) <= self.now():
                self.counters["token_rejections"] += 1
                return self._err(400, 99991663, "Invalid access token for authorization.")
            for b in self._bursts:
                if b.remaining > 0 and (b.api is None or b.api == api):
                    b.remaining -= 1
                    self.counters["rate_limited"] += 1
                    return self._err(
                        b.status,
                        b.code,
                        "request trigger frequency limit",
                        {"x-ogw-ratelimit-limit": "100", "x-ogw-ratelimit-reset": str(b.reset)},
                    )
            if api in self.enforce_limits:
                limit, window = self.enforce_limits[api]
                seen = self._seen.setdefault(api, deque())
                now = time.monotonic()
                while seen and seen[0] <= now - window:
                    seen.popleft()
                if len(seen) >= limit:
                    self.counters["rate_limited"] += 1
                    self.counters[f"{api}_limited"] += 1
                    reset = str(max(1, int(seen[0] + window - now + 0.999)))
                    return self._err(429, 99991400, "request trigger frequency limit", {"x-ogw-ratelimit-reset": reset})
                seen.append(now)
        return None

    def _visible(self, token: str) -> SimItem | None:
        item = self.items.get(token)
        return item if item and not item.trashed and item.shared else None

    def _listing_entry(self, item: SimItem) -> dict[str, Any]:
        path = {"folder": "drive/folder", "docx": "docx", "sheet": "sheets", "file": "file"}.get(item.type, item.type)
        out = {
            "token": item.token,
            "name": item.name,
            "type": item.type,
            "parent_token": item.parent,
            "url": f"https://sim.feishu.cn/{path}/{item.token}",
            "created_time": str(item.created_time),
            "modified_time": str(item.modified_time),
            "owner_id": "ou_simowner",
        }
        if item.type == "shortcut" and item.target in self.items:
            out["shortcut_info"] = {"target_token": item.target, "target_type": self.items[item.target].type}
        return out

    def _render(self, item: SimItem, ext: str) -> bytes:
        if ext == "docx":
            import docx

            document = docx.Document()
            document.core_properties.title = item.name
            for line in str(item.content or "").splitlines():
                if line.startswith("# "):
                    document.add_heading(line[2:], level=1)
                elif line.strip():
                    document.add_paragraph(line)
            buf = io.BytesIO()
            document.save(buf)
            return buf.getvalue()
        if ext == "xlsx":
            import openpyxl

            wb = openpyxl.Workbook()
            ws = wb.active
            ws.title = "Sheet1"
            for row in item.content or []:
                ws.append(list(row))
            buf = io.BytesIO()
            wb.save(buf)
            return buf.getvalue()
        return str(item.content).encode("utf-8")

    @staticmethod
    def _disposition(name: str, style: str) -> str:
        if style == "raw":
            # Raw UTF-8 bytes in the header, as Feishu sends them; Starlette encodes header
            # values as Latin-1, so this str carries exactly those bytes on the wire.
            return f'attachment; filename="{name}"'.encode().decode("latin-1")
        fallback = name.encode("ascii", "replace").decode().replace("?", "_").replace('"', "")
        return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name)}"

    # ----------------------------------------------------------------- app

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="Feishu simulator")
        sim = self

        @app.post("/open-apis/auth/v3/tenant_access_token/internal")
        async def tenant_token(request: Request) -> Response:
            try:
                body = await request.json()
            except ValueError:
                body = None
            with sim._lock:
                sim.counters["token_requests"] += 1
                if not isinstance(body, dict) or not body.get("app_id") or not body.get("app_secret"):
                    return sim._err(400, 10003, "invalid param")
                if body["app_id"] != sim.app_id or body["app_secret"] != sim.app_secret:
                    return JSONResponse({"code": 10014, "msg": "app secret invalid"})
                now = sim.now()
                cur = sim._current
                if cur and sim._tokens.get(cur, 0) - now >= 1800:
                    return JSONResponse(
                        {"code": 0, "msg": "ok", "tenant_access_token": cur, "expire": int(sim._tokens[cur] - now)}
                    )
                token = f"t-{secrets.token_hex(20)}"
                sim._tokens[token] = now + sim.token_lifetime
                sim._current = token
                sim.counters["tokens_issued"] += 1
                return JSONResponse(
                    {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": sim.token_lifetime}
                )

        @app.get("/open-apis/drive/v1/files")
        async def list_files(request: Request) -> Response:
            if denied := sim._gate(request, "list"):
                return denied
            q = request.query_params
            folder = q.get("folder_token") or ""
            try:
                page_size = int(q.get("page_size") or 100)
            except ValueError:
                return sim._err(400, 1061002, "params error")
            if page_size > 200 or page_size < 1:
                return sim._err(400, 1064001, "page size out of limit")
            with sim._lock:
                if folder:
                    node = sim.items.get(folder)
                    if node is None or node.type != "folder" or node.trashed:
                        return sim._err(404, 1061003, "not found")
                    if not node.shared:
                        return sim._err(403, 1061004, "forbidden")
                    if node.list_error:
                        return sim._err(node.list_error[0], node.list_error[1], "internal error")
                children = [
                    i
                    for i in sim.items.values()
                    if i.parent == folder and not i.trashed and i.shared and not i.wiki_space
                ]
                children.sort(key=lambda i: (-i.modified_time, i.token))  # EditedTime DESC
                if not folder:  # root: everything, no pagination, no shortcuts
                    return sim._ok(
                        {"files": [sim._listing_entry(i) for i in children if i.type != "shortcut"], "has_more": False}
                    )
                start = int(base64.urlsafe_b64decode(q["page_token"]).decode()) if q.get("page_token") else 0
                page = children[start : start + page_size]
                data: dict[str, Any] = {
                    "files": [sim._listing_entry(i) for i in page],
                    "has_more": start + page_size < len(children),
                }
                if data["has_more"]:
                    data["next_page_token"] = base64.urlsafe_b64encode(str(start + page_size).encode()).decode()
                return sim._ok(data)

        @app.post("/open-apis/drive/v1/metas/batch_query")
        async def batch_query(request: Request) -> Response:
            if denied := sim._gate(request, "meta"):
                return denied
            body = await request.json()
            docs = body.get("request_docs") or []
            if not 1 <= len(docs) <= 200:
                return sim._err(400, 1061002, "params error")
            metas, failed = [], []
            with sim._lock:
                for d in docs:
                    item = sim.items.get(d.get("doc_token", ""))
                    if item is None or item.trashed or item.type != d.get("doc_type"):
                        failed.append({"token": d.get("doc_token"), "code": 970005})
                    elif not item.shared:
                        failed.append({"token": item.token, "code": 970003})
                    else:
                        metas.append(
                            {
                                "doc_token": item.token,
                                "doc_type": item.type,
                                "title": item.name,
                                "owner_id": "ou_simowner",
                                "create_time": str(item.created_time),
                                "latest_modify_user": "ou_simeditor",
                                "latest_modify_time": str(item.modified_time),
                                "url": f"https://sim.feishu.cn/{item.type}/{item.token}",
                            }
                        )
            return sim._ok({"metas": metas, "failed_list": failed})

        @app.post("/open-apis/drive/v1/export_tasks")
        async def create_export(request: Request) -> Response:
            if denied := sim._gate(request, "export_create"):
                return denied
            body = await request.json()
            token, kind, ext = body.get("token", ""), body.get("type", ""), body.get("file_extension", "")
            if kind not in ONLINE_TYPES or ext not in {"docx", "pdf", "xlsx", "csv"} or not token or len(token) > 27:
                return sim._err(400, 1069904, "invalid param")
            if ext not in _ALLOWED_EXT[kind]:
                return sim._err(400, 1069918, "file extension not match type")
            if ext == "csv" and not body.get("sub_id"):
                return sim._err(400, 1069904, "sub_id is required for csv")
            with sim._lock:
                item = sim.items.get(token)
                if item is None or item.type != kind:
                    return sim._err(404, 1069914, "invalid file token")
                if item.trashed:
                    return sim._err(404, 1069906, "docs deleted")
                if not item.shared:
                    return sim._err(403, 1069902, "no permission")
                ticket = str(6933093124755423251 + next(sim._seq))
                pending = (
                    item.export_pending_polls if item.export_pending_polls is not None else sim.export_pending_polls
                )
                render = item.export_render_seconds
                render = sim.export_render_seconds if render is None else render
                sim._tasks[ticket] = _Task(ticket, token, kind, ext, pending, item.export_status, sim.now() + render)
                sim.counters["export_creations"] += 1
                sim.export_creations_by_token[token] += 1
            return sim._ok({"ticket": ticket})

        @app.get("/open-apis/drive/v1/export_tasks/{ticket}")
        async def get_export(ticket: str, request: Request) -> Response:
            if denied := sim._gate(request, "export_poll"):
                return denied
            token = request.query_params.get("token")
            if not token:
                return sim._err(400, 1069904, "invalid param: token required")
            with sim._lock:
                task = sim._tasks.get(ticket)
                if task is None or task.token != token:
                    return sim._err(404, 1069914, "invalid file token")
                task.polls += 1
                sim.counters["export_polls"] += 1
                if sim.items[task.token].trashed and task.finished_at is None:
                    return sim._err(410, 1069906, "docs deleted")
                result: dict[str, Any] = {
                    "file_extension": task.ext,
                    "type": task.type,
                    "file_name": "",
                    "file_token": "",
                    "file_size": 0,
                }
                if task.polls <= task.pending_polls or sim.now() < task.ready_at:
                    result.update(job_status=1 if task.polls == 1 else 2, job_error_msg="")
                    return sim._ok({"result": result})
                item = sim.items[task.token]
                if task.finished_at is None:
                    task.finished_at = sim.now()
                    if task.status == 0:
                        task.data = sim._render(item, task.ext)
                        task.file_name = item.name
                        task.file_token = sim._new_token("file")
                        sim._files[task.file_token] = task
                result.update(job_status=task.status, job_error_msg=_JOB_MSG.get(task.status, "error"))
                if task.status == 0:
                    result.update(file_name=task.file_name, file_token=task.file_token, file_size=len(task.data))
            return sim._ok({"result": result})

        @app.get("/open-apis/drive/v1/export_tasks/file/{file_token}/download")
        async def download_export(file_token: str, request: Request) -> Response:
            if denied := sim._gate(request, "export_download"):
                return denied
            with sim._lock:
                task = sim._files.get(file_token)
                if task is None or sim.now() > (task.finished_at or 0) + sim.export_file_ttl:
                    return sim._err(400, 1060001, "param is invalid")
                sim.counters["export_downloads"] += 1
                name = f"{task.file_name}.{task.ext}"
                headers = {"content-disposition": sim._disposition(name, "rfc5987")}
                return Response(task.data, media_type=_MIME[task.ext], headers=headers)

        @app.get("/open-apis/drive/v1/files/{file_token}/download")
        async def download_file(file_token: str, request: Request) -> Response:
            if denied := sim._gate(request, "file_download"):
                return denied
            with sim._lock:
                item = sim.items.get(file_token)
                if item is None or item.type != "file":
                    return sim._err(404, 1061003, "not found")
                if item.trashed:
                    return sim._err(404, 1061007, "file has been deleted")
                if not item.shared:
                    return sim._err(403, 1061004, "forbidden")
                sim.counters["file_downloads"] += 1
                data = item.content if isinstance(item.content, bytes) else str(item.content).encode()
                headers = {"content-disposition": sim._disposition(item.name, item.disposition)}
                return Response(data, media_type=item.media_type or "application/octet-stream", headers=headers)

        @app.get("/open-apis/wiki/v2/spaces/{space_id}/nodes")
        async def wiki_nodes(space_id: str, request: Request) -> Response:
            if denied := sim._gate(request, "wiki_nodes"):
                return denied
            q = request.query_params
            parent = q.get("parent_node_token") or None
            page_size = min(int(q.get("page_size") or 50), 50)
            with sim._lock:
                nodes = [
                    i
                    for i in sim.items.values()
                    if i.wiki_space == space_id and i.wiki_parent == parent and not i.trashed and i.shared
                ]
                nodes.sort(key=lambda i: i.token)
                start = int(q["page_token"]) if q.get("page_token") else 0
                page = nodes[start : start + page_size]
                items = [
                    {
                        "space_id": space_id,
                        "node_token": f"wik{i.token[3:]}",
                        "obj_token": i.token,
                        "obj_type": i.type,
                        "parent_node_token": parent or "",
                        "has_child": any(c.wiki_parent == f"wik{i.token[3:]}" for c in sim.items.values()),
                        "title": i.name,
                        "obj_create_time": str(i.created_time),
                        "obj_edit_time": str(i.modified_time),
                        "node_create_time": str(i.created_time),
                    }
                    for i in page
                ]
                has_more = start + page_size < len(nodes)
                data: dict[str, Any] = {"items": items, "has_more": has_more}
                if has_more:
                    data["page_token"] = str(start + page_size)
            return sim._ok(data)

        # -------- control plane for other processes and the demo
        @app.get("/_sim/counters")
        async def counters() -> dict[str, Any]:
            with sim._lock:
                return {
                    "counters": dict(sim.counters),
                    "export_creations_by_token": dict(sim.export_creations_by_token),
                }

        @app.post("/_sim/expire_tokens")
        async def expire() -> dict[str, bool]:
            sim.expire_tokens()
            return {"ok": True}

        @app.post("/_sim/burst")
        async def burst(request: Request) -> dict[str, bool]:
            b = await request.json()
            sim.burst(int(b["count"]), api=b.get("api"), reset=int(b.get("reset", 1)))
            return {"ok": True}

        return app


DEMO_ROOT = "fldcnTributaryDemoRoot00001"


def demo_drive(sim: FeishuSimulator, root_token: str | None = None) -> dict[str, str]:
    """Seed a small drive: nested folders, every type, Chinese names. Returns name -> token.

    ``root_token`` fixes the root folder's token (the demo's sources.yaml names it).
    """
    t: dict[str, str] = {}
    t["root"] = sim.add_folder("知识库", token=root_token)
    t["sub"] = sim.add_folder("产品文档", t["root"])
    t["deep"] = sim.add_folder("季度计划", t["sub"])
    t["docx"] = sim.add("docx", "产品介绍", t["root"], "# 产品介绍\n飞书文档同步到检索索引。\n支持增量更新与删除检测。")
    t["doc"] = sim.add("doc", "旧版说明", t["sub"], "# 旧版说明\n这是一篇旧版文档，内容讲述部署步骤。")
    t["sheet"] = sim.add("sheet", "销售数据", t["sub"], [["地区", "销售额"], ["华东", 120], ["华北", 98]])
    t["bitable"] = sim.add("bitable", "客户台账", t["deep"], [["客户", "等级"], ["甲公司", "A"], ["乙公司", "B"]])
    t["file"] = sim.add(
        "file",
        "会议纪要.txt",
        t["deep"],
        "会议纪要：确认发布日期为下周一。".encode(),
        media_type="text/plain",
        disposition="raw",
    )
    t["md"] = sim.add(
        "file", "设计 说明.md", t["root"], "# 设计说明\n使用 Redis 共享令牌。".encode(), media_type="text/markdown"
    )
    t["mindnote"] = sim.add("mindnote", "脑图", t["root"])
    t["shortcut"] = sim.add_shortcut("销售数据 快捷方式", t["root"], t["sheet"])
    return t


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="Serve the Feishu simulator with a demo drive.")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--app-id", default="cli_sim_app")
    parser.add_argument("--app-secret", default="sim-secret-value")
    parser.add_argument("--pending-polls", type=int, default=2)
    parser.add_argument("--root-token", default=DEMO_ROOT, help="token of the demo drive's root folder")
    args = parser.parse_args(argv)
    sim = FeishuSimulator(app_id=args.app_id, app_secret=args.app_secret, export_pending_polls=args.pending_polls)
    tokens = demo_drive(sim, root_token=args.root_token)
    print(f"Feishu simulator on http://127.0.0.1:{args.port}; root folder token {tokens['root']}", flush=True)
    uvicorn.run(sim.app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
