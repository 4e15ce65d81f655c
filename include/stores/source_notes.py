"""What a connector learnt about its source and must not ask again every run (small JSON facts).

One row per (source id, name) in ``tributary_source_notes``, in the state database. A Feishu
source notes there that the export API refused ``slides``, so later runs skip slides without
asking again. Not for secrets (``credentials.py`` encrypts those) nor for item state.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa

from include.stores.credentials import store_engine

__all__ = ["SourceNotes"]

_meta = sa.MetaData()
notes_table = sa.Table(
    "tributary_source_notes",
    _meta,
    sa.Column("source", sa.String(200), primary_key=True),
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("value", sa.JSON, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)


class SourceNotes:
    """Get and put one source's notes (last writer wins: a note is a fact, not a counter)."""

    def __init__(self, url: str) -> None:
        self.engine = store_engine(url, _meta)

    def close(self) -> None:
        self.engine.dispose()

    def get(self, source: str, name: str) -> dict[str, Any] | None:
        table = notes_table
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(table.c.value).where(table.c.source == source, table.c.name == name)).first()
        return dict(row[0]) if row and isinstance(row[0], dict) else None

    def put(self, source: str, name: str, value: dict[str, Any]) -> None:
        table, now = notes_table, dt.datetime.now(dt.UTC)
        try:
            with self.engine.begin() as conn:
                match = (table.c.source == source, table.c.name == name)
                done = conn.execute(table.update().where(*match).values(value=value, updated_at=now))
                if done.rowcount == 0:
                    conn.execute(table.insert().values(source=source, name=name, value=value, updated_at=now))
        except sa.exc.IntegrityError:
            pass  # another process noted the same fact at the same moment: its row stands
