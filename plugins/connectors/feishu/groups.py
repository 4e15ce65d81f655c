"""The Feishu group sync (issue 35): who is in each chat, department and wiki space a document's
collaborators can name, flattened to user entries for searches to expand.

- departments: ``GET /contact/v3/departments/0/children?fetch_child=true`` (every department,
  with its ``parent_department_id``) and ``GET /contact/v3/users/find_by_department`` per
  department (direct members); a department's members are its own and its descendants'
  (Feishu grants a department to everyone under it). Every person seen makes the tenant entry,
  given only when every department was listed in full.
- chats: ``GET /im/v1/chats`` (the chats the app's bot is in) and their members;
- wiki spaces (the source's): ``GET /wiki/v2/spaces/:id/members``, whose chat and department
  members are expanded through the two above.

A person is ``user:feishu_open_id:<open_id>`` and, when the directory gives one, their e-mail.
A listing that failed leaves its group out and the listing incomplete (the engine keeps the
stored members of what it did not get); a member of a type that cannot be expanded is counted
and left out (fail-closed: fewer readers, never more).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from typing import Any

from include.acl import group_entry, tenant_entry, user_entry
from plugins.connectors.base import GroupListing
from plugins.connectors.feishu.client import FeishuClient
from plugins.connectors.feishu.errors import FeishuError
from plugins.connectors.feishu.permissions import TENANT_NAMESPACE

__all__ = ["list_memberships"]

_log = logging.getLogger(__name__)
ROOT = "0"  # contact-v3: the tenant's root department


def _person(record: dict[str, Any]) -> frozenset[str]:
    open_id = record.get("open_id")
    if not isinstance(open_id, str) or not open_id:
        return frozenset()
    found = {user_entry("feishu_open_id", open_id)}
    for key in ("email", "enterprise_email"):
        address = record.get(key)
        if isinstance(address, str) and "@" in address:
            found.add(user_entry("email", address))
    return frozenset(found)


class _Sync:
    def __init__(self, client: FeishuClient, log: Any) -> None:
        self.client = client
        self.log = log
        self.errors: Counter[str] = Counter()
        self.complete = True

    def _failed(self, what: str, exc: FeishuError) -> None:
        self.complete = False
        self.errors[f"code_{exc.code}" if exc.code is not None else type(exc).__name__] += 1
        self.log.warning("Feishu group sync: %s unreadable: %s", what, exc)

    def departments(self) -> dict[str, frozenset[str]] | None:
        """Department id -> members (its own and its descendants'); None: the tree failed."""
        params = {"department_id_type": "open_department_id", "fetch_child": "true", "page_size": 50}
        try:
            rows = list(
                self.client.pages(f"/contact/v3/departments/{ROOT}/children", api="contact_departments", params=params)
            )
        except FeishuError as exc:
            self._failed("the department tree", exc)
            return None
        parent = {
            str(r["open_department_id"]): str(r.get("parent_department_id") or ROOT)
            for r in rows
            if r.get("open_department_id")
        }
        direct = {d: self._department_users(d) for d in [ROOT, *parent]}
        members: dict[str, set[str]] = {d: set(v or ()) for d, v in direct.items()}
        for dept, users in direct.items():
            seen, up = {dept}, parent.get(dept)
            while up is not None and up not in seen:  # a cycle in a hostile tree stops here
                members.setdefault(up, set()).update(users or ())
                seen.add(up)
                up = parent.get(up)
        return {d: frozenset(m) for d, m in members.items() if direct.get(d) is not None}

    def _department_users(self, department: str) -> frozenset[str] | None:
        params = {
            "department_id": department,
            "department_id_type": "open_department_id",
            "user_id_type": "open_id",
            "page_size": 50,
        }
        try:
            rows = self.client.pages("/contact/v3/users/find_by_department", api="contact_users", params=params)
            return frozenset().union(*(_person(r) for r in rows if isinstance(r, dict)))
        except FeishuError as exc:
            self._failed(f"department {department}", exc)
            return None

    def chats(self) -> dict[str, frozenset[str]]:
        try:
            ids = [
                str(c["chat_id"])
                for c in self.client.pages("/im/v1/chats", api="chats", params={"page_size": 100})
                if c.get("chat_id")
            ]
        except FeishuError as exc:
            self._failed("the chat list", exc)
            return {}
        out: dict[str, frozenset[str]] = {}
        for chat in ids:
            params = {"member_id_type": "open_id", "page_size": 100}
            try:
                rows = self.client.pages(f"/im/v1/chats/{chat}/members", api="chat_members", params=params)
                out[chat] = frozenset(
                    user_entry("feishu_open_id", r["member_id"])
                    for r in rows
                    if isinstance(r.get("member_id"), str) and r["member_id"]
                )
            except FeishuError as exc:
                self._failed(f"chat {chat}", exc)
        return out

    def space(
        self, space: str, chats: dict[str, frozenset[str]], depts: dict[str, frozenset[str]]
    ) -> frozenset[str] | None:
        try:
            rows = list(
                self.client.pages(
                    f"/wiki/v2/spaces/{space}/members", api="wiki_members", params={"page_size": 50}, items="members"
                )
            )
        except FeishuError as exc:
            self._failed(f"wiki space {space}", exc)
            return None
        found: set[str] = set()
        for r in rows:
            kind, member = r.get("member_type"), r.get("member_id")
            if not isinstance(member, str) or not member:
                self.errors["malformed_member"] += 1
            elif kind == "openid":
                found.add(user_entry("feishu_open_id", member))
            elif kind == "email":
                found.add(user_entry("email", member))
            elif kind == "openchat" and member in chats:
                found |= chats[member]
            elif kind == "opendepartmentid" and member in depts:
                found |= depts[member]
            else:
                self.errors[f"unexpanded_{kind}"] += 1  # that member's people see less: fail-closed
        return frozenset(found)


def list_memberships(client: FeishuClient, spaces: Iterable[str], tenant: str, log: Any = None) -> GroupListing:
    """Every department, chat and wiki space of the source, flattened, and the tenant entry."""
    start = client.sent
    sync = _Sync(client, log or _log)
    listing = GroupListing()
    depts = sync.departments()
    chats = sync.chats()
    for dept, members in (depts or {}).items():
        if dept != ROOT:
            listing.members[group_entry("feishu_department", dept)] = members
    for chat, members in chats.items():
        listing.members[group_entry("feishu_chat", chat)] = members
    for space in sorted(set(spaces)):
        readers = sync.space(space, chats, depts or {})
        if readers is not None:
            listing.members[group_entry("feishu_wiki_space", space)] = readers
    listing.complete = sync.complete
    if depts is not None and sync.complete:
        listing.members[tenant_entry(TENANT_NAMESPACE, tenant)] = frozenset().union(*depts.values())
    listing.errors = dict(sync.errors)
    listing.requests = client.sent - start
    return listing
