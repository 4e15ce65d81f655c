"""Document permissions and group memberships, in the state database (SQLAlchemy Core).

Tables (created beside the state tables, same URL and engine as :class:`StateStore`)
- ``tributary_item_access``: one row per (source, item): the document's :class:`AccessControl`
  as last written to the index, its digest (``AccessControl.digest``: a permission sync compares
  it with what the source says now), its visibility (the source page's counts), the run that
  wrote it, and ``previous``: the access the row held before that run wrote it, so that a
  re-run of the same commit computes the same :class:`include.acl.AccessChange` for lineage.
- ``tributary_group_members``: (source, group or tenant entry, user entry), one row per
  membership a group sync read; a search expands a principal's user entries through it.
- ``tributary_group_syncs``: per source, when its groups were last synced and how completely.

Rows are written after the index write they describe (the same rule as item state): a crash in
between leaves the index ahead of this table, and the next sync writes the index again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import sqlalchemy as sa

from include.acl import AccessControl, Visibility
from include.stores.side import SideStore
from include.stores.state import _batched, _upsert_rows

__all__ = ["AccessStore", "StoredAccess"]

_meta = sa.MetaData()

access_table = sa.Table(
    "tributary_item_access",
    _meta,
    sa.Column("source", sa.String(200), primary_key=True),
    sa.Column("item_key", sa.String(2048), primary_key=True),
    sa.Column("doc_id", sa.String(64), nullable=False),
    sa.Column("access", sa.JSON, nullable=False),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("visibility", sa.String(20), nullable=False),
    sa.Column("run_id", sa.String(250)),
    sa.Column("previous", sa.JSON),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)
sa.Index("item_access_visibility", access_table.c.source, access_table.c.visibility)

members_table = sa.Table(
    "tributary_group_members",
    _meta,
    sa.Column("source", sa.String(200), primary_key=True),
    sa.Column("group_entry", sa.String(512), primary_key=True),
    sa.Column("user_entry", sa.String(512), primary_key=True),
)
sa.Index("group_members_user", members_table.c.user_entry)

group_syncs_table = sa.Table(
    "tributary_group_syncs",
    _meta,
    sa.Column("source", sa.String(200), primary_key=True),
    sa.Column("synced_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("complete", sa.Boolean, nullable=False),
    sa.Column("groups", sa.Integer, nullable=False),
    sa.Column("memberships", sa.Integer, nullable=False),
    sa.Column("kept_groups", sa.Integer, nullable=False),
    sa.Column("requests", sa.Integer, nullable=False),
    sa.Column("errors", sa.JSON),
)


class GroupListingLike(Protocol):
    """What :meth:`AccessStore.replace_groups` reads of a connector's ``GroupListing`` (the
    connector layer's type; ``include`` does not import ``plugins``)."""

    @property
    def members(self) -> Mapping[str, Iterable[str]]: ...
    @property
    def complete(self) -> bool: ...
    @property
    def errors(self) -> Mapping[str, int]: ...
    @property
    def requests(self) -> int: ...


# engines whose access tables exist already (one create_all check per engine, not per store)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True, slots=True)
class StoredAccess:
    """A document's stored permissions. ``previous``: what the row held before ``run_id`` wrote
    it (None: no row before); :meth:`before` is what a lineage row of ``run_id`` compares with."""

    item_key: str
    doc_id: str
    access: AccessControl
    digest: str
    visibility: str
    run_id: str | None = None
    updated_at: dt.datetime | None = None
    previous: AccessControl | None = None

    @classmethod
    def of(cls, item_key: str, doc_id: str, access: AccessControl, run_id: str | None = None) -> StoredAccess:
        """A row to save: digest and visibility follow from ``access``."""
        return cls(item_key, doc_id, access, access.digest(), access.visibility().value, run_id)

    def before(self, run_id: str) -> AccessControl | None:
        """The access this item had before run ``run_id`` (a re-run of that run's commit finds
        its own row: the access it replaced is ``previous``)."""
        return self.previous if self.run_id == run_id else self.access


class AccessStore(SideStore):
    """Stored permissions and group memberships; shares the state store's engine."""

    metadata = _meta

    # ---------------------------------------------------------------------------- documents
    def get(self, source: str, item_keys: Iterable[str] | None = None) -> dict[str, StoredAccess]:
        """Stored rows of ``source`` by item key (all of them, or those of ``item_keys``)."""
        base = sa.select(access_table).where(access_table.c.source == source)
        with self.engine.connect() as conn:
            if item_keys is None:
                return {r.item_key: _stored(r) for r in conn.execute(base)}
            found: dict[str, StoredAccess] = {}
            for part in _batched(list(dict.fromkeys(item_keys)), 500):
                found.update(
                    (r.item_key, _stored(r)) for r in conn.execute(base.where(access_table.c.item_key.in_(part)))
                )
            return found

    def save(self, source: str, rows: Iterable[StoredAccess]) -> int:
        """Insert or replace rows (digest and visibility recomputed from each row's access, so
        a row can never claim a digest its entries do not have); returns rows written.

        ``previous`` is kept from the stored row when the same run writes it again, else it
        becomes the stored access, so a re-run's lineage says what the first attempt said."""
        latest = {r.item_key: r for r in rows}
        if not latest:
            return 0
        stored = self.get(source, latest)
        now = _now()
        values = []
        for key, row in latest.items():
            old = stored.get(key)
            previous = None if old is None else old.before(row.run_id or "")
            values.append(
                {
                    "source": source,
                    "item_key": key,
                    "doc_id": row.doc_id,
                    "access": row.access.to_dict(),
                    "digest": row.access.digest(),
                    "visibility": row.access.visibility().value,
                    "run_id": row.run_id,
                    "previous": previous.to_dict() if previous is not None else None,
                    "updated_at": now,
                }
            )
        with self.engine.begin() as conn:
            _upsert_rows(conn, access_table, ("source", "item_key"), values)
        return len(values)

    def delete(self, source: str, item_keys: Iterable[str]) -> int:
        keys = list(dict.fromkeys(item_keys))
        removed = 0
        with self.engine.begin() as conn:
            for part in _batched(keys, 500):
                removed += conn.execute(
                    access_table.delete().where(access_table.c.source == source, access_table.c.item_key.in_(part))
                ).rowcount
        return removed

    def rename(self, source: str, renames: Mapping[str, str]) -> None:
        """Move rows to new item keys (a connector's changed key scheme; the doc id stays)."""
        if not renames:
            return
        with self.engine.begin() as conn:
            for old, new in renames.items():
                taken = conn.execute(
                    sa.select(access_table.c.item_key).where(
                        access_table.c.source == source, access_table.c.item_key == new
                    )
                ).first()
                if taken is None:
                    conn.execute(
                        access_table.update()
                        .where(access_table.c.source == source, access_table.c.item_key == old)
                        .values(item_key=new)
                    )

    def visibility_counts(self, source: str) -> dict[str, int]:
        """Documents of ``source`` by visibility: ``public``, ``tenant``, ``restricted``, ``unknown``."""
        counts = {v.value: 0 for v in Visibility}
        q = (
            sa.select(access_table.c.visibility, sa.func.count())
            .where(access_table.c.source == source)
            .group_by(access_table.c.visibility)
        )
        with self.engine.connect() as conn:
            for visibility, n in conn.execute(q):
                counts[str(visibility)] = int(n)
        return counts

    # ---------------------------------------------------------------------------- groups
    def replace_groups(self, source: str, listing: GroupListingLike) -> dict[str, int]:
        """Store a group sync's memberships (a :class:`plugins.connectors.base.GroupListing`):
        a complete listing replaces every group of ``source``; an incomplete one replaces only
        the groups it lists and keeps the stored members of the others (a failed page must not
        revoke what it could not read). Returns {groups, memberships, kept_groups}."""
        members = listing.members
        rows = [
            {"source": source, "group_entry": group, "user_entry": user}
            for group, users in members.items()
            for user in sorted(set(users))
        ]
        with self.engine.begin() as conn:
            where = members_table.c.source == source
            if listing.complete:
                conn.execute(members_table.delete().where(where))
            else:
                for part in _batched(list(members), 500):
                    conn.execute(members_table.delete().where(where, members_table.c.group_entry.in_(part)))
            for chunk in _batched(rows, 5000):
                conn.execute(members_table.insert(), chunk)
            stored = conn.execute(
                sa.select(sa.func.count(sa.distinct(members_table.c.group_entry))).where(where)
            ).scalar_one()
            result = {"groups": len(members), "memberships": len(rows), "kept_groups": int(stored) - len(members)}
            status = {
                "source": source,
                "synced_at": _now(),
                "complete": bool(listing.complete),
                "requests": int(listing.requests or 0),
                "errors": dict(listing.errors or {}),
                **result,
            }
            _upsert_rows(conn, group_syncs_table, ("source",), [status])
        return result

    def groups_of(self, user_entries: Iterable[str]) -> frozenset[str]:
        """The group and tenant entries these users belong to, across every source."""
        users = list(dict.fromkeys(user_entries))
        found: set[str] = set()
        with self.engine.connect() as conn:
            for part in _batched(users, 500):
                q = sa.select(members_table.c.group_entry).where(members_table.c.user_entry.in_(part)).distinct()
                found.update(g for (g,) in conn.execute(q))
        return frozenset(found)

    def group_sync_status(self, source: str) -> dict[str, Any] | None:
        """The last group sync of ``source``: when, complete or not, counts, errors; None: never."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(group_syncs_table).where(group_syncs_table.c.source == source)).first()
        if row is None:
            return None
        status = dict(row._mapping)
        status["errors"] = dict(status.get("errors") or {})
        return status


def _stored(row: Any) -> StoredAccess:
    return StoredAccess(
        item_key=row.item_key,
        doc_id=row.doc_id,
        access=AccessControl.from_dict(row.access),
        digest=row.digest,
        visibility=row.visibility,
        run_id=row.run_id,
        updated_at=row.updated_at,
        previous=AccessControl.from_dict(row.previous) if row.previous is not None else None,
    )
