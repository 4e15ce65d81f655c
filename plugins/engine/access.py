"""Permissions in a content sync's commit: stored access rows, lineage, ``acl_unknown``.

Fetch read every fetched item's permissions (``ItemRecord.access``, by
:func:`plugins.engine.process.read_batch_access`) and the upsert wrote them to the index with
the item's chunks. The commit then, for

- an item the run indexed: saves its :class:`StoredAccess` row (after the index write: the
  same rule as item state) and records what changed in its lineage row;
- an item fetched but found unchanged (same text): its permissions were read all the same, so a
  change reaches the index here (``set_access``, no chunk rewritten) before its row is saved;
- an item discovery called unchanged (not fetched): nothing; it keeps its stored access, and the
  permission sync (:mod:`plugins.engine.permissions`) keeps that current;
- a deleted item: its row goes, after the index delete.

Every item whose permissions are unknown (unreadable, or over the entry cap) is private and
counted: ``acl_unknown`` in the run's counts and its reasons (so the run is ``partial`` and
alerted), by reason (``acl_unknown``, ``acl_over_cap``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from include.acl import AccessChange, AccessControl
from include.index import IndexBackend
from include.stores import ItemState, RunItem, StateStore
from include.stores.access import AccessStore, StoredAccess
from plugins.engine.records import ItemRecord

__all__ = [
    "AccessBook",
    "access_lineage",
    "annotate_lineage",
    "commit_access",
    "plan_access",
    "source_visibility",
    "who_can_see",
]

ENTRIES_SHOWN = 200  # the item page and its JSON list this many entries (and say how many more)


@dataclass(slots=True)
class AccessBook:
    """What one commit writes about permissions."""

    rows: list[StoredAccess] = field(default_factory=list)
    changes: dict[str, AccessChange] = field(default_factory=dict)  # item key -> its change this run
    index_updates: dict[str, tuple[str, ...]] = field(default_factory=dict)  # doc id -> entries
    unknown: Counter[str] = field(default_factory=Counter)  # unknown reason -> items

    @property
    def changed(self) -> int:
        return sum(1 for change in self.changes.values() if change.changed)


def _read(item: ItemRecord) -> AccessControl:
    # None: a manifest staged before fetch read permissions; unknown (private), never public
    return AccessControl.from_dict(item.access)


def plan_access(
    written: Iterable[ItemRecord],
    refetched: Iterable[ItemRecord],
    prior_states: Mapping[str, ItemState],
    stored: Mapping[str, StoredAccess],
    run_id: str,
) -> AccessBook:
    """The rows, index updates, lineage changes and unknown counts of one commit. ``written``:
    items the run indexed (``chunked.doc_id`` set); ``refetched``: unchanged items fetch read
    permissions for (``access`` set). Changes compare with the access before this run
    (:meth:`StoredAccess.before`), so a re-run of the commit records the same ones."""
    book = AccessBook()
    for item in written:
        if item.chunked is None:
            continue
        _add(book, item, item.chunked.doc_id, stored.get(item.item_key), run_id, in_index=True)
    for item in refetched:
        st = prior_states.get(item.item_key)
        if item.access is None or st is None:
            continue
        _add(book, item, st.doc_id, stored.get(item.item_key), run_id, in_index=False)
    return book


def _add(
    book: AccessBook, item: ItemRecord, doc_id: str, old: StoredAccess | None, run_id: str, *, in_index: bool
) -> None:
    access = _read(item)
    book.changes[item.item_key] = AccessChange.between(old.before(run_id) if old is not None else None, access)
    if not access.known:
        book.unknown[access.unknown_reason or "acl_unknown"] += 1
    current = old is not None and old.digest == access.digest()
    if not in_index and current:
        return  # same permissions as the index has: nothing to write
    if not in_index:
        book.index_updates[doc_id] = access.entries()
    book.rows.append(StoredAccess.of(item.item_key, doc_id, access, run_id))


def commit_access(
    book: AccessBook, sid: str, access_store: AccessStore, index_factory: Callable[[], IndexBackend]
) -> None:
    """Write a commit's permissions: the index first (unchanged items whose access changed),
    then the rows, so the stored digest never claims what the index does not hold."""
    if book.index_updates:
        index = index_factory()
        try:
            index.set_access(sid, book.index_updates)
        finally:
            index.close()
    access_store.save(sid, book.rows)


def access_lineage(change: AccessChange, access: AccessControl | None = None) -> dict[str, object]:
    """A lineage row's ``access``: the change, and why the access is unknown when it is."""
    row: dict[str, object] = change.to_dict()
    if access is not None:
        row["entries"] = len(access.entries())
        if access.unknown_reason:
            row["unknown_reason"] = access.unknown_reason
        if access.warning:
            row["warning"] = access.warning
    return row


def annotate_lineage(lineage: Iterable[RunItem], book: AccessBook, items: Mapping[str, ItemRecord]) -> None:
    """Put each item's access change on its lineage row of this run (new, changed, unchanged)."""
    for row in lineage:
        change = book.changes.get(row.item_key)
        if change is None or row.action not in ("new", "changed", "unchanged"):
            continue
        item = items.get(row.item_key)
        row.access = access_lineage(change, _read(item) if item is not None else None)


def who_can_see(store: StateStore, source: str, item_key: str) -> dict[str, object] | None:
    """What the item page shows of an item's permissions: its visibility, how many entries and
    which, why unknown; None: none stored (indexed before permissions were kept)."""
    stored = AccessStore(store).get(source, [item_key]).get(item_key)
    if stored is None:
        return None
    entries = stored.access.entries()
    return {
        "visibility": stored.visibility,
        "public": stored.access.public,
        "entry_count": len(entries),
        "entries": list(entries[:ENTRIES_SHOWN]),
        "unknown_reason": stored.access.unknown_reason,
        "warning": stored.access.warning,
        "digest": stored.digest,
        "run_id": stored.run_id,
        "updated_at": stored.updated_at.isoformat() if stored.updated_at else None,
    }


def source_visibility(store: StateStore, source: str) -> dict[str, object]:
    """The source page's counts of public / tenant / restricted / unknown documents and its
    last group sync (None: never)."""
    access = AccessStore(store)
    status = access.group_sync_status(source)
    if status is not None:
        status = {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in status.items()}
    return {"counts": access.visibility_counts(source), "group_sync": status}
