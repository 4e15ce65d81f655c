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
- permissions and the directory (collaborators, public settings, wiki space members, chats,
  departments): ``_feishu_perms``.
- drive event subscriptions and callbacks (``subscribe`` / ``get_subscribe`` /
  ``delete_subscribe``; edits, renames, trashes, deletions and permission changes pushed to a
  configured URL): ``_feishu_events`` (:attr:`FeishuSimulator.events`).
- 429 bursts with ``x-ogw-ratelimit-reset`` (:meth:`burst`), optional enforcement of per-API
  limits (``enforce_limits``), and counters the tests read (:attr:`counters`); hostile bodies
  (padded JSON, gzip-of-gzip downloads: :attr:`hostile`, see ``_feishu_hostile``).

Control from the same process through the methods, or over HTTP under ``/_sim/`` (used by
multi-process tests and the demo). ``python -m tests.simulators.feishu --port N``: a demo drive.
"""

from __future__ import annotations

import argparse
import itertools
import secrets
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.simulators._feishu_events import FeishuEvents
from tests.simulators._feishu_hostile import HostileAnswers
from tests.simulators._feishu_perms import SimPermissions
from tests.support.leakscan import register_secret

__all__ = ["DEMO_ROOT", "FeishuSimulator", "SimItem", "demo_drive"]

ONLINE_TYPES = ("doc", "docx", "sheet", "bitable", "slides")
_ALLOWED_EXT = {
    "doc": {"docx", "pdf"},
    "docx": {"docx", "pdf"},
    "sheet": {"xlsx", "csv"},
    "bitable": {"xlsx", "csv"},
    "slides": {"pptx"},  # only with ``slides_export`` (issue 20.11; not in the documented API)
}
# drive-v1 meta batch_query: the documented doc_type enum (no slides)
META_DOC_TYPES = frozenset({"doc", "sheet", "bitable", "mindnote", "file", "wiki", "docx", "folder", "synced_block"})
# Listing URL path per type, as the real drive/v1/files answers them (issue 20.10: bitable is
# /base/, legacy doc /docs/).
_URL_PATH = {
    "folder": "drive/folder",
    "doc": "docs",
    "docx": "docx",
    "sheet": "sheets",
    "bitable": "base",
    "mindnote": "mindnotes",
    "slides": "slides",
    "file": "file",
}
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
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
}
_PREFIX = {
    "folder": "fld",
    "doc": "doc",
    "docx": "dox",
    "sheet": "sht",
    "bitable": "bas",
    "file": "box",
    "slides": "sld",
}


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
    revision: int = 1  # docx revision_id: +1 per edit
    wiki_node_type: str = "origin"  # or "shortcut" (then wiki_origin names the origin node)
    wiki_origin: str | None = None
    export_tokenless_polls: int = 0  # polls answering job_status 0 before the file_token is set
    raw_content_too_large: bool = False  # docx raw_content answers 400 1770033


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
    sub_id: str | None = None
    tokenless_polls: int = 0


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
    # --- behaviours of the real service that are configurable where it is uncertain
    tenant_url: str = "https://sim-tenant.feishu.cn"  # the host of every document URL
    list_page_cap: int | None = None  # serve at most this many rows per page (a real server may)
    # APIs that refuse tenant tokens with a permanent 99991663 (issue 20.9: e.g. user-only APIs)
    tenant_token_refused: set[str] = field(default_factory=set)
    user_token_refused: set[str] = field(default_factory=set)  # APIs answering 99991668 to u- tokens
    # (HTTP status, code, msg) answered by the tenant token call (10014/10015: issue 20.9)
    token_error: tuple[int, int, str] | None = None
    # wiki space id -> queued (HTTP status, code) answers for its node listing (issue 20.14)
    wiki_errors: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    wiki_empty_pages: bool = False  # an empty page with has_more: true before every real page
    list_cursor_loop: int = 0  # hostile: this many pages answer has_more with the same cursor
    # true: an export API that takes slides -> pptx; the documented one refuses type slides
    # (400 1069904 with a field violation), which is the default
    slides_export: bool = False
    user_refresh_tokens: dict[str, str] = field(default_factory=dict)  # refresh token -> user
    spent_refresh_tokens: set[str] = field(default_factory=set)  # used once: reuse answers 20064
    expired_grants: set[str] = field(default_factory=set)  # refresh tokens answering 20037
    refresh_errors: list[int] = field(default_factory=list)  # queued refresh answers (20050, 20072)
    meta_refused_types: set[str] = field(default_factory=set)  # doc_type values batch_query refuses
    # api -> queued (HTTP status, code) answers after the auth check (e.g. bitable's HTTP 200 + code)
    api_errors: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    hostile: HostileAnswers = field(default_factory=HostileAnswers)  # oversized / bomb bodies
    perms: SimPermissions = field(default_factory=SimPermissions)  # collaborators, link shares, directory

    def __post_init__(self) -> None:
        register_secret("feishu app_secret", self.app_secret)  # the session-end log scan looks for it
        self._lock = threading.RLock()
        self._tokens: dict[str, float] = {}
        self._current: str | None = None
        self._tasks: dict[str, _Task] = {}
        self._files: dict[str, _Task] = {}
        self._bursts: list[_Burst] = []
        self._seen: dict[str, deque[float]] = {}
        self._seq = itertools.count(1)
        self.export_creations_by_token: Counter = Counter()
        self.root_token = f"nodcnSimRoot{secrets.token_hex(6)}"  # what root_folder/meta answers
        self.listing_hooks: list[Any] = []  # fn(folder, page_number) after a page is served
        self.events = FeishuEvents(self)  # subscriptions and callback delivery
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
        self.events.created_in_folder(token, kind, parent)
        return token

    def add_folder(self, name: str, parent: str = "", **kw: Any) -> str:
        return self.add("folder", name, parent, **kw)

    def add_shortcut(self, name: str, parent: str, target: str) -> str:
        return self.add("shortcut", name, parent, target=target)

    def wiki_node_token(self, obj_token: str) -> str:
        return f"wik{obj_token[3:]}"

    def add_wiki_shortcut(self, space: str, origin_obj: str, parent_node: str | None = None) -> str:
        """A wiki ``shortcut`` node: same obj_token as its origin node, its own node token."""
        with self._lock:
            origin = self.items[origin_obj]
            token = f"wsc{secrets.token_hex(8)}{next(self._seq):04d}"[:27]
            self.items[token] = SimItem(
                token, origin.name, origin.type, "", None, origin.modified_time, origin.created_time,
                wiki_space=space, wiki_parent=parent_node, wiki_node_type="shortcut",
                wiki_origin=self.wiki_node_token(origin_obj),
            )  # fmt: skip
            return token

    def edit(self, token: str, content: Any, *, modified_time: int | None = None) -> None:
        with self._lock:
            item = self.items[token]
            item.content = content
            item.modified_time = modified_time or max(int(self.now()), item.modified_time + 1)
            item.revision += 1
        self.events.file_event("edit_v1", token)

    def rename(self, token: str, name: str) -> None:
        with self._lock:
            item = self.items[token]
            item.name, item.modified_time = name, max(int(self.now()), item.modified_time + 1)
        self.events.file_event("title_updated_v1", token)

    def trash(self, token: str) -> None:
        with self._lock:
            self.items[token].trashed = True
        self.events.file_event("trashed_v1", token)

    def delete(self, token: str) -> None:
        """Deleted for good (past the trash): gone from every API, its subscription with it."""
        self.events.file_event("deleted_v1", token)
        with self._lock:
            self.items.pop(token, None)
            self.events.subscribed.pop(token, None)

    def share(self, token: str, member: tuple[str, str], *, added: bool = True) -> None:
        """Add (or remove) a collaborator ``(member_type, member_id)`` of a document."""
        with self._lock:
            members = self.perms.members.setdefault(token, [])
            if added and member not in members:
                members.append(member)
            elif not added and member in members:
                members.remove(member)
        kind = "permission_member_added_v1" if added else "permission_member_removed_v1"
        self.events.file_event(kind, token, user_list=[{"open_id": member[1]}] if member[0] == "openid" else [])

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

    def grant_user(self, user: str = "ou_simuser") -> str:
        """A user authorized the app: returns the refresh token the OAuth flow would yield."""
        with self._lock:
            token = f"ur-{secrets.token_hex(20)}"
            register_secret("feishu refresh_token", token)
            self.user_refresh_tokens[token] = user
            return token

    def expire_user_tokens(self) -> None:
        """Every issued user token expires (business calls then answer 99991677)."""
        with self._lock:
            for token in [t for t in self._tokens if t.startswith("u-")]:
                self._tokens[token] = 0.0

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
                if token.startswith("u-"):  # user token expired (generic error-code table)
                    return self._err(400, 99991677, "user access token expired")
                return self._err(400, 99991663, "Invalid access token for authorization.")
            if token.startswith("u-") and api in self.user_token_refused:
                self.counters["token_rejections"] += 1  # 99991668: API does not take user tokens
                return self._err(400, 99991668, "user access token not support")
            if token.startswith("t-") and api in self.tenant_token_refused:
                # An API that does not take tenant tokens answers 99991663 for every fresh one
                # (faq how-to-fix-99991663-error: "or the API does not support tenant tokens").
                self.counters["token_rejections"] += 1
                return self._err(400, 99991663, "Invalid access token for authorization.")
            if queued := self.api_errors.get(api):
                status, code = queued.pop(0)
                return self._err(status, code, "queued error")
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

    def _origin_obj(self, shortcut: SimItem) -> str:
        """The obj_token behind a wiki shortcut node (its origin node's document)."""
        origin = shortcut.wiki_origin or ""
        return next((t for t in self.items if self.wiki_node_token(t) == origin), "")

    def url_of(self, item: SimItem) -> str:
        return f"{self.tenant_url}/{_URL_PATH.get(item.type, item.type)}/{item.token}"

    def _listing_entry(self, item: SimItem) -> dict[str, Any]:
        target = self.items.get(item.target or "") if item.type == "shortcut" else None
        out = {
            "token": item.token,
            "name": item.name,
            "type": item.type,
            "parent_token": item.parent,
            # a shortcut row carries its target's URL (issue 20.10)
            "url": self.url_of(target or item),
            "created_time": str(item.created_time),
            "modified_time": str(item.modified_time),
            "owner_id": "ou_simowner",
        }
        if item.type == "shortcut" and item.target in self.items:
            out["shortcut_info"] = {"target_token": item.target, "target_type": self.items[item.target].type}
        return out

    def _render(self, item: SimItem, ext: str, sub_id: str | None = None) -> bytes:
        from tests.simulators._feishu_render import render

        return render(self, item, ext, sub_id)

    @staticmethod
    def sheets_of(item: SimItem) -> list[tuple[str, list]]:
        """Sheet content: a list of rows (one sheet) or {title: rows} (several)."""
        if isinstance(item.content, dict):
            return [(str(k), list(v)) for k, v in item.content.items()]
        return [("Sheet1", list(item.content or []))]

    def sheet_ids(self, item: SimItem) -> list[str]:
        """Stable sub ids: sheet ids (6 chars) for sheets, ``tbl…`` table ids for bitables."""
        prefix = "tbl" if item.type == "bitable" else ""
        return [f"{prefix}{item.token[-4:]}{i:02d}" for i in range(len(self.sheets_of(item)))]

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
        from tests.simulators._feishu_app import build_app

        return build_app(self)


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
