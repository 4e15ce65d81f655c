"""The Feishu simulator's permission and directory endpoints (issue 35), with the shapes of the
official SDK models (larksuite/oapi-sdk-python ``drive/v1 Member``, ``drive/v2 PermissionPublic``,
``wiki/v2 Member``, ``contact/v3``, ``im/v1``):

- ``GET /open-apis/drive/v1/permissions/:token/members?type=…`` — ``items[]`` of
  ``{member_type, member_id, perm, perm_type, type, name}``, all in one answer (the SDK's
  response has no paging), the document's own and those inherited from its folders; 403 ``1063002`` when the app may not read them, 404 ``1063005``
  for a deleted document, 400 ``1063001`` for a ``type`` outside the documented enum.
- ``GET /open-apis/drive/v2/permissions/:token/public?type=…`` — ``permission_public`` with
  ``link_share_entity``, ``external_access_entity``, ``lock_switch``, ….
- ``GET /open-apis/wiki/v2/spaces/get_node?token=…`` — ``node`` with its ``space_id``.
- ``GET /open-apis/wiki/v2/spaces/:space_id/members`` — ``members[]`` of
  ``{member_type, member_id, member_role, type}``, paged (``page_size`` <= 50).
- ``GET /open-apis/contact/v3/departments/:id/children`` (``fetch_child``),
  ``GET /open-apis/contact/v3/users/find_by_department``, ``GET /open-apis/im/v1/chats`` and
  ``GET /open-apis/im/v1/chats/:chat_id/members`` — paged, ``has_more`` / ``page_token``.

Everything is set through :class:`SimPermissions` (``sim.perms``); a document nobody configured
has no collaborators and link sharing closed (only its owner reads it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

if TYPE_CHECKING:
    from tests.simulators.feishu import FeishuSimulator

__all__ = ["MEMBER_TYPES", "SimPermissions", "permission_routes"]

# drive-v1 permission-member list: the documented ``type`` enum
_MEMBER_DOC_TYPES = frozenset({"doc", "sheet", "file", "wiki", "bitable", "docx", "mindnote", "minutes", "slides"})
MEMBER_TYPES = ("email", "openid", "unionid", "openchat", "opendepartmentid", "userid", "groupid", "wikispaceid")
ROOT_DEPARTMENT = "0"


@dataclass
class SimPermissions:
    """Who may read what, and who is in which chat, department and wiki space."""

    members: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # token -> (member_type, id)
    link_share: dict[str, str] = field(default_factory=dict)  # token -> link_share_entity
    external_access: dict[str, str] = field(default_factory=dict)  # token -> external_access_entity
    locked: set[str] = field(default_factory=set)  # wiki node tokens with lock_switch on
    refused: dict[str, tuple[int, int]] = field(default_factory=dict)  # token -> (status, code) on both reads
    space_members: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # space -> (member_type, id)
    chats: dict[str, list[str]] = field(default_factory=dict)  # chat id -> member open_ids
    departments: dict[str, list[str]] = field(default_factory=dict)  # department -> direct member open_ids
    parent_department: dict[str, str] = field(default_factory=dict)  # department -> its parent ("0": root)
    emails: dict[str, str] = field(default_factory=dict)  # open_id -> e-mail

    def member_rows(self, token: str, folders: list[str]) -> list[dict[str, Any]]:
        """The document's own collaborators, then those it inherits from its folders (a folder's
        collaborators read what is in it: ``perm_type`` ``container``, as the real list marks them)."""
        rows = []
        for holder, perm_type in [(token, "single_page"), *((f, "container") for f in folders)]:
            rows += [
                {"member_type": t, "member_id": i, "perm": "view", "perm_type": perm_type, "type": _kind(t), "name": i}
                for t, i in self.members.get(holder, [])
            ]
        return rows

    def public(self, token: str) -> dict[str, Any]:
        return {
            "external_access_entity": self.external_access.get(token, "closed"),
            "security_entity": "anyone_can_view",
            "comment_entity": "anyone_can_view",
            "share_entity": "same_tenant",
            "manage_collaborator_entity": "collaborator_can_view",
            "link_share_entity": self.link_share.get(token, "closed"),
            "copy_entity": "anyone_can_view",
            "lock_switch": token in self.locked,
        }

    def children(self, department: str) -> list[str]:
        """Every department under ``department``, depth first (``fetch_child=true``)."""
        out: list[str] = []
        for child in sorted(d for d, p in self.parent_department.items() if p == department):
            out += [child, *self.children(child)]
        return out


def _kind(member_type: str) -> str:
    return {"openchat": "chat", "opendepartmentid": "department", "groupid": "group"}.get(member_type, "user")


def _page(rows: list[Any], request: Request, cap: int) -> tuple[list[Any], dict[str, Any]]:
    q = request.query_params
    size = max(1, min(int(q.get("page_size") or cap), cap))
    start = int(q.get("page_token") or 0)
    more = start + size < len(rows)
    return rows[start : start + size], {"has_more": more, **({"page_token": str(start + size)} if more else {})}


def permission_routes(app: FastAPI, sim: FeishuSimulator) -> None:
    _drive_permission_routes(app, sim)
    _directory_routes(app, sim)


def _refusal(sim: FeishuSimulator, token: str, request: Request) -> Response | None:
    if request.query_params.get("type") not in _MEMBER_DOC_TYPES:
        return sim._err(400, 1063001, "Invalid parameter")
    with sim._lock:
        if token in sim.perms.refused:
            status, code = sim.perms.refused[token]
            return sim._err(status, code, "Permission denied" if status == 403 else "error")
        item = sim.items.get(token)
        node = any(sim.wiki_node_token(t) == token for t in sim.items) if item is None else True
        if not node or (item is not None and item.trashed):
            return sim._err(404, 1063005, "Resource is deleted")
    return None


def _drive_permission_routes(app: FastAPI, sim: FeishuSimulator) -> None:
    @app.get("/open-apis/drive/v1/permissions/{token}/members")
    async def members(token: str, request: Request) -> Response:
        if denied := sim._gate(request, "perm_members") or _refusal(sim, token, request):
            return denied
        with sim._lock:
            return sim._ok({"items": sim.perms.member_rows(token, _folders(sim, token))})

    @app.get("/open-apis/drive/v2/permissions/{token}/public")
    async def public(token: str, request: Request) -> Response:
        if denied := sim._gate(request, "perm_public") or _refusal(sim, token, request):
            return denied
        with sim._lock:
            return sim._ok({"permission_public": sim.perms.public(token)})

    @app.get("/open-apis/wiki/v2/spaces/get_node")
    async def get_node(request: Request) -> Response:
        if denied := sim._gate(request, "wiki_nodes"):
            return denied
        token = request.query_params.get("token", "")
        with sim._lock:
            found = next((i for t, i in sim.items.items() if i.wiki_space and sim.wiki_node_token(t) == token), None)
            if found is None or found.trashed:
                return sim._err(404, 131005, "not found")
            node = {"space_id": found.wiki_space, "node_token": token, "obj_token": found.token}
        return sim._ok({"node": {**node, "obj_type": found.type, "title": found.name, "owner": "ou_simowner"}})

    @app.get("/open-apis/wiki/v2/spaces/{space_id}/members")
    async def space_members(space_id: str, request: Request) -> Response:
        if denied := sim._gate(request, "wiki_members"):
            return denied
        with sim._lock:
            rows = [
                {"member_type": t, "member_id": i, "member_role": "member", "type": _kind(t)}
                for t, i in sim.perms.space_members.get(space_id, [])
            ]
        page, more = _page(rows, request, 50)
        return sim._ok({"members": page, **more})


def _directory_routes(app: FastAPI, sim: FeishuSimulator) -> None:
    @app.get("/open-apis/contact/v3/departments/{department_id}/children")
    async def departments(department_id: str, request: Request) -> Response:
        if denied := sim._gate(request, "contact_departments"):
            return denied
        with sim._lock:
            found = sim.perms.children(department_id)
        if request.query_params.get("fetch_child") not in ("true", "True", "1"):
            found = [d for d in found if sim.perms.parent_department.get(d) == department_id]
        page, more = _page([_department(sim.perms, d) for d in found], request, 50)
        return sim._ok({"items": page, **more})

    @app.get("/open-apis/contact/v3/users/find_by_department")
    async def users(request: Request) -> Response:
        if denied := sim._gate(request, "contact_users"):
            return denied
        department = request.query_params.get("department_id", "")
        with sim._lock:
            ids = sim.perms.departments.get(department, [])
            rows = [{"open_id": i, "name": i, **_email(sim.perms.emails.get(i))} for i in ids]
        page, more = _page(rows, request, 50)
        return sim._ok({"items": page, **more})

    @app.get("/open-apis/im/v1/chats")
    async def chats(request: Request) -> Response:
        if denied := sim._gate(request, "chats"):
            return denied
        with sim._lock:
            rows = [{"chat_id": c, "name": c, "tenant_key": "sim"} for c in sorted(sim.perms.chats)]
        page, more = _page(rows, request, 100)
        return sim._ok({"items": page, **more})

    @app.get("/open-apis/im/v1/chats/{chat_id}/members")
    async def chat_members(chat_id: str, request: Request) -> Response:
        if denied := sim._gate(request, "chat_members"):
            return denied
        with sim._lock:
            if chat_id not in sim.perms.chats:
                return sim._err(400, 232011, "operator can NOT be out of the chat")
            ids = sim.perms.chats[chat_id]
        rows = [{"member_id_type": "open_id", "member_id": i, "name": i, "tenant_key": "sim"} for i in ids]
        page, more = _page(rows, request, 100)
        return sim._ok({"items": page, **more, "member_total": len(ids)})


def _folders(sim: FeishuSimulator, token: str) -> list[str]:
    """The folders above a drive item, nearest first (bounded: a hostile loop cannot hang it)."""
    out: list[str] = []
    item = sim.items.get(token)
    while item is not None and item.parent and item.parent not in out and len(out) < 64:
        out.append(item.parent)
        item = sim.items.get(item.parent)
    return out


def _department(perms: SimPermissions, dept: str) -> dict[str, Any]:
    parent = perms.parent_department.get(dept, ROOT_DEPARTMENT)
    return {"open_department_id": dept, "department_id": dept, "name": dept, "parent_department_id": parent}


def _email(address: str | None) -> dict[str, str]:
    return {"email": address} if address else {}
