"""Staging in the state database, for deployments that have no shared disk and no object store.

``TRIBUTARY_STAGING_URL=db:///staging`` puts the staging area in the table ``tributary_staging``
of the database ``TRIBUTARY_STATE_URL`` names (PostgreSQL for several hosts; a SQLite state file
works on one host and is what the cheap tests use). A location is ``db:///<root>/<dag>/<run>/<name>``;
the row's key is its path part (``/<root>/<dag>/<run>/<name>``), so ``posixpath`` joins and
splits it like any other location.

Size: one staged object is one ``bytea``/BLOB value. PostgreSQL caps a value at 1 GB, and
psycopg2 sends bytes hex-escaped (twice their size) inside a statement, which the server also
caps at 1 GB; so objects over :data:`MAX_OBJECT_BYTES` (256 MiB) are refused with
:class:`StagingTooLargeError` before anything is sent. Stage files that large in object
storage instead. Rows of a run are removed by the run's cleanup, as files are.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator
from functools import cache

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from include.settings import get_settings
from include.staging import StagingTooLargeError
from include.stores import open_state_store

__all__ = ["MAX_OBJECT_BYTES", "DatabaseBackend", "StagingTooLargeError"]

MAX_OBJECT_BYTES = 256 * 1024 * 1024
_SCHEME = "db://"
# pg_advisory_xact_lock key of this table's creation (the state tables use their own)
_SCHEMA_LOCK_KEY = 0x54524253  # "TRBS"

_meta = sa.MetaData()
staging_table = sa.Table(
    "tributary_staging",
    _meta,
    sa.Column("location", sa.String(2048), primary_key=True),
    sa.Column("data", sa.LargeBinary, nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("written_at", sa.DateTime(timezone=True), nullable=False),
)


def _key(location: str) -> str:
    if not location.startswith(_SCHEME + "/"):
        raise ValueError(f"not a database staging location (db:///<path>): {location!r}")
    return location[len(_SCHEME) :].rstrip("/")


@cache
def _engine(url: str) -> Engine:
    """The state store's engine (its pool, SQLite pragmas and timeouts), with the staging table."""
    engine = open_state_store(url).engine
    _create_table(engine)
    return engine


def _forget_parent_connections() -> None:
    # a forked child (the engine's parse workers) must not talk on its parent's pooled
    # connections; dispose(close=False) gives it a fresh pool and leaves the parent's sockets be
    for url in list(_ENGINES):
        _engine(url).dispose(close=False)


_ENGINES: set[str] = set()
os.register_at_fork(after_in_child=_forget_parent_connections)


def _create_table(engine: Engine) -> None:
    # several tasks of a fresh deployment start together: create under a lock (PostgreSQL) or
    # the SQLite write lock, and accept a table another process created meanwhile
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})
        _meta.create_all(conn, checkfirst=True)


def _under(prefix_key: str) -> sa.ColumnElement[bool]:
    """Rows below the directory ``prefix_key``: compared exactly (``substr``), since LIKE would
    need its wildcards escaped and is case-insensitive on SQLite, and a range comparison
    follows PostgreSQL's collation, which need not order bytes."""
    top = prefix_key + "/"
    return sa.func.substr(staging_table.c.location, 1, len(top)) == top


class DatabaseBackend:
    """:class:`~include.staging.locations.StagingBackend` over the state database."""

    def __init__(self, url: str | None = None) -> None:
        self._url = url  # None: the state database configured when a call is made

    @property
    def max_object_bytes(self) -> int:
        """The cap per object (the packed stage files are split into parts below it)."""
        return MAX_OBJECT_BYTES

    @property
    def engine(self) -> Engine:
        url = self._url or get_settings().state_url
        _ENGINES.add(url)
        return _engine(url)

    def write(self, location: str, data: bytes) -> None:
        key = _key(location)
        if len(data) > MAX_OBJECT_BYTES:
            raise StagingTooLargeError(
                f"{location}: {len(data)} bytes, over the database staging cap of {MAX_OBJECT_BYTES}"
                " (stage in object storage: TRIBUTARY_STAGING_URL=s3://...)"
            )
        engine = self.engine
        values = {"location": key, "data": data, "size": len(data), "written_at": dt.datetime.now(dt.UTC)}
        dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
        stmt = dialect.insert(staging_table).values(**values)
        stmt = stmt.on_conflict_do_update(
            index_elements=[staging_table.c.location],
            set_={"data": stmt.excluded.data, "size": stmt.excluded.size, "written_at": stmt.excluded.written_at},
        )
        with engine.begin() as conn:  # one statement, one transaction: the old row or the new
            conn.execute(stmt)

    def read(self, location: str) -> bytes:
        query = sa.select(staging_table.c.data).where(staging_table.c.location == _key(location))
        with self.engine.connect() as conn:
            data = conn.execute(query).scalar_one_or_none()
        if data is None:
            raise FileNotFoundError(location)
        return bytes(data)

    def size(self, location: str) -> int | None:
        query = sa.select(staging_table.c.size).where(staging_table.c.location == _key(location))
        with self.engine.connect() as conn:
            size = conn.execute(query).scalar_one_or_none()
        return None if size is None else int(size)

    def walk(self, prefix: str) -> Iterator[tuple[str, int]]:
        query = (
            sa.select(staging_table.c.location, staging_table.c.size)
            .where(_under(_key(prefix)))
            .order_by(staging_table.c.location)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        for key, size in rows:
            yield _SCHEME + key, int(size)

    def remove(self, prefix: str, keep: str | None = None) -> None:
        root = _key(prefix)
        condition = _under(root)
        if keep:
            condition = condition & ~_under(f"{root}/{keep}")
        with self.engine.begin() as conn:
            conn.execute(sa.delete(staging_table).where(condition))
