"""HTTP routes of the Feishu simulator (see tests/simulators/feishu.py for the model)."""

from __future__ import annotations

import base64
import secrets
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from tests.simulators._feishu_events import subscription_routes
from tests.simulators._feishu_hostile import HostileBodies
from tests.simulators._feishu_perms import permission_routes
from tests.simulators.feishu import _ALLOWED_EXT, _JOB_MSG, _MIME, META_DOC_TYPES, ONLINE_TYPES, _Task
from tests.support.leakscan import register_secret

if TYPE_CHECKING:
    from tests.simulators.feishu import FeishuSimulator


def build_app(sim: FeishuSimulator) -> FastAPI:
    app = FastAPI(title="Feishu simulator")
    exports = (_export_routes, _export_poll_routes, _download_routes)
    for register in (
        _auth_routes,
        _drive_routes,
        _meta_routes,
        *exports,
        _wiki_routes,
        _docs_routes,
        permission_routes,
        subscription_routes,
        _control_routes,
    ):
        register(app, sim)
    app.add_middleware(HostileBodies, switches=sim.hostile)
    return app


def _field_error(code: int, name: str, value: str) -> JSONResponse:
    """A 400 parameter refusal naming the field (the generic envelope's ``error.field_violations``)."""
    violation = {"field": name, "value": value, "description": f"{name} is not a supported value"}
    error = {"log_id": secrets.token_hex(8), "field_violations": [violation]}
    return JSONResponse({"code": code, "msg": "invalid param", "error": error}, status_code=400)


def _auth_routes(app: FastAPI, sim: FeishuSimulator) -> None:
    """Routes: auth: tenant token, OAuth v2 refresh."""

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
            if sim.token_error is not None:
                status, code, msg = sim.token_error
                return JSONResponse({"code": code, "msg": msg}, status_code=status)
            # larksuite/cli's tests: 10003 for an app id the platform does not know, 10014 for
            # a wrong secret (HTTP 200); the generic table also names 10015 a wrong secret.
            if body["app_id"] != sim.app_id:
                return sim._err(400, 10003, "invalid param")
            if body["app_secret"] != sim.app_secret:
                return JSONResponse({"code": 10014, "msg": "app secret invalid"})
            now = sim.now()
            cur = sim._current
            if cur and sim._tokens.get(cur, 0) - now >= 1800:
                return JSONResponse(
                    {"code": 0, "msg": "ok", "tenant_access_token": cur, "expire": int(sim._tokens[cur] - now)}
                )
            token = f"t-{secrets.token_hex(20)}"
            register_secret("feishu tenant_access_token", token)  # the session-end log scan looks for it
            sim._tokens[token] = now + sim.token_lifetime
            sim._current = token
            sim.counters["tokens_issued"] += 1
            return JSONResponse({"code": 0, "msg": "ok", "tenant_access_token": token, "expire": sim.token_lifetime})

    @app.post("/open-apis/authen/v2/oauth/token")
    async def oauth_token(request: Request) -> Response:
        # authen-v2 oauth/token, grant_type refresh_token: top-level fields; the refresh token
        # rotates (the one sent is spent, a new one comes back with refresh_token_expires_in).
        # A spent one answers 20064 (the reference's reuse codes: 20064 / 20073); 20037 is a
        # grant past its 365 days (``expire_user_grant``).
        body = await request.json()
        with sim._lock:
            sim.counters["user_token_refreshes"] += 1
            if body.get("client_id") != sim.app_id or body.get("client_secret") != sim.app_secret:
                return JSONResponse({"code": 20002, "error": "invalid_client"}, status_code=400)
            sent = str(body.get("refresh_token"))
            if sim.refresh_errors:  # 20050 / 20072: the server failed, the token is not spent
                return JSONResponse({"code": sim.refresh_errors.pop(0), "error": "server_error"}, status_code=500)
            if sent in sim.expired_grants:
                return JSONResponse({"code": 20037, "error": "invalid_grant"}, status_code=400)
            user = sim.user_refresh_tokens.pop(sent, None)
            if body.get("grant_type") != "refresh_token" or user is None:
                sim.counters["user_refresh_reuse_rejections"] += sent in sim.spent_refresh_tokens
                return JSONResponse(
                    {"code": 20064, "error": "invalid_grant", "error_description": "refresh token revoked or used"},
                    status_code=400,
                )
            sim.spent_refresh_tokens.add(sent)
            token, fresh = f"u-{secrets.token_hex(20)}", f"ur-{secrets.token_hex(20)}"
            register_secret("feishu user_access_token", token)
            register_secret("feishu refresh_token", fresh)
            sim._tokens[token] = sim.now() + sim.token_lifetime
            sim.user_refresh_tokens[fresh] = user
            return JSONResponse(
                {
                    "code": 0,
                    "access_token": token,
                    "expires_in": sim.token_lifetime,
                    "refresh_token": fresh,
                    "refresh_token_expires_in": 30 * 86400,
                    "token_type": "Bearer",
                    "scope": "drive:drive:readonly offline_access",
                }
            )


def _drive_routes(app: FastAPI, sim: FeishuSimulator) -> None:
    """Routes: drive folder listing."""

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
        order_by, direction = q.get("order_by") or "EditedTime", q.get("direction") or "DESC"
        if order_by not in ("EditedTime", "CreatedTime") or direction not in ("ASC", "DESC"):
            return sim._err(400, 1061002, "params error")
        with sim._lock:
            if folder == sim.root_token:
                folder = ""  # the root listed by its token: paginated, shortcuts included
            elif folder:
                node = sim.items.get(folder)
                if node is None or node.type != "folder" or node.trashed:
                    return sim._err(404, 1061003, "not found")
                if not node.shared:
                    return sim._err(403, 1061004, "forbidden")
                if node.list_error:
                    return sim._err(node.list_error[0], node.list_error[1], "internal error")
            children = [
                i for i in sim.items.values() if i.parent == folder and not i.trashed and i.shared and not i.wiki_space
            ]
            # drive-v1 folder/list: order_by EditedTime (default) | CreatedTime, direction DESC
            # (default) | ASC. The cursor is modelled as an offset into the current order (the
            # real one is opaque); an offset is what makes an edit mid-walk skip an item.
            field_of = (lambda i: i.modified_time) if order_by == "EditedTime" else (lambda i: i.created_time)
            sign = -1 if direction == "DESC" else 1
            children.sort(key=lambda i: (sign * field_of(i), i.token))
            if not q.get("folder_token"):  # root: everything, no pagination, no shortcuts
                return sim._ok(
                    {"files": [sim._listing_entry(i) for i in children if i.type != "shortcut"], "has_more": False}
                )
            if sim.list_cursor_loop > 0:  # hostile server: the same cursor, forever (bounded here)
                sim.list_cursor_loop -= 1
                return sim._ok({"files": [], "has_more": True, "next_page_token": "bG9vcA=="})
            start = int(base64.urlsafe_b64decode(q["page_token"]).decode()) if q.get("page_token") else 0
            size = min(page_size, sim.list_page_cap or page_size)
            page = children[start : start + size]
            data: dict[str, Any] = {
                "files": [sim._listing_entry(i) for i in page],
                "has_more": start + size < len(children),
            }
            if data["has_more"]:
                data["next_page_token"] = base64.urlsafe_b64encode(str(start + size).encode()).decode()
            for hook in list(sim.listing_hooks):
                hook(q.get("folder_token"), start // size)
            return sim._ok(data)


def _meta_routes(app: FastAPI, sim: FeishuSimulator) -> None:
    """Routes: the batch meta query."""

    @app.post("/open-apis/drive/v1/metas/batch_query")
    async def batch_query(request: Request) -> Response:
        if denied := sim._gate(request, "meta"):
            return denied
        body = await request.json()
        docs = body.get("request_docs") or []
        if not 1 <= len(docs) <= 200:
            return sim._err(400, 1061002, "params error")
        # doc_type is an enum (meta batch_query): a value outside it refuses the whole request
        refused = sorted({d.get("doc_type") for d in docs} - (META_DOC_TYPES - sim.meta_refused_types))
        if refused:
            sim.counters["meta_refused"] += 1
            return _field_error(1061002, "request_docs.doc_type", str(refused[0]))
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
                            # drive-v1 meta batch_query: url only when with_url is true (20.10)
                            **({"url": sim.url_of(item)} if body.get("with_url") else {}),
                        }
                    )
        return sim._ok({"metas": metas, "failed_list": failed})


def _export_routes(app: FastAPI, sim: FeishuSimulator) -> None:
    """Routes: export task creation."""

    @app.post("/open-apis/drive/v1/export_tasks")
    async def create_export(request: Request) -> Response:
        if denied := sim._gate(request, "export_create"):
            return denied
        body = await request.json()
        token, kind, ext = body.get("token", ""), body.get("type", ""), body.get("file_extension", "")
        # export_task create: type doc/docx/sheet/bitable, file_extension docx/pdf/xlsx/csv;
        # slides/pptx only in the opt-in ``slides_export`` mode (an API that would take them)
        known_ext = {"docx", "pdf", "xlsx", "csv"} | ({"pptx"} if sim.slides_export else set())
        if kind == "slides" and not sim.slides_export:
            sim.counters["slides_export_refusals"] += 1
            return _field_error(1069904, "type", kind)
        if kind not in ONLINE_TYPES or ext not in known_ext or not token or len(token) > 27:
            return sim._err(400, 1069904, "invalid param")
        if ext not in _ALLOWED_EXT[kind]:
            return sim._err(400, 1069918, "file extension not match type")
        with sim._lock:
            item = sim.items.get(token)
            if item is None or item.type != kind:
                return sim._err(404, 1069914, "invalid file token")
            # export_task create: CSV exports one sheet/table named by sub_id, else 400 1069904.
            if ext == "csv" and body.get("sub_id") not in sim.sheet_ids(item):
                return sim._err(400, 1069904, "invalid param: sub_id")
            if item.trashed:
                return sim._err(404, 1069906, "docs deleted")
            if not item.shared:
                return sim._err(403, 1069902, "no permission")
            ticket = str(6933093124755423251 + next(sim._seq))
            pending = item.export_pending_polls if item.export_pending_polls is not None else sim.export_pending_polls
            render = item.export_render_seconds
            render = sim.export_render_seconds if render is None else render
            task = _Task(ticket, token, kind, ext, pending, item.export_status, sim.now() + render)
            task.sub_id = body.get("sub_id")
            task.tokenless_polls = item.export_tokenless_polls
            sim._tasks[ticket] = task
            sim.counters["export_creations"] += 1
            sim.export_creations_by_token[token] += 1
        return sim._ok({"ticket": ticket})


def _export_poll_routes(app: FastAPI, sim: FeishuSimulator) -> None:
    """Routes: export task poll (the task ends, and its file's clock starts, when rendering ends)."""

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
                # The task ends when rendering ends, not when someone polls (the 10-minute
                # expiry counts from there: export-user-guide); poll-count pending ends now.
                task.finished_at = task.ready_at if task.pending_polls == 0 else sim.now()
                if task.status == 0:
                    task.data = sim._render(item, task.ext, task.sub_id)
                    task.file_name = item.name
                    task.file_token = sim._new_token("file")
                    sim._files[task.file_token] = task
            result.update(job_status=task.status, job_error_msg=_JOB_MSG.get(task.status, "error"))
            if task.status == 0 and task.tokenless_polls > 0:
                task.tokenless_polls -= 1  # job_status 0 while its file_token is not set yet
                return sim._ok({"result": result})
            if task.status == 0:
                result.update(file_name=task.file_name, file_token=task.file_token, file_size=len(task.data))
        return sim._ok({"result": result})


def _download_routes(app: FastAPI, sim: FeishuSimulator) -> None:
    """Routes: export file and uploaded file downloads."""

    @app.get("/open-apis/drive/v1/export_tasks/file/{file_token}/download")
    async def download_export(file_token: str, request: Request) -> Response:
        if denied := sim._gate(request, "export_download"):
            return denied
        with sim._lock:
            task = sim._files.get(file_token)
            if task is None or sim.now() > (task.finished_at or 0) + sim.export_file_ttl:
                sim.counters["export_downloads_expired"] += 1
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


def _wiki_routes(app: FastAPI, sim: FeishuSimulator) -> None:
    """Routes: wiki: nodes, spaces."""

    @app.get("/open-apis/wiki/v2/spaces/{space_id}/nodes")
    async def wiki_nodes(space_id: str, request: Request) -> Response:
        if denied := sim._gate(request, "wiki_nodes"):
            return denied
        q = request.query_params
        parent = q.get("parent_node_token") or None
        page_size = min(int(q.get("page_size") or 50), 50)
        with sim._lock:
            queued = sim.wiki_errors.get(space_id)
            if queued:  # wiki-v2 error codes: 131001 retry, 131006 no permission, 131007 final
                status, code = queued.pop(0)
                return sim._err(status, code, "wiki error")
            nodes = [
                i
                for i in sim.items.values()
                if i.wiki_space == space_id and i.wiki_parent == parent and not i.trashed and i.shared
            ]
            nodes.sort(key=lambda i: i.token)
            cursor = q.get("page_token") or "0"
            if sim.wiki_empty_pages and not cursor.startswith("e"):
                # An empty page that still says has_more (seen on the real API: issue 20.14).
                return sim._ok({"items": [], "has_more": True, "page_token": f"e{cursor}"})
            start = int(cursor.lstrip("e"))
            page = nodes[start : start + page_size]
            items = [_wiki_node(sim, space_id, parent, i) for i in page]
            has_more = start + page_size < len(nodes)
            data: dict[str, Any] = {"items": items, "has_more": has_more}
            if has_more:
                data["page_token"] = str(start + page_size)
        return sim._ok(data)

    @app.get("/open-apis/wiki/v2/spaces")
    async def wiki_spaces(request: Request) -> Response:
        if denied := sim._gate(request, "wiki_spaces"):
            return denied
        q = request.query_params
        with sim._lock:
            spaces = sorted({i.wiki_space for i in sim.items.values() if i.wiki_space})
        start, size = int(q.get("page_token") or 0), min(int(q.get("page_size") or 20), 50)
        page = [
            {"space_id": sid, "name": f"空间 {sid}", "visibility": "private"} for sid in spaces[start : start + size]
        ]
        data: dict[str, Any] = {"items": page, "has_more": start + size < len(spaces)}
        if data["has_more"]:
            data["page_token"] = str(start + size)
        return sim._ok(data)


def _docs_routes(app: FastAPI, sim: FeishuSimulator) -> None:
    """Routes: root folder meta, sheets/tables queries, docx."""

    @app.get("/open-apis/drive/explorer/v2/root_folder/meta")
    async def root_meta(request: Request) -> Response:
        if denied := sim._gate(request, "root_meta"):
            return denied
        return sim._ok({"token": sim.root_token, "id": "7110000000000000001", "user_id": "7103000000000000001"})

    @app.get("/open-apis/sheets/v3/spreadsheets/{token}/sheets/query")
    async def sheets_query(token: str, request: Request) -> Response:
        if denied := sim._gate(request, "sheets_query"):
            return denied
        with sim._lock:
            item = sim.items.get(token)
            # sheets-v3 sheets/query errors come with HTTP 400 (its error-code table)
            if item is None or item.type != "sheet":
                return sim._err(400, 1310214, "SpreadSheet Not Found")
            if item.trashed:
                return sim._err(400, 1310249, "Spreadsheet Deleted")
            if not item.shared:
                return sim._err(400, 1310213, "Permission Fail")
            pairs = zip(sim.sheets_of(item), sim.sheet_ids(item), strict=True)
            sheets = [{"sheet_id": sid, "title": t, "index": n} for n, ((t, _r), sid) in enumerate(pairs)]
        return sim._ok({"sheets": sheets})

    @app.get("/open-apis/bitable/v1/apps/{token}/tables")
    async def bitable_tables(token: str, request: Request) -> Response:
        if denied := sim._gate(request, "bitable_tables"):
            return denied
        with sim._lock:
            item = sim.items.get(token)
            # bitable-v1 app-table/list errors come with HTTP 200 (1254302 with 403)
            if item is None or item.type != "bitable" or item.trashed:
                return sim._err(200, 1254040, "BaseTokenNotFound")
            if not item.shared:
                return sim._err(403, 1254302, "The role has no permissions.")
            pairs = zip(sim.sheets_of(item), sim.sheet_ids(item), strict=True)
            tables = [{"table_id": sid, "name": t, "revision": 1} for (t, _r), sid in pairs]
        return sim._ok({"items": tables, "has_more": False, "total": len(tables)})

    @app.get("/open-apis/docx/v1/documents/{token}")
    async def docx_get(token: str, request: Request) -> Response:
        if denied := sim._gate(request, "docx_get"):
            return denied
        with sim._lock:
            item = sim._visible(token)
            if item is None or item.type != "docx":
                return sim._err(404, 1770002, "not found")
            doc = {"document_id": item.token, "revision_id": item.revision, "title": item.name}
        return sim._ok({"document": doc})

    @app.get("/open-apis/docx/v1/documents/{token}/raw_content")
    async def docx_raw(token: str, request: Request) -> Response:
        if denied := sim._gate(request, "docx_get"):
            return denied
        with sim._lock:
            item = sim._visible(token)
            if item is None or item.type != "docx":
                return sim._err(404, 1770002, "not found")
            if item.raw_content_too_large:  # docx raw_content: 400 1770033 content size exceed limit
                return sim._err(400, 1770033, "content size exceed limit")
            sim.counters["raw_content_reads"] += 1
            text = "\n".join(line.removeprefix("# ") for line in str(item.content or "").splitlines()) + "\n"
        return sim._ok({"content": text})


def _control_routes(app: FastAPI, sim: FeishuSimulator) -> None:
    """Routes: control plane for other processes and the demo."""

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


def _wiki_node(sim: FeishuSimulator, space_id: str, parent: str | None, i: Any) -> dict[str, Any]:
    """A wiki-v2 node. Shortcut nodes carry node_type "shortcut" and the origin's tokens."""
    node_token = i.token if i.wiki_node_type == "shortcut" else sim.wiki_node_token(i.token)
    obj = sim.items.get(sim._origin_obj(i)) if i.wiki_node_type == "shortcut" else i
    return {
        "space_id": space_id,
        "node_token": node_token,
        "obj_token": obj.token if obj else "",
        "obj_type": i.type,
        "parent_node_token": parent or "",
        "node_type": i.wiki_node_type,
        "origin_node_token": i.wiki_origin if i.wiki_node_type == "shortcut" else node_token,
        "origin_space_id": space_id,
        "has_child": any(c.wiki_parent == node_token for c in sim.items.values()),
        "title": i.name,
        "obj_create_time": str(i.created_time),
        "obj_edit_time": str(obj.modified_time if obj else i.modified_time),
        "node_create_time": str(i.created_time),
    }
