"""Read-only questions the audit pages ask of the state store that :class:`StateStore` has no
method for: a source's items filtered and paged, its totals, and which run removed a chunk.

Kept apart from ``state.py`` (the write path): these are queries over its tables, nothing more.
Chunk ids in the lineage's JSON lists are matched on their text (``"<id>"`` within the list),
which both SQLite and PostgreSQL can do without a JSON operator of their own.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from include.stores.state import StateStore, items_table, run_items_table, runs_table

__all__ = ["ItemFilter", "ItemPage", "SourceTotals", "browse_items", "chunk_events", "last_run", "source_totals"]


@dataclass(frozen=True, slots=True)
class ItemFilter:
    """What the item browser asks for; every field optional (None: no condition)."""

    action: str | None = None  # the item's action in the source's last run
    failing: bool = False  # a failure streak of at least one run
    quarantined_after: int | None = None  # a failure streak of at least this many runs
    parser: str | None = None
    changed_since: dt.datetime | None = None  # its indexed version was written at or after this
    key_contains: str | None = None


@dataclass(frozen=True, slots=True)
class ItemPage:
    rows: list[dict[str, Any]]
    total: int  # rows matching the filter, over every page
    offset: int
    limit: int


@dataclass(frozen=True, slots=True)
class SourceTotals:
    documents: int  # items with a version in the index
    chunks: int
    failing: int  # items whose last attempt failed
    quarantined: int  # items skipped until they change (failure streak >= quarantine_after)
    failing_keys: list[str]  # the failing items, first 10,000 (a re-sync's ``only_keys``)


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def last_run(store: StateStore, source: str, statuses: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """The source's most recent run (with one of ``statuses``, if given)."""
    q = sa.select(runs_table).where(runs_table.c.source == source).order_by(runs_table.c.started_at.desc()).limit(1)
    if statuses:
        q = q.where(runs_table.c.status.in_(statuses))
    with store.engine.connect() as conn:
        row = conn.execute(q).first()
        return dict(row._mapping) if row else None


def source_totals(store: StateStore, source: str, quarantine_after: int) -> SourceTotals:
    items = items_table.c
    with store.engine.connect() as conn:
        rows = conn.execute(
            sa.select(items.item_key, items.version, items.chunk_ids, items.failure_count, items.last_error).where(
                items.source == source
            )
        ).all()
    failing = sorted(r.item_key for r in rows if (r.failure_count or 0) > 0)
    return SourceTotals(
        documents=sum(1 for r in rows if r.version is not None),
        chunks=sum(len(r.chunk_ids or ()) for r in rows if r.version is not None),
        failing=len(failing),
        quarantined=sum(1 for r in rows if (r.failure_count or 0) >= quarantine_after),
        failing_keys=failing[:10_000],
    )


def _last_actions(conn: sa.Connection, source: str) -> tuple[str | None, dict[str, str]]:
    """The source's last finished run and each item's action in it."""
    run = conn.execute(
        sa.select(runs_table.c.run_id)
        .where(runs_table.c.source == source, runs_table.c.status != "running")
        .order_by(runs_table.c.started_at.desc())
        .limit(1)
    ).first()
    if run is None:
        return None, {}
    ri = run_items_table.c
    rows = conn.execute(sa.select(ri.item_key, ri.action).where(ri.source == source, ri.run_id == run.run_id))
    return run.run_id, {r.item_key: r.action for r in rows}


def browse_items(store: StateStore, source: str, where: ItemFilter, *, offset: int = 0, limit: int = 50) -> ItemPage:
    """The source's items in the index or failing, each with its last indexed lineage row's
    parser and time and its action in the source's last run; filtered, ordered by key, paged."""
    items, ri = items_table.c, run_items_table.c
    indexed_row = sa.and_(ri.source == items.source, ri.item_key == items.item_key, ri.run_id == items.last_indexed_run)
    q = (
        sa.select(
            items.item_key,
            items.title,
            items.url,
            items.version,
            items.chunk_ids,
            items.failure_count,
            items.last_error,
            items.last_error_reason,
            items.last_indexed_run,
            ri.parser,
            ri.recorded_at.label("indexed_at"),
        )
        .select_from(items_table.outerjoin(run_items_table, indexed_row))
        .where(items.source == source)
        .order_by(items.item_key)
    )
    if where.failing:
        q = q.where(items.failure_count > 0)
    if where.quarantined_after is not None:
        q = q.where(items.failure_count >= where.quarantined_after)
    if where.parser:
        q = q.where(ri.parser == where.parser)
    if where.changed_since is not None:
        q = q.where(ri.recorded_at >= where.changed_since)
    if where.key_contains:
        q = q.where(items.item_key.like(f"%{_like_escape(where.key_contains)}%", escape="\\"))
    with store.engine.connect() as conn:
        last_run_id, actions = _last_actions(conn, source)
        if where.action:
            keys = [k for k, a in actions.items() if a == where.action]
            q = q.where(items.item_key.in_(keys[:50_000]))
        total = conn.execute(sa.select(sa.func.count()).select_from(q.order_by(None).subquery())).scalar_one()
        rows = [dict(r._mapping) for r in conn.execute(q.offset(max(offset, 0)).limit(limit))]
    for row in rows:
        row["last_action"] = actions.get(row["item_key"])
        row["last_run"] = last_run_id
        row["chunks"] = len(row.pop("chunk_ids") or ())
    return ItemPage(rows=rows, total=total, offset=offset, limit=limit)


def chunk_events(store: StateStore, chunk_id: str, source: str | None = None) -> dict[str, dict[str, Any] | None]:
    """The lineage rows that last added and last removed a chunk (``{"added": row, "removed": row}``),
    each with its run's start and status, or None when no run did."""
    ri = run_items_table.c
    needle = f'%"{_like_escape(chunk_id)}"%'
    found: dict[str, dict[str, Any] | None] = {}
    with store.engine.connect() as conn:
        for name, column in (("added", ri.chunks_added), ("removed", ri.chunks_removed)):
            q = (
                sa.select(run_items_table, runs_table.c.started_at, runs_table.c.status.label("run_status"))
                .select_from(
                    run_items_table.join(
                        runs_table, sa.and_(runs_table.c.source == ri.source, runs_table.c.run_id == ri.run_id)
                    )
                )
                .where(sa.cast(column, sa.Text).like(needle, escape="\\"))
                .order_by(ri.recorded_at.desc())
                .limit(1)
            )
            if source:
                q = q.where(ri.source == source)
            row = conn.execute(q).first()
            found[name] = dict(row._mapping) if row else None
    return found
