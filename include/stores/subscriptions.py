"""Event subscriptions a source holds at its service (Feishu's per-file and per-folder ones).

Feishu pushes a document's drive events only to apps that subscribed that document
(``POST /drive/v1/files/:token/subscribe``), and a folder's creations only to apps that
subscribed the folder. A sync keeps those subscriptions in step with its index; this table is
what it believes it holds, so that a run sends requests only for the difference (files new to
the index, files gone from it, subscriptions due for a re-check) and never one per file per run.

One row per (source, token): the file type the subscription was made with, whether it is a
file or a folder one, when it was made and last confirmed, and a failure streak (a file the app
may not subscribe, e.g. one it does not own, is retried only after the re-check interval, not on
every run). In the state database, beside the event tables.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa

from include.stores.side import SideStore
from include.stores.side import aware as _aware
from include.stores.side import utc_now as _now

__all__ = ["Subscription", "SubscriptionStore"]

_meta = sa.MetaData()

subscriptions_table = sa.Table(
    "tributary_subscriptions",
    _meta,
    sa.Column("source", sa.String(200), primary_key=True),
    sa.Column("token", sa.String(200), primary_key=True),
    sa.Column("file_type", sa.String(40), nullable=False),
    sa.Column("scope", sa.String(20), nullable=False),  # file | folder
    sa.Column("active", sa.Boolean, nullable=False),  # False: the last attempt failed
    sa.Column("subscribed_at", sa.DateTime(timezone=True)),
    sa.Column("checked_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("failures", sa.Integer, nullable=False, default=0),
    sa.Column("last_error", sa.String(500)),
)


@dataclass(frozen=True, slots=True)
class Subscription:
    token: str
    file_type: str
    scope: str
    active: bool
    checked_at: dt.datetime
    subscribed_at: dt.datetime | None = None
    failures: int = 0
    last_error: str | None = None


class SubscriptionStore(SideStore):
    """Subscriptions of all sources; shares the state store's engine."""

    metadata = _meta

    def all(self, source: str) -> dict[str, Subscription]:
        """Every row of ``source`` (active or failed), by token."""
        query = sa.select(subscriptions_table).where(subscriptions_table.c.source == source)
        with self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return {
            r["token"]: Subscription(
                token=r["token"],
                file_type=r["file_type"],
                scope=r["scope"],
                active=bool(r["active"]),
                checked_at=_aware(r["checked_at"]) or _now(),
                subscribed_at=_aware(r["subscribed_at"]),
                failures=int(r["failures"] or 0),
                last_error=r["last_error"],
            )
            for r in rows
        }

    def summary(self, source: str) -> dict[str, object]:
        """What the source page shows: subscriptions held and failing, the oldest confirmation."""
        table = subscriptions_table
        query = (
            sa.select(table.c.active, sa.func.count(), sa.func.min(table.c.checked_at))
            .where(table.c.source == source)
            .group_by(table.c.active)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        counts = {bool(active): (int(n), _aware(oldest)) for active, n, oldest in rows}
        held, oldest = counts.get(True, (0, None))
        return {
            "active": held,
            "failing": counts.get(False, (0, None))[0],
            "oldest_check": oldest.isoformat() if oldest else None,
        }

    def mark_subscribed(
        self, source: str, token: str, file_type: str, scope: str, now: dt.datetime | None = None
    ) -> None:
        """The service confirmed the subscription (made now, or found in place by a re-check)."""
        now = now or _now()
        values = {"file_type": file_type, "scope": scope, "active": True, "checked_at": now, "failures": 0}
        self._upsert(source, token, {**values, "subscribed_at": now, "last_error": None})

    def mark_failed(
        self, source: str, token: str, file_type: str, scope: str, error: str, now: dt.datetime | None = None
    ) -> None:
        """An attempt failed: kept (so it waits for the re-check interval), its streak counted."""
        now = now or _now()
        failures = sa.select(subscriptions_table.c.failures).where(
            subscriptions_table.c.source == source, subscriptions_table.c.token == token
        )
        with self.engine.connect() as conn:
            before = conn.scalar(failures) or 0
        values = {"file_type": file_type, "scope": scope, "active": False, "checked_at": now}
        self._upsert(source, token, {**values, "failures": int(before) + 1, "last_error": error[:500]})

    def forget(self, source: str, tokens: Iterable[str]) -> int:
        """Drop rows (unsubscribed, or the file is gone at the service)."""
        wanted = list(tokens)
        if not wanted:
            return 0
        table = subscriptions_table
        with self.engine.begin() as conn:
            result = conn.execute(sa.delete(table).where(table.c.source == source, table.c.token.in_(wanted)))
        return int(result.rowcount or 0)

    def _upsert(self, source: str, token: str, values: dict[str, object]) -> None:
        table = subscriptions_table
        key = (table.c.source == source) & (table.c.token == token)
        with self.engine.begin() as conn:
            if conn.execute(sa.update(table).where(key).values(**values)).rowcount == 0:
                conn.execute(sa.insert(table).values(source=source, token=token, **values))
