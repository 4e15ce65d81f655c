"""State store and run log, through SQLAlchemy Core (SQLite file by default, PostgreSQL by URL).

Tables
- ``tributary_items``: one row per (source, item): the version evidence and content hash of
  what is *in the index*, the processing hash it was built with and what it went through
  (``processed_with``: parser name/version/engine, chunker name/version, embedding model), its
  chunk ids, when it was last seen, how many complete listings in a row missed it, and its
  failure streak.
- ``tributary_runs``: one row per sync run: status, params, counts, timings, and who runs it
  (``owner``: host and process of an in-process run; ``heartbeat_at``), which the reaper
  (``plugins.engine.reaper``) reads to tell a live run from a killed one.
- ``tributary_run_items``: item-level lineage, one row per (run, item): action and reason,
  versions before/after, hash, sizes, parser/chunker, chunk ids added/kept/removed, stage
  timings, error; for an embedded item the model and, per chunk, whether its vector was computed
  this run or reused from the index (and which chunks the model truncated), and what happened
  to its permissions (``access``: the ``AccessChange``). Re-running a task
  rewrites its rows (primary key), never duplicates them.

Everything written here is written by the *commit* stage, after the index write succeeded.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from include.contract import VersionEvidence
from include.stores.schema import create_tables

__all__ = ["ItemState", "RunItem", "StateStore"]

_T = TypeVar("_T")

_meta = sa.MetaData()

items_table = sa.Table(
    "tributary_items",
    _meta,
    sa.Column("source", sa.String(200), primary_key=True),
    sa.Column("item_key", sa.String(2048), primary_key=True),
    sa.Column("doc_id", sa.String(64), nullable=False),
    sa.Column("version", sa.JSON, nullable=True),
    sa.Column("content_hash", sa.String(64)),
    sa.Column("processing_hash", sa.String(64)),
    sa.Column("chunk_ids", sa.JSON, nullable=False, default=list),
    sa.Column("title", sa.Text),
    sa.Column("url", sa.Text),
    sa.Column("last_seen_run", sa.String(250)),
    sa.Column("last_indexed_run", sa.String(250)),
    sa.Column("missing_runs", sa.Integer, nullable=False, default=0),
    sa.Column("failure_count", sa.Integer, nullable=False, default=0),
    sa.Column("last_failure_run", sa.String(250)),
    sa.Column("last_error", sa.Text),
    sa.Column("last_error_reason", sa.String(100)),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    # issue 36: {"parser": {name, version, engine}, "chunker": {name, version}, "embedding":
    # {model, dimensions}, "options": hash}; None: stored before it was recorded (see _add_missing_columns)
    sa.Column("processed_with", sa.JSON, nullable=True),
)

runs_table = sa.Table(
    "tributary_runs",
    _meta,
    # Airflow run ids are unique only within a DAG (two DAGs on one schedule share
    # "scheduled__<date>"), so a run is identified by (source, run_id).
    sa.Column("source", sa.String(200), primary_key=True),
    sa.Column("run_id", sa.String(250), primary_key=True),
    sa.Column("dag_id", sa.String(250)),
    sa.Column("run_type", sa.String(50)),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("params", sa.JSON),
    sa.Column("counts", sa.JSON),
    sa.Column("window_start", sa.DateTime(timezone=True)),
    sa.Column("window_end", sa.DateTime(timezone=True)),
    sa.Column("index_backend", sa.String(50)),
    sa.Column("index_name", sa.String(200)),
    sa.Column("error", sa.Text),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("ended_at", sa.DateTime(timezone=True)),
    sa.Column("owner", sa.JSON),
    sa.Column("heartbeat_at", sa.DateTime(timezone=True)),
)

run_items_table = sa.Table(
    "tributary_run_items",
    _meta,
    sa.Column("source", sa.String(200), primary_key=True),
    sa.Column("run_id", sa.String(250), primary_key=True),
    sa.Column("item_key", sa.String(2048), primary_key=True),
    sa.Column("doc_id", sa.String(64)),
    sa.Column("action", sa.String(20), nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("version_before", sa.JSON),
    sa.Column("version_after", sa.JSON),
    sa.Column("content_hash", sa.String(64)),
    sa.Column("byte_size", sa.Integer),
    sa.Column("staged_path", sa.Text),
    sa.Column("parser", sa.String(100)),
    sa.Column("parser_version", sa.String(50)),
    sa.Column("blocks", sa.Integer),
    sa.Column("chars", sa.Integer),
    sa.Column("chunker", sa.String(100)),
    sa.Column("chunker_options_hash", sa.String(64)),
    sa.Column("chunks_added", sa.JSON),
    sa.Column("chunks_kept", sa.JSON),
    sa.Column("chunks_removed", sa.JSON),
    sa.Column("stage_ms", sa.JSON),
    sa.Column("error", sa.Text),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
    # the parser's warnings (needs_ocr, truncated ...); added to older DBs by _add_missing_columns
    sa.Column("warnings", sa.JSON),
    # embedding (issue 22): the model, chunk ids whose vector was computed / reused, truncations
    sa.Column("embedding_model", sa.String(200)),
    sa.Column("chunks_embedded", sa.JSON),
    sa.Column("chunks_vector_reused", sa.JSON),
    sa.Column("chunks_truncated", sa.JSON),
    # issue 23: the parser engine a source chose for the item's format (a PDF: auto, text or ocr)
    sa.Column("parser_engine", sa.String(50)),
    # issue 35: the item's permissions this run (include.acl.AccessChange.to_dict(): digests
    # before/after, entries added/removed, public flag, visibility); None: not read this run
    sa.Column("access", sa.JSON),
)
sa.Index("run_items_source_key", run_items_table.c.source, run_items_table.c.item_key)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(slots=True)
class ItemState:
    source: str
    item_key: str
    doc_id: str
    version: VersionEvidence | None
    content_hash: str | None
    processing_hash: str | None
    chunk_ids: list[str]
    title: str | None = None
    url: str | None = None
    last_seen_run: str | None = None
    last_indexed_run: str | None = None
    missing_runs: int = 0
    failure_count: int = 0
    last_failure_run: str | None = None
    last_error: str | None = None
    last_error_reason: str | None = None
    # what the indexed version went through (plugins.engine.processed); None: not recorded
    processed_with: dict[str, Any] | None = None

    @property
    def indexed(self) -> bool:
        """True when a version of this item is in the index (a never-indexed failure is not)."""
        return self.version is not None


@dataclass(slots=True)
class RunItem:
    """One lineage row; ``action`` is new|changed|unchanged|deleted|failed|skipped."""

    item_key: str
    action: str
    doc_id: str | None = None
    reason: str | None = None
    version_before: dict[str, Any] | None = None
    version_after: dict[str, Any] | None = None
    content_hash: str | None = None
    byte_size: int | None = None
    staged_path: str | None = None
    parser: str | None = None
    parser_version: str | None = None
    blocks: int | None = None
    chars: int | None = None
    chunker: str | None = None
    chunker_options_hash: str | None = None
    chunks_added: list[str] = field(default_factory=list)
    chunks_kept: list[str] = field(default_factory=list)
    chunks_removed: list[str] = field(default_factory=list)
    stage_ms: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    warnings: dict[str, Any] | None = None
    embedding_model: str | None = None
    chunks_embedded: list[str] = field(default_factory=list)
    chunks_vector_reused: list[str] = field(default_factory=list)
    # [{"chunk_id", "tokens", "kept"}]: chunks longer than the model takes, as the model cut them
    chunks_truncated: list[dict[str, Any]] = field(default_factory=list)
    parser_engine: str | None = None
    access: dict[str, Any] | None = None  # the AccessChange of a run that read the item's permissions


class StateStore:
    """State and lineage for all sources. Thread-safe through SQLAlchemy's pool."""

    def __init__(self, url: str) -> None:
        kwargs: dict[str, Any] = {"future": True}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"timeout": 60}
        self.engine: Engine = sa.create_engine(url, **kwargs)
        if url.startswith("sqlite"):
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        create_tables(self.engine, _meta, add_columns=True)

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------------------- items
    def items(self, source: str) -> dict[str, ItemState]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(items_table).where(items_table.c.source == source))
            return {r.item_key: _item(r) for r in rows}

    def get_item(self, source: str, item_key: str) -> ItemState | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(items_table).where(items_table.c.source == source, items_table.c.item_key == item_key)
            ).first()
            return _item(row) if row else None

    def find_by_doc_id(self, doc_id: str) -> ItemState | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(items_table).where(items_table.c.doc_id == doc_id)).first()
            return _item(row) if row else None

    def save_items(self, states: Iterable[ItemState]) -> None:
        """Insert or replace item rows (idempotent: re-running a commit writes the same rows).

        Written in bulk: one lookup of the existing keys per 500 rows, then one executemany of
        updates and one of inserts, instead of two statements per item."""
        now = _now()
        rows = {
            (st.source, st.item_key): {
                "source": st.source,
                "item_key": st.item_key,
                "doc_id": st.doc_id,
                "version": st.version.to_dict() if st.version else None,
                "content_hash": st.content_hash,
                "processing_hash": st.processing_hash,
                "chunk_ids": list(st.chunk_ids),
                "title": st.title,
                "url": st.url,
                "last_seen_run": st.last_seen_run,
                "last_indexed_run": st.last_indexed_run,
                "missing_runs": st.missing_runs,
                "failure_count": st.failure_count,
                "last_failure_run": st.last_failure_run,
                "last_error": st.last_error,
                "last_error_reason": st.last_error_reason,
                "processed_with": st.processed_with,
                "updated_at": now,
            }
            for st in states  # the last state of a key wins, as when each replaced the one before
        }
        with self.engine.begin() as conn:
            _upsert_rows(conn, items_table, ("source", "item_key"), list(rows.values()))

    def rename_items(self, source: str, renames: Mapping[str, str]) -> None:
        """Move item rows to new keys (old -> new), keeping every other column (doc id included).

        Idempotent: a row already moved, or a new key that already has a row, is left alone."""
        if not renames:
            return
        with self.engine.begin() as conn:
            for old, new in renames.items():
                key = (items_table.c.source == source) & (items_table.c.item_key == new)
                exists = conn.execute(sa.select(items_table.c.item_key).where(key)).first()
                if exists is None:
                    conn.execute(
                        items_table.update()
                        .where(items_table.c.source == source, items_table.c.item_key == old)
                        .values(item_key=new, updated_at=_now())
                    )

    def delete_items(self, source: str, item_keys: Iterable[str]) -> None:
        keys = list(item_keys)
        if not keys:
            return
        with self.engine.begin() as conn:
            for chunk in _batched(keys, 500):
                conn.execute(
                    items_table.delete().where(items_table.c.source == source, items_table.c.item_key.in_(chunk))
                )

    # ------------------------------------------------------------------------------- runs
    def start_run(
        self,
        run_id: str,
        source: str,
        *,
        dag_id: str | None = None,
        run_type: str | None = None,
        params: Mapping[str, Any] | None = None,
        window: tuple[dt.datetime | None, dt.datetime | None] = (None, None),
        index_backend: str | None = None,
        index_name: str | None = None,
        owner: Mapping[str, Any] | None = None,
    ) -> None:
        values = {
            "source": source,
            "dag_id": dag_id,
            "run_type": run_type,
            "status": "running",
            "params": dict(params or {}),
            "counts": {},
            "window_start": window[0],
            "window_end": window[1],
            "index_backend": index_backend,
            "index_name": index_name,
            "error": None,
            "ended_at": None,
            "owner": dict(owner) if owner else None,
            "heartbeat_at": _now(),
        }
        with self.engine.begin() as conn:
            key = (runs_table.c.run_id == run_id) & (runs_table.c.source == source)
            if not conn.execute(runs_table.update().where(key).values(**values)).rowcount:
                conn.execute(runs_table.insert().values(run_id=run_id, started_at=_now(), **values))

    def finish_run(
        self, run_id: str, status: str, counts: Mapping[str, Any], error: str | None = None, *, source: str
    ) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                runs_table.update()
                .where(runs_table.c.run_id == run_id, runs_table.c.source == source)
                .values(status=status, counts=dict(counts), error=error, ended_at=_now())
            )

    def heartbeat(self, run_id: str, source: str) -> None:
        """An in-process run is still alive (the reaper's rule for a run on another host)."""
        with self.engine.begin() as conn:
            conn.execute(
                runs_table.update()
                .where(runs_table.c.run_id == run_id, runs_table.c.source == source)
                .values(heartbeat_at=_now())
            )

    def running_runs(self, source: str | None = None) -> list[dict[str, Any]]:
        """Runs the run log still shows as running (all sources, or one)."""
        q = sa.select(runs_table).where(runs_table.c.status == "running").order_by(runs_table.c.started_at)
        if source:
            q = q.where(runs_table.c.source == source)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def failed_runs(self, source: str, ended_before: dt.datetime) -> list[dict[str, Any]]:
        """Failed runs of ``source`` that ended before the given time (oldest first)."""
        q = (
            sa.select(runs_table.c.run_id, runs_table.c.dag_id, runs_table.c.ended_at)
            .where(runs_table.c.source == source, runs_table.c.status == "failed")
            .where(runs_table.c.ended_at < ended_before)
            .order_by(runs_table.c.ended_at)
        )
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def mark_failed_if_running(self, run_id: str, source: str, error: str) -> bool:
        """Close a run the reaper found dead; False when it left "running" meanwhile (it finished,
        or its discover was retried and is running again elsewhere: then the row is not ours)."""
        with self.engine.begin() as conn:
            done = conn.execute(
                runs_table.update()
                .where(runs_table.c.run_id == run_id, runs_table.c.source == source, runs_table.c.status == "running")
                .values(status="failed", error=error[:2000], ended_at=_now())
            )
            return bool(done.rowcount)

    def prune_history(self, source: str, older_than: dt.datetime, keep_last: int) -> tuple[int, int]:
        """Delete finished runs of ``source`` started before ``older_than``, and their lineage rows,
        except the ``keep_last`` most recent runs. Returns (runs deleted, lineage rows deleted)."""
        recent = (
            sa.select(runs_table.c.run_id)
            .where(runs_table.c.source == source)
            .order_by(runs_table.c.started_at.desc())
            .limit(max(keep_last, 0))
        )
        with self.engine.begin() as conn:
            keep = {r.run_id for r in conn.execute(recent)}
            old = conn.execute(
                sa.select(runs_table.c.run_id).where(
                    runs_table.c.source == source,
                    runs_table.c.started_at < older_than,
                    runs_table.c.status != "running",  # the reaper closes those first
                )
            )
            doomed = [r.run_id for r in old if r.run_id not in keep]
            rows = 0
            for chunk in _batched(doomed, 500):
                rows += conn.execute(
                    run_items_table.delete().where(
                        run_items_table.c.source == source, run_items_table.c.run_id.in_(chunk)
                    )
                ).rowcount
                conn.execute(runs_table.delete().where(runs_table.c.source == source, runs_table.c.run_id.in_(chunk)))
        return len(doomed), rows

    def get_run(self, run_id: str, source: str | None = None) -> dict[str, Any] | None:
        """One run; without ``source`` the most recent run of any source with that id."""
        q = sa.select(runs_table).where(runs_table.c.run_id == run_id).order_by(runs_table.c.started_at.desc())
        if source:
            q = q.where(runs_table.c.source == source)
        with self.engine.connect() as conn:
            row = conn.execute(q).first()
            return dict(row._mapping) if row else None

    def runs(self, source: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        q = sa.select(runs_table).order_by(runs_table.c.started_at.desc()).limit(limit)
        if source:
            q = q.where(runs_table.c.source == source)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def record_run_items(self, run_id: str, source: str, items: Iterable[RunItem]) -> None:
        """One lineage row per item of the run, inserted or replaced in bulk (see save_items)."""
        now = _now()
        names = [f for f in RunItem.__dataclass_fields__ if f != "item_key"]
        rows = {
            it.item_key: {
                **{f: getattr(it, f) for f in names},
                "source": source,
                "run_id": run_id,
                "item_key": it.item_key,
                "recorded_at": now,
            }
            for it in items
        }
        with self.engine.begin() as conn:
            _upsert_rows(conn, run_items_table, ("source", "run_id", "item_key"), list(rows.values()))

    def run_items(self, run_id: str, action: str | None = None, source: str | None = None) -> list[dict[str, Any]]:
        """Lineage rows of a run; without ``source``, of the most recent run with that id."""
        source = source or (self.get_run(run_id) or {}).get("source")
        q = (
            sa.select(run_items_table)
            .where(run_items_table.c.run_id == run_id, run_items_table.c.source == source)
            .order_by(run_items_table.c.item_key)
        )
        if action:
            q = q.where(run_items_table.c.action == action)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def item_history(self, source: str, item_key: str) -> list[dict[str, Any]]:
        q = (
            sa.select(run_items_table)
            .where(run_items_table.c.source == source, run_items_table.c.item_key == item_key)
            .order_by(run_items_table.c.recorded_at)
        )
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]


def _item(row: Any) -> ItemState:
    return ItemState(
        source=row.source,
        item_key=row.item_key,
        doc_id=row.doc_id,
        version=VersionEvidence.from_dict(row.version) if row.version is not None else None,
        content_hash=row.content_hash,
        processing_hash=row.processing_hash,
        chunk_ids=list(row.chunk_ids or []),
        title=row.title,
        url=row.url,
        last_seen_run=row.last_seen_run,
        last_indexed_run=row.last_indexed_run,
        missing_runs=row.missing_runs or 0,
        failure_count=row.failure_count or 0,
        last_failure_run=row.last_failure_run,
        last_error=row.last_error,
        last_error_reason=row.last_error_reason,
        processed_with=row.processed_with,
    )


def _batched(seq: list[_T], size: int) -> Iterator[list[_T]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


def _existing_keys(
    conn: sa.Connection, table: sa.Table, key: tuple[str, ...], rows: list[dict[str, Any]]
) -> set[tuple[Any, ...]]:
    """Which of ``rows``' primary keys the table holds: the leading key columns are equal across
    the rows of one call (one source, one run), the last one is looked up with IN."""
    *fixed, last = key
    found: set[tuple[Any, ...]] = set()
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for row in rows:
        groups.setdefault(tuple(row[c] for c in fixed), []).append(row[last])
    for prefix, values in groups.items():
        where = [table.c[c] == v for c, v in zip(fixed, prefix, strict=True)]
        for part in _batched(values, 500):
            query = sa.select(table.c[last]).where(*where, table.c[last].in_(part))
            found.update((*prefix, value) for (value,) in conn.execute(query))
    return found


def _upsert_rows(conn: sa.Connection, table: sa.Table, key: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
    """Insert rows whose key is new and update the others, each kind as one executemany (a
    portable upsert: the same statements on SQLite and PostgreSQL)."""
    if not rows:
        return
    existing = _existing_keys(conn, table, key, rows)
    old = [r for r in rows if tuple(r[c] for c in key) in existing]
    new = [r for r in rows if tuple(r[c] for c in key) not in existing]
    if old:
        # bound names differ from column names: SQLAlchemy reserves a column's name for SET
        match = [table.c[c] == sa.bindparam(f"k_{c}") for c in key]
        columns: dict[str, Any] = {c: sa.bindparam(c) for c in old[0] if c not in key}
        params = [{**{f"k_{c}": r[c] for c in key}, **{c: r[c] for c in columns}} for r in old]
        conn.execute(table.update().where(*match).values(columns), params)
    if new:
        conn.execute(table.insert(), new)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=60000")
    cur.close()
