"""Who may read a document, and who is searching: the access model every layer shares.

A connector reads each document's permissions from its source into an :class:`AccessControl`;
the index stores it flattened into **entries**, prefixed strings (Onyx's model, ``onyx/access``):

- ``public``                          anyone who can search
- ``tenant:<namespace>:<tenant>``     anyone in that tenant / organisation ("anyone in the tenant
                                      with the link" is a tenant entry, never ``public``)
- ``user:<namespace>:<id>``           one person: ``user:email:alice@example.com``,
                                      ``user:feishu_open_id:ou_1``, ``user:yuque:alice``
- ``group:<namespace>:<id>``          a group: ``group:feishu_chat:oc_1``,
                                      ``group:feishu_department:od_1``, ``group:yuque:team``,
                                      ``group:static:engineering`` (a source entry's ``acl`` block)

A searcher is a :class:`Principal`: the identities an Airflow user maps to and the groups and
tenants those identities belong to (expanded at query time from the synced memberships). A
search returns a chunk only when its document's entries and the principal's entries meet.

**Fail-closed.** A document whose permissions could not be read (no permission to read them,
a missing scope, a timeout, an unknown member type) is ``AccessControl.unknown(reason)``: no
entries, so nobody but an explicit unrestricted (admin) search sees it; so is a document with
more than ``MAX_ACL_ENTRIES`` entries (``acl_over_cap``). Nothing here ever widens access.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from include.config import AclConfig

__all__ = [
    "ACL_OVER_CAP",
    "ACL_UNKNOWN",
    "ANONYMOUS",
    "MAX_ACL_ENTRIES",
    "PUBLIC",
    "STATIC_GROUPS",
    "AccessChange",
    "AccessControl",
    "Principal",
    "Visibility",
    "declared_access",
    "group_entry",
    "tenant_entry",
    "user_entry",
]

PUBLIC = "public"
MAX_ACL_ENTRIES = 5_000  # Onyx's cap; over it the document is private (and a warning recorded)
ACL_UNKNOWN = "acl_unknown"  # the reason counted in a run for a document made private by failure
ACL_OVER_CAP = "acl_over_cap"


def _checked(namespace: str, value: str) -> str:
    if not namespace or ":" in namespace or not value:
        raise ValueError(f"an access entry needs a namespace without ':' and a value, got {namespace!r}, {value!r}")
    return f"{namespace}:{value}"


def user_entry(namespace: str, user_id: str) -> str:
    """``user:<namespace>:<id>``; e-mail addresses are compared lower-case (RFC 5321 local parts
    may be case-sensitive, but no directory here treats them so)."""
    return "user:" + _checked(namespace, user_id.lower() if namespace == "email" else user_id)


def group_entry(namespace: str, group_id: str) -> str:
    return "group:" + _checked(namespace, group_id)


def tenant_entry(namespace: str, tenant_id: str) -> str:
    return "tenant:" + _checked(namespace, tenant_id)


class Visibility(StrEnum):
    """How the source page counts a document."""

    PUBLIC = "public"
    TENANT = "tenant"  # some tenant-wide entry, nothing public
    RESTRICTED = "restricted"  # named users and groups only
    UNKNOWN = "unknown"  # permissions unreadable or over the cap: private


@dataclass(frozen=True, slots=True)
class AccessControl:
    """One document's permissions. ``users`` / ``groups`` / ``tenants`` hold whole entries
    (:func:`user_entry`, :func:`group_entry`, :func:`tenant_entry`)."""

    public: bool = False
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    tenants: frozenset[str] = frozenset()
    # set: the permissions could not be read (or were over the cap); the document is private
    unknown_reason: str | None = None
    warning: str | None = None  # e.g. over the cap: what the lineage row records

    @classmethod
    def everyone(cls) -> AccessControl:
        return cls(public=True)

    @classmethod
    def unknown(cls, reason: str, warning: str | None = None) -> AccessControl:
        """Permissions that could not be read: private (fail-closed), with why."""
        return cls(unknown_reason=reason or ACL_UNKNOWN, warning=warning)

    @classmethod
    def of(
        cls,
        *,
        public: bool = False,
        users: Iterable[str] = (),
        groups: Iterable[str] = (),
        tenants: Iterable[str] = (),
        cap: int = MAX_ACL_ENTRIES,
    ) -> AccessControl:
        """Entries as read; more than ``cap`` of them make the document private with a warning."""
        made = cls(public=public, users=frozenset(users), groups=frozenset(groups), tenants=frozenset(tenants))
        count = len(made.users) + len(made.groups) + len(made.tenants)
        if count > cap:
            return cls.unknown(ACL_OVER_CAP, f"{count} access entries, over the cap of {cap}: private")
        return made

    @property
    def known(self) -> bool:
        return self.unknown_reason is None

    def entries(self) -> tuple[str, ...]:
        """What the index stores, sorted (unknown: none, so only an unrestricted search sees it)."""
        if not self.known:
            return ()
        found = set(self.users) | set(self.groups) | set(self.tenants)
        if self.public:
            found.add(PUBLIC)
        return tuple(sorted(found))

    def digest(self) -> str:
        """Changes exactly when what the index must store changes (or why it is unknown)."""
        body = json.dumps({"entries": self.entries(), "unknown": self.unknown_reason}, separators=(",", ":"))
        return hashlib.sha256(body.encode()).hexdigest()[:32]

    def visibility(self) -> Visibility:
        if not self.known:
            return Visibility.UNKNOWN
        if self.public:
            return Visibility.PUBLIC
        return Visibility.TENANT if self.tenants else Visibility.RESTRICTED

    def to_dict(self) -> dict[str, Any]:
        return {
            "public": self.public,
            "users": sorted(self.users),
            "groups": sorted(self.groups),
            "tenants": sorted(self.tenants),
            "unknown_reason": self.unknown_reason,
            "warning": self.warning,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> AccessControl:
        """The stored form back; None or garbage is unknown (fail-closed), never public."""
        if not isinstance(data, Mapping):
            return cls.unknown(ACL_UNKNOWN, "no stored access record")
        try:
            return cls(
                public=bool(data.get("public")),
                users=frozenset(map(str, data.get("users") or ())),
                groups=frozenset(map(str, data.get("groups") or ())),
                tenants=frozenset(map(str, data.get("tenants") or ())),
                unknown_reason=data.get("unknown_reason"),
                warning=data.get("warning"),
            )
        except TypeError:
            return cls.unknown(ACL_UNKNOWN, "malformed stored access record")


@dataclass(frozen=True, slots=True)
class AccessChange:
    """What a permission change did to one document (its lineage row)."""

    digest_before: str | None
    digest_after: str
    added: tuple[str, ...]
    removed: tuple[str, ...]
    public_before: bool | None
    public_after: bool
    visibility: str

    @classmethod
    def between(cls, before: AccessControl | None, after: AccessControl) -> AccessChange:
        old = set(before.entries()) if before is not None else set()
        new = set(after.entries())
        return cls(
            digest_before=before.digest() if before is not None else None,
            digest_after=after.digest(),
            added=tuple(sorted(new - old)),
            removed=tuple(sorted(old - new)),
            public_before=(PUBLIC in old) if before is not None else None,
            public_after=PUBLIC in new,
            visibility=after.visibility().value,
        )

    @property
    def changed(self) -> bool:
        return self.digest_before != self.digest_after

    def to_dict(self) -> dict[str, Any]:
        return {
            "digest_before": self.digest_before,
            "digest_after": self.digest_after,
            "added": list(self.added),
            "removed": list(self.removed),
            "public_before": self.public_before,
            "public_after": self.public_after,
            "visibility": self.visibility,
        }


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is searching: a name for logs, the user entries they are, and the group and tenant
    entries they belong to (already expanded). :meth:`entries` is what a search filters on."""

    name: str
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    tenants: frozenset[str] = frozenset()
    # where the identities came from (``email``, ``mapping``, ``none``), for the page that says so
    mapped_by: str = "none"
    notes: tuple[str, ...] = field(default=())

    def entries(self) -> frozenset[str]:
        return frozenset({PUBLIC, *self.users, *self.groups, *self.tenants})

    @property
    def anonymous(self) -> bool:
        return not (self.users or self.groups or self.tenants)


ANONYMOUS = Principal("anonymous")  # sees public documents only


STATIC_GROUPS = "static"  # the namespace of groups named in a source's ``acl`` block


def declared_access(acl: AclConfig | None, item_key: str) -> AccessControl:
    """A web or files item's permissions from its source entry's ``acl`` block: the first rule
    whose ``match`` glob matches the key, else the block itself; no block at all is public."""
    if acl is None:
        return AccessControl.everyone()
    chosen: Any = next((rule for rule in acl.rules if fnmatchcase(item_key, rule.match)), acl)
    return AccessControl.of(
        public=chosen.public,
        users=(user_entry("email", u) for u in chosen.users),
        groups=(group_entry(STATIC_GROUPS, g) for g in chosen.groups),
    )
