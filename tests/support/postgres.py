"""Throw-away databases on the test PostgreSQL server (127.0.0.1:5432, trust auth)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

__all__ = ["PG_ADMIN_URL", "scratch_database"]

PG_ADMIN_URL = os.environ.get("TEST_PG_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")


@contextmanager
def scratch_database(prefix: str) -> Iterator[str]:
    """A new database on the test PostgreSQL server (its URL), dropped with its sessions after."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(
                sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"), {"n": name}
            )
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()
