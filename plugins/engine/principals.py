"""Who is searching: the principals file, and an Airflow user (or ``search --as NAME``) as a
:class:`~include.acl.Principal`.

The file (YAML, path in ``TRIBUTARY_PRINCIPALS``; unset: nobody is mapped, an e-mail address is
still an identity) maps names to source identities, names the admins, and declares the static
groups a web or files source's ``acl`` block names::

    users:            # key: the Airflow username (or any name given to `search --as`)
      alice:
        email: alice@example.com          # -> user:email:alice@example.com (the default identity)
        feishu_open_id: ou_alice          # -> user:feishu_open_id:ou_alice (a list for several apps)
        yuque: alice                      # -> user:yuque:alice
    admins: [ops]                         # may search unrestricted
    groups:           # static groups: group:static:<name>
      engineering: [alice, bob@example.com]

A name resolves to (:func:`resolve_principal`): its mapped identities, else the mapping whose
e-mail is the one the caller knows (an Airflow account's), else ``user:email:<email>`` alone (the
name itself when it is an address); then the static groups naming any of those identities; then
the group and tenant entries the synced memberships give them (``AccessStore.groups_of``). A name
with no identity at all sees public documents only (``mapped_by="none"``). Nothing here widens
access beyond what the file and the synced memberships say.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from include.acl import STATIC_GROUPS, Principal, group_entry, user_entry

__all__ = [
    "GroupsSource",
    "PrincipalMap",
    "PrincipalsError",
    "UserIdentities",
    "describe_principal",
    "is_admin",
    "load_principals",
    "resolve_principal",
]

# one "@" with something on both sides and a dot-free-or-not domain: a sanity check that catches
# a username in an e-mail field, not an RFC 5322 validator
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")


class PrincipalsError(ValueError):
    """The principals file cannot be used: missing, not YAML, or not the schema. ``problems``
    holds one ``where: what`` line per fault (never a value from the file)."""

    def __init__(self, path: Path | str, problems: list[str]) -> None:
        self.path = str(path)
        self.problems = problems
        super().__init__(f"principals file {self.path}: " + "; ".join(problems))


def _email(value: str) -> str:
    text = value.strip().lower()
    if not _EMAIL.match(text):
        raise ValueError("not an e-mail address")
    return text


def _ids(value: str | list[str] | None) -> tuple[str, ...]:
    """One identity or several (a person in two Feishu apps has two open_ids), trimmed, deduplicated."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    out = tuple(dict.fromkeys(v.strip() for v in items))
    if any(not v for v in out):
        raise ValueError("an empty identity")
    return out


class UserIdentities(BaseModel):
    """One name's identities in the sources; each becomes a ``user:`` entry."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    email: str | list[str] | None = None
    feishu_open_id: str | list[str] | None = None
    yuque: str | list[str] | None = None

    @field_validator("email")
    @classmethod
    def _emails(cls, value: str | list[str] | None) -> list[str] | None:
        return None if value is None else [_email(v) for v in _ids(value)]

    @field_validator("feishu_open_id", "yuque")
    @classmethod
    def _others(cls, value: str | list[str] | None) -> list[str] | None:
        return None if value is None else list(_ids(value))

    @property
    def emails(self) -> tuple[str, ...]:
        return _ids(self.email)

    def entries(self) -> frozenset[str]:
        return frozenset(
            [user_entry("email", e) for e in self.emails]
            + [user_entry("feishu_open_id", i) for i in _ids(self.feishu_open_id)]
            + [user_entry("yuque", i) for i in _ids(self.yuque)]
        )


class PrincipalMap(BaseModel):
    """The principals file, validated: unknown keys, a member that is neither a mapped name nor
    an e-mail address, a malformed address are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    users: dict[str, UserIdentities] = Field(default_factory=dict)
    admins: list[str] = Field(default_factory=list)
    groups: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("users", "groups", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value  # `users:` with nothing under it

    @field_validator("admins", mode="before")
    @classmethod
    def _no_admins(cls, value: Any) -> Any:
        return [] if value is None else value

    @model_validator(mode="after")
    def _members_are_known(self) -> PrincipalMap:
        for group, members in self.groups.items():
            if not group.strip():
                raise ValueError("groups: a group needs a name")
            for number, member in enumerate(members, 1):
                if member not in self.users and not _EMAIL.match(member.strip()):
                    raise ValueError(
                        f"groups.{group}: member #{number} is neither a name under users nor an e-mail address"
                    )
        return self

    def user_entries(self, name: str) -> frozenset[str]:
        """The entries a mapped name is (empty when the name is not mapped)."""
        found = self.users.get(name)
        return found.entries() if found is not None else frozenset()

    def name_of_email(self, email: str) -> str | None:
        """The mapped name whose identities include ``email`` (the first in file order)."""
        wanted = email.strip().lower()
        return next((n for n, ids in self.users.items() if wanted in ids.emails), None)

    def static_groups(self, name: str, users: frozenset[str]) -> frozenset[str]:
        """``group:static:<g>`` for each static group naming ``name`` or any of ``users``."""
        out = set()
        for group, members in self.groups.items():
            for member in members:
                named = self.user_entries(member) if member in self.users else {user_entry("email", member.strip())}
                if member == name or named & users:
                    out.add(group_entry(STATIC_GROUPS, group))
                    break
        return frozenset(out)


class GroupsSource(Protocol):
    """What resolving needs of ``include.stores.access.AccessStore``: the synced memberships."""

    def groups_of(self, user_entries: Iterable[str]) -> frozenset[str]: ...


_CACHE: dict[str, tuple[tuple[int, int], PrincipalMap]] = {}
_LOCK = threading.Lock()


def load_principals(path: str | Path | None = None) -> PrincipalMap:
    """The principals file at ``path`` (default: ``TRIBUTARY_PRINCIPALS``; unset or empty: an
    empty map). Read again only when its mtime or size changes, so a search page pays one
    ``stat``. :class:`PrincipalsError` when the named file is missing or invalid: a file that was
    meant to map people must not silently map nobody."""
    chosen = str(path) if path is not None else os.environ.get("TRIBUTARY_PRINCIPALS", "")
    if not chosen.strip():
        return PrincipalMap()
    file = Path(chosen).expanduser()
    try:
        info = file.stat()
    except OSError as exc:
        raise PrincipalsError(file, [f"cannot be read ({exc.strerror or type(exc).__name__})"]) from None
    stamp = (info.st_mtime_ns, info.st_size)
    key = str(file.resolve())
    with _LOCK:
        cached = _CACHE.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
    parsed = _parse(file)
    with _LOCK:
        _CACHE[key] = (stamp, parsed)
    return parsed


def _parse(file: Path) -> PrincipalMap:
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise PrincipalsError(file, [f"cannot be read ({type(exc).__name__})"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise PrincipalsError(file, [f"not valid YAML{where}"]) from None
    if data is None:
        return PrincipalMap()
    if not isinstance(data, Mapping):
        raise PrincipalsError(
            file, [f"the top level must be a mapping (users, admins, groups), not {type(data).__name__}"]
        )
    try:
        return PrincipalMap.model_validate(data)
    except ValidationError as exc:
        raise PrincipalsError(file, [_problem(e) for e in exc.errors(include_input=False)]) from None


def _problem(error: Mapping[str, Any]) -> str:
    """One pydantic error as ``users.alice.emial: unknown key`` (no value from the file)."""
    where = ".".join(str(p) for p in error.get("loc", ())) or "file"
    kind = error.get("type")
    if kind == "extra_forbidden":
        return f"{where}: unknown key"
    if kind == "value_error" and "error" in (error.get("ctx") or {}):
        return f"{where}: {error['ctx']['error']}" if where != "file" else str(error["ctx"]["error"])
    return f"{where}: {error.get('msg', 'invalid')}"


def resolve_principal(
    name: str,
    *,
    email: str | None = None,
    store: GroupsSource | None = None,
    principals: PrincipalMap | None = None,
) -> Principal:
    """``name`` (an Airflow username, a name given to ``--as``, or an e-mail address) as a
    Principal; ``email``: an address the caller knows is theirs (the Airflow account's).
    ``store``: the synced memberships to expand (None: static groups only, noted)."""
    pm = principals if principals is not None else load_principals()
    name = name.strip()
    known = email.strip().lower() if email and email.strip() else None
    if known is None and _EMAIL.match(name):
        known = name.lower()
    mapped = name if name in pm.users else (pm.name_of_email(known) if known else None)
    if mapped is not None:
        users = set(pm.user_entries(mapped))
        if known is not None and not pm.users[mapped].emails:
            users.add(user_entry("email", known))  # a mapping without an address: the known one
        mapped_by = "mapping"
    elif known is not None:
        users, mapped_by = {user_entry("email", known)}, "email"
    else:
        return Principal(name, mapped_by="none", notes=(f"no identity mapped for {name!r}: public documents only",))
    frozen = frozenset(users)
    grouped = set(pm.static_groups(mapped or name, frozen))
    notes: list[str] = []
    if store is not None:
        grouped |= store.groups_of(sorted(frozen))
    else:
        notes.append("synced group memberships not expanded (no access store)")
    return Principal(
        name,
        users=frozen,
        groups=frozenset(g for g in grouped if g.startswith("group:")),
        tenants=frozenset(g for g in grouped if g.startswith("tenant:")),
        mapped_by=mapped_by,
        notes=tuple(notes),
    )


def is_admin(name: str, principals: PrincipalMap | None = None) -> bool:
    """Whether ``name`` is listed under ``admins`` (may search unrestricted)."""
    pm = principals if principals is not None else load_principals()
    return name.strip() in pm.admins


def describe_principal(principal: Principal) -> str:
    """``alice (mapping: 2 identities, 5 groups)``: who a search ran as, for people."""
    if principal.anonymous:
        return f"{principal.name} (no identity mapped: public documents only)"
    parts = [f"{len(principal.users)} {'identity' if len(principal.users) == 1 else 'identities'}"]
    groups = len(principal.groups)
    parts.append(f"{groups} {'group' if groups == 1 else 'groups'}")
    if principal.tenants:
        parts.append(f"{len(principal.tenants)} {'tenant' if len(principal.tenants) == 1 else 'tenants'}")
    return f"{principal.name} ({principal.mapped_by}: {', '.join(parts)})"
