"""Secrets that rotate (an OAuth refresh chain), kept encrypted in the state database.

A single-use refresh token must outlive the process that received it, and two processes must
never spend the same one. Each secret is one row of ``tributary_credentials``: ``scope`` (a
name the caller chooses, never the secret itself) and ``ciphertext``, a Fernet token
(``cryptography``; AES-128-CBC + HMAC-SHA256) of the JSON value. A change happens inside
:meth:`CredentialStore.locked`, which holds the row lock for the whole read-refresh-write:
PostgreSQL ``SELECT ... FOR UPDATE`` on the row, SQLite ``BEGIN IMMEDIATE`` (the file's one
writer lock). The new value is committed when the block ends, before the caller uses it.

The key is a Fernet key (32 url-safe base64 bytes, ``Fernet.generate_key()``); several keys
separated by commas are a rotation (``MultiFernet``: encrypt with the first, decrypt with any),
the form of Airflow's ``[core] fernet_key``. :func:`secret_key_from_env` reads
``TRIBUTARY_SECRET_KEY``, else ``AIRFLOW__CORE__FERNET_KEY``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from sqlalchemy.dialects.postgresql import insert as pg_insert

__all__ = ["CredentialStore", "CredentialStoreError", "LockedSecret", "secret_key_from_env", "store_engine"]

KEY_VARIABLES = ("TRIBUTARY_SECRET_KEY", "AIRFLOW__CORE__FERNET_KEY")

_meta = sa.MetaData()
credentials_table = sa.Table(
    "tributary_credentials",
    _meta,
    sa.Column("scope", sa.String(250), primary_key=True),
    sa.Column("ciphertext", sa.Text, nullable=True),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)


class CredentialStoreError(Exception):
    """The store cannot keep or read a secret: no usable key, or a row another key encrypted."""


def secret_key_from_env() -> str | None:
    """The first of ``TRIBUTARY_SECRET_KEY`` and ``AIRFLOW__CORE__FERNET_KEY`` that is set."""
    own, airflows = os.environ.get("TRIBUTARY_SECRET_KEY", ""), os.environ.get("AIRFLOW__CORE__FERNET_KEY", "")
    return own.strip() or airflows.strip() or None


def store_engine(url: str, metadata: sa.MetaData) -> sa.Engine:
    """An engine on the state database with ``metadata``'s tables created. SQLite waits up to a
    minute for the writer lock instead of failing at once: another process may hold it."""
    kwargs: dict[str, Any] = {"future": True}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 60}
    engine = sa.create_engine(url, **kwargs)
    try:
        metadata.create_all(engine)
    except sa.exc.DBAPIError:  # another process created a table between the check and the create
        metadata.create_all(engine)
    return engine


def _cipher(key: str) -> MultiFernet:
    try:
        return MultiFernet([Fernet(part.strip().encode()) for part in key.split(",") if part.strip()])
    except (ValueError, TypeError) as exc:  # also an empty list
        raise CredentialStoreError(
            "the secret key is not a Fernet key (32 url-safe base64-encoded bytes, e.g. from "
            "cryptography.fernet.Fernet.generate_key())"
        ) from exc


@dataclass(slots=True)
class LockedSecret:
    """One secret while its row is locked: ``value`` as read; :meth:`put` replaces it at commit."""

    scope: str
    value: dict[str, Any] | None
    _new: dict[str, Any] | None = None

    def put(self, value: dict[str, Any]) -> None:
        self._new = value


class CredentialStore:
    """Encrypted secrets in the state database (the same URL as :class:`StateStore`)."""

    def __init__(self, url: str, key: str) -> None:
        self._cipher = _cipher(key)
        self.engine = store_engine(url, _meta)
        self._sqlite = self.engine.dialect.name == "sqlite"

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def locked(self, scope: str) -> Iterator[LockedSecret]:
        """The secret of ``scope`` under its row lock; what :meth:`LockedSecret.put` set is
        encrypted and committed when the block ends (nothing is written if it raises)."""
        with self.engine.connect() as conn:
            table = credentials_table
            if self._sqlite:
                conn.exec_driver_sql("BEGIN IMMEDIATE")  # the database's write lock, taken now
                row = conn.execute(sa.select(table.c.ciphertext).where(table.c.scope == scope)).first()
            else:
                conn.execute(self._insert_missing(scope))
                query = sa.select(table.c.ciphertext).where(table.c.scope == scope).with_for_update()
                row = conn.execute(query).first()
            secret = LockedSecret(scope, self._decrypt(row[0]) if row and row[0] else None)
            try:
                yield secret
            except BaseException:
                conn.rollback()
                raise
            if secret._new is not None:
                self._write(conn, scope, secret._new)
            conn.commit()

    def read(self, scope: str) -> dict[str, Any] | None:
        """The secret of ``scope`` without locking (a reader that only needs a recent value)."""
        with self.engine.connect() as conn:
            table = credentials_table
            row = conn.execute(sa.select(table.c.ciphertext).where(table.c.scope == scope)).first()
        return self._decrypt(row[0]) if row and row[0] else None

    @staticmethod
    def _insert_missing(scope: str) -> sa.Insert:
        """An empty row to lock: ``FOR UPDATE`` locks rows, and a first refresh has none yet."""
        row = {"scope": scope, "ciphertext": None, "updated_at": _now()}
        return pg_insert(credentials_table).values(row).on_conflict_do_nothing(index_elements=["scope"])

    def _write(self, conn: sa.Connection, scope: str, value: dict[str, Any]) -> None:
        table = credentials_table
        row = {"ciphertext": self._cipher.encrypt(json.dumps(value).encode()).decode(), "updated_at": _now()}
        done = conn.execute(table.update().where(table.c.scope == scope).values(row))
        if done.rowcount == 0:
            conn.execute(table.insert().values(scope=scope, **row))

    def _decrypt(self, ciphertext: str) -> dict[str, Any]:
        try:
            value = json.loads(self._cipher.decrypt(ciphertext.encode()))
        except InvalidToken as exc:
            raise CredentialStoreError(
                "a stored secret does not decrypt with the configured key (was the key changed? "
                "list the old key after the new one, comma-separated)"
            ) from exc
        if not isinstance(value, dict):
            raise CredentialStoreError("a stored secret is not a JSON object")
        return value


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
