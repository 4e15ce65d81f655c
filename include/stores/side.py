"""The base of the stores that keep their tables beside the state store's (access, events,
subscriptions): same database, same engine, their own tables created once per process."""

from __future__ import annotations

import datetime as dt
from typing import ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from include.stores.schema import create_side_tables
from include.stores.state import StateStore

__all__ = ["SideStore", "aware", "utc_now"]


class SideStore:
    """Opened on a :class:`StateStore` (sharing its engine) or a URL (then it owns one)."""

    metadata: ClassVar[sa.MetaData]

    def __init__(self, state: StateStore | str) -> None:
        self._own: StateStore | None = None
        if isinstance(state, str):
            state = self._own = StateStore(state)
        self.state = state
        self.engine: Engine = state.engine
        create_side_tables(self.engine, self.metadata)

    def close(self) -> None:
        """Closes the state store only when this store opened it (from a URL)."""
        if self._own is not None:
            self._own.close()


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def aware(value: dt.datetime | None) -> dt.datetime | None:
    """SQLite hands timezone-aware columns back naive (in UTC, as written)."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=dt.UTC)
