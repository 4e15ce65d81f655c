"""Who may read a Feishu document (issue 35), read through the drive permission APIs.

Per document, two reads (field names from larksuite/oapi-sdk-python's models):

- the collaborators, ``GET /drive/v1/permissions/:token/members?type=…`` (``Member``:
  ``member_type``, ``member_id``, ``perm``; every ``perm`` — view, edit, full_access — reads);
- the public settings, ``GET /drive/v2/permissions/:token/public?type=…`` (``PermissionPublic``):
  ``link_share_entity`` ``tenant_*`` / ``partner_tenant_*`` is *anyone in the tenant with the
  link*, a tenant entry and never public; ``anyone_*`` is public only while
  ``external_access_entity`` is ``open`` (the page says it has no effect otherwise), else the
  tenant; ``closed`` adds nothing.

and the owner's ``open_id`` (the listing's ``owner_id``, else one ``metas/batch_query`` per 200
documents). A wiki node's permissions are read on the node (``type=wiki``, the node token) and,
unless its ``lock_switch`` is on (a locked node stops inheriting), the space's members read it:
``group:feishu_wiki_space:<space>``, expanded by the group sync (:mod:`.groups`).

Fail-closed: a refused or failed read (403 ``1063002``, a missing scope ``99991672``, a timeout),
a ``member_type`` or ``link_share_entity`` outside the documented values, or an item whose type
cannot be told makes the document ``AccessControl.unknown("acl_unknown:<cause>")``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from include.acl import AccessControl, group_entry, tenant_entry, user_entry
from plugins.connectors.base import AccessRequest
from plugins.connectors.feishu.client import FeishuClient
from plugins.connectors.feishu.errors import FeishuError

__all__ = ["MEMBER_ENTRIES", "TENANT_NAMESPACE", "AccessReader", "DocRef", "access_metadata", "public_entries"]

_log = logging.getLogger(__name__)

TENANT_NAMESPACE = "feishu"  # tenant:feishu:<tenant host>
# drive-v1 BaseMember.member_type -> the entry it grants
MEMBER_ENTRIES: dict[str, Callable[[str], str]] = {
    "openid": lambda i: user_entry("feishu_open_id", i),
    "email": lambda i: user_entry("email", i),
    "userid": lambda i: user_entry("feishu_user_id", i),
    "unionid": lambda i: user_entry("feishu_union_id", i),
    "openchat": lambda i: group_entry("feishu_chat", i),
    "opendepartmentid": lambda i: group_entry("feishu_department", i),
    "groupid": lambda i: group_entry("feishu_group", i),
    "wikispaceid": lambda i: group_entry("feishu_wiki_space", i),
}
# the URL path segment of a document -> its type (the listing's urls: /docx/<token>, /base/<token>, …)
_URL_TYPES = {
    "docs": "doc", "docx": "docx", "sheets": "sheet", "base": "bitable", "file": "file",
    "slides": "slides", "mindnotes": "mindnote", "wiki": "wiki",
}  # fmt: skip
_TENANT_LINKS = frozenset({"tenant_readable", "tenant_editable", "partner_tenant_readable", "partner_tenant_editable"})
_ANYONE_LINKS = frozenset({"anyone_readable", "anyone_editable"})
_META_BATCH = 200  # drive-v1 metas/batch_query takes at most 200 documents


@dataclass(frozen=True, slots=True)
class DocRef:
    """What the permission APIs are asked about for one item."""

    item_key: str
    token: str  # the document's token, or the wiki node's
    type: str  # the ``type`` query value: docx, sheet, …, or wiki
    owner_id: str | None = None
    space_id: str | None = None  # wiki: the node's space (None: to be asked)

    @property
    def wiki(self) -> bool:
        return self.type == "wiki"


def access_metadata(item: Any) -> dict[str, Any]:
    """What a discovered Change carries so the fetch stage's read needs no lookup: the owner and,
    for a wiki item, its space and node (a :class:`.listing.DriveItem`)."""
    block: dict[str, Any] = {}
    if item.owner_id:
        block["owner_id"] = item.owner_id
    if item.space_id and item.node_token:
        block.update(space_id=item.space_id, node_token=item.node_token)
    return {"access": block} if block else {}


def doc_ref(request: AccessRequest) -> DocRef | None:
    """From the discovery's metadata when present, else from the stored URL (a permission sync)."""
    meta = request.metadata
    found = meta.get("access")
    block: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    owner = block.get("owner_id") if isinstance(block.get("owner_id"), str) else None
    if isinstance(block.get("node_token"), str) and isinstance(block.get("space_id"), str):
        return DocRef(request.item_key, block["node_token"], "wiki", owner, block["space_id"])
    if isinstance(meta.get("feishu_type"), str) and meta.get("via") not in ("wiki", "wiki_shortcut"):
        return DocRef(request.item_key, request.item_key, meta["feishu_type"], owner)
    parts = [p for p in urlsplit(request.url or "").path.split("/") if p]
    if len(parts) >= 2 and parts[-2] in _URL_TYPES:
        kind = _URL_TYPES[parts[-2]]
        return DocRef(request.item_key, parts[-1] if kind == "wiki" else request.item_key, kind, owner)
    return None


def public_entries(setting: Mapping[str, Any], tenant: str) -> tuple[bool, list[str]] | None:
    """(public, [tenant entries]) from drive-v2 PermissionPublic; None: a value we cannot read."""
    link = setting.get("link_share_entity")
    if link == "closed":
        return False, []
    if link in _TENANT_LINKS:
        return False, [tenant_entry(TENANT_NAMESPACE, tenant)]
    if link in _ANYONE_LINKS:
        if setting.get("external_access_entity") == "open":
            return True, []
        return False, [tenant_entry(TENANT_NAMESPACE, tenant)]  # "anyone" without external access
    return None


def _cause(exc: BaseException) -> str:
    """A short, countable cause (never a token or a body)."""
    if isinstance(exc, FeishuError):
        if exc.code is not None:
            return f"code_{exc.code}"
        if exc.status is not None:
            return f"http_{exc.status}"
    return type(exc).__name__


def _unknown(cause: str, warning: str) -> AccessControl:
    return AccessControl.unknown(f"acl_unknown:{cause}", warning[:300])


class AccessReader:
    """Reads the permissions of a batch of items; ``errors`` counts the causes of unknowns."""

    def __init__(self, client: FeishuClient, tenant: str, log: Any = None) -> None:
        self.client = client
        self.tenant = tenant
        self.log = log or _log
        self.errors: Counter[str] = Counter()
        self.owners_unread = 0  # documents whose owner the meta query did not answer

    def read(self, items: Sequence[AccessRequest]) -> dict[str, AccessControl]:
        out: dict[str, AccessControl] = {}
        refs: list[DocRef] = []
        for item in items:
            ref = doc_ref(item)
            if ref is None:
                out[item.item_key] = self._count(_unknown("type", f"no document type for {item.item_key!r}"))
            else:
                refs.append(ref)
        owners = self._owners([r for r in refs if r.owner_id is None])
        for ref in refs:
            owner = ref.owner_id or owners.get(ref.token)
            out[ref.item_key] = self._count(self._one(ref, owner))
        return out

    def _count(self, access: AccessControl) -> AccessControl:
        if access.unknown_reason is not None:
            self.errors[access.unknown_reason] += 1
        return access

    def _one(self, ref: DocRef, owner: str | None) -> AccessControl:
        try:
            members = self.client.permission_members(ref.token, ref.type)
            setting = self.client.permission_public(ref.token, ref.type)
            space = self._space(ref, setting)
        except FeishuError as exc:
            self.log.warning("Feishu permissions of %s unreadable: %s", ref.item_key, _cause(exc))
            return _unknown(_cause(exc), f"{ref.type} {ref.item_key}: {exc}")
        public = public_entries(setting, self.tenant)
        if public is None:
            return _unknown("link_share", f"{ref.item_key}: link_share_entity {setting.get('link_share_entity')!r}")
        users: list[str] = [user_entry("feishu_open_id", owner)] if owner else []
        groups: list[str] = []
        for m in members:
            entry = MEMBER_ENTRIES.get(str(m.get("member_type")))
            member_id = m.get("member_id")
            if entry is None or not isinstance(member_id, str) or not member_id:
                return _unknown("member_type", f"{ref.item_key}: member_type {m.get('member_type')!r}")
            made = entry(member_id)
            (users if made.startswith("user:") else groups).append(made)
        if space:
            groups.append(group_entry("feishu_wiki_space", space))
        return AccessControl.of(public=public[0], users=users, groups=groups, tenants=public[1])

    def _space(self, ref: DocRef, setting: Mapping[str, Any]) -> str | None:
        """The wiki space whose members read the node: none for a locked node or a drive file."""
        if not ref.wiki or setting.get("lock_switch") is True:
            return None
        if ref.space_id:
            return ref.space_id
        space = self.client.wiki_node(ref.token).get("space_id")
        return space if isinstance(space, str) and space else None

    def _owners(self, refs: list[DocRef]) -> dict[str, str]:
        """Owners' open_ids by token, from the batch meta query (200 a request). A failure
        leaves the owner out: it narrows who reads, never widens."""
        found: dict[str, str] = {}
        for start in range(0, len(refs), _META_BATCH):
            batch = [(r.token, r.type) for r in refs[start : start + _META_BATCH]]
            try:
                metas, _failed = self.client.batch_query_metas(batch)
            except FeishuError as exc:
                self.owners_unread += len(batch)
                self.log.warning("Feishu owners of %d documents unreadable: %s", len(batch), _cause(exc))
                continue
            for m in metas:
                if isinstance(m.get("doc_token"), str) and isinstance(m.get("owner_id"), str):
                    found[m["doc_token"]] = m["owner_id"]
        return found
