"""Creating the stores' tables in the state database, one process at a time.

Every store that keeps its rows in the state database (state and lineage, access, events)
creates its tables through :func:`create_tables`, so they all take the same lock.
"""

from __future__ import annotations

import fcntl
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Engine

__all__ = ["create_side_tables", "create_tables"]

# Any constant both processes agree on: the key of PostgreSQL's advisory lock for schema changes.
_SCHEMA_LOCK_KEY = 0x7472696275746172  # "tributar"

# (engine -> ids of the metadata already created on it): a store opened many times in one
# process (every task opens its stores) checks the schema once
_READY: weakref.WeakKeyDictionary[Engine, set[int]] = weakref.WeakKeyDictionary()


def create_tables(engine: Engine, meta: sa.MetaData, *, add_columns: bool = False, attempts: int = 3) -> None:
    """Create ``meta``'s missing tables (and, with ``add_columns``, missing nullable columns).

    ``create_all`` checks, then creates: the first tasks of several DAGs on a fresh database
    (they start together) each see a table missing, and all but one fail with "already exists";
    a retry alone is no cure (with three processes the next attempt loses on the next table,
    seen in CI). So the check-and-create runs under a lock: PostgreSQL's transaction-scoped
    advisory lock, with the DDL in the same transaction; for a SQLite file, an exclusive
    ``flock`` on a file beside it. A process that takes no lock (an older release) can still
    race us: then checking again finds its tables.
    """
    for attempt in range(attempts):
        try:
            _create_locked(engine, meta, add_columns)
            return
        except sa.exc.DBAPIError:
            if attempt == attempts - 1:
                raise


def create_side_tables(engine: Engine, meta: sa.MetaData) -> None:
    """:func:`create_tables` for a store sharing the state store's engine, once per process."""
    done = _READY.setdefault(engine, set())
    if id(meta) not in done:
        create_tables(engine, meta)
        done.add(id(meta))


def _create_locked(engine: Engine, meta: sa.MetaData, add_columns: bool) -> None:
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})
            meta.create_all(conn)
            if add_columns:
                _add_missing_columns(conn, meta)
        return
    with _sqlite_schema_lock(engine.url.database), engine.begin() as conn:
        meta.create_all(conn)
        if add_columns:
            _add_missing_columns(conn, meta)


@contextmanager
def _sqlite_schema_lock(database: str | None) -> Iterator[None]:
    if not database or database == ":memory:" or database.startswith("file:"):
        yield  # a private in-memory database (or a URI we do not parse): no other process shares it
        return
    with open(f"{database}.schema-lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _add_missing_columns(conn: sa.Connection, meta: sa.MetaData) -> None:
    """Add columns a newer version defines to tables an older one created (``create_all`` only
    creates missing tables). Only nullable columns are added, so existing rows stay valid."""
    inspector = sa.inspect(conn)
    for table in meta.sorted_tables:
        present = {c["name"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name in present or not column.nullable:
                continue
            kind = column.type.compile(dialect=conn.dialect)
            conn.execute(sa.text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}'))
