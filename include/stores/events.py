"""Change events pushed by a source (Feishu drive events, Yuque webhooks), stored before they are used.

An event is a *hint*: it names an item and what happened to it, never its content. The sync it
starts re-reads the item through the source's API, so a forged or stale event costs at most
one conditional re-fetch. Events are stored here first, by the receiver, and answered 200 only
after the row is committed: an event received while the scheduler or every worker is down waits
here, not in a process's memory.

Tables (in the state database, beside the state tables: same URL, same engine)
- ``tributary_events``: one row per (source, event id): the item and kind it names, when the
  source says it happened and when it arrived, and where it is in its life: ``pending`` (stored),
  ``claimed`` (coalesced into a batch that scheduled a run) or ``consumed`` (a run took it). A
  redelivered event (same id) is a duplicate: counted, never stored twice.
- ``tributary_event_batches``: what one asset event carried: the events coalesced into it, their
  distinct item keys, its purpose (``sync`` or ``permissions``) and the run that consumed it.
- ``tributary_event_counters``: per (source, name) counts of what never became a row:
  duplicates and every refusal (``refused:<reason>``).

Delivery is at least once. A batch that no run consumed within its lease (a triggerer killed
between the claim and Airflow's asset event) releases its events to be claimed again; the
scheduled poll reconciles anything lost beyond that.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from include.event_refusals import Expired
from include.stores.side import SideStore
from include.stores.side import aware as _aware
from include.stores.side import utc_now as _now

__all__ = [
    "EVENT_MEMORY",
    "PERMISSION_KINDS",
    "EventBatch",
    "EventHint",
    "EventKind",
    "EventStats",
    "EventStore",
    "RecordResult",
    "check_event_age",
    "purpose_of",
]

EventKind = Literal["changed", "created", "renamed", "deleted", "permissions"]
Purpose = Literal["sync", "permissions"]
# permission changes re-read one document's permissions (the permissions DAG); everything else
# re-reads the item (the sync DAG)
PERMISSION_KINDS: frozenset[str] = frozenset({"permissions"})
# How long an event id is remembered after a run consumed it, and so the oldest event a receiver
# accepts: an older one could be a replay that de-duplication no longer recognises. Longer than
# Feishu's last redelivery (15 s, 5 min, 1 h, 6 h after the first attempt).
EVENT_MEMORY = dt.timedelta(days=7)

_meta = sa.MetaData()

events_table = sa.Table(
    "tributary_events",
    _meta,
    sa.Column("source", sa.String(200), primary_key=True),
    sa.Column("event_id", sa.String(200), primary_key=True),
    sa.Column("item_key", sa.String(2048), nullable=False),
    sa.Column("kind", sa.String(20), nullable=False),
    sa.Column("purpose", sa.String(20), nullable=False),
    sa.Column("event_type", sa.String(100), nullable=False),
    sa.Column("event_time", sa.DateTime(timezone=True)),
    sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("batch_id", sa.String(64)),
)
sa.Index("events_pending", events_table.c.source, events_table.c.purpose, events_table.c.status)

batches_table = sa.Table(
    "tributary_event_batches",
    _meta,
    sa.Column("batch_id", sa.String(64), primary_key=True),
    sa.Column("source", sa.String(200), nullable=False),
    sa.Column("purpose", sa.String(20), nullable=False),
    sa.Column("event_ids", sa.JSON, nullable=False),
    sa.Column("item_keys", sa.JSON, nullable=False),
    sa.Column("kinds", sa.JSON, nullable=False),
    sa.Column("first_received", sa.DateTime(timezone=True), nullable=False),
    sa.Column("last_received", sa.DateTime(timezone=True), nullable=False),
    sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("released", sa.Boolean, nullable=False, default=False),
    sa.Column("run_id", sa.String(250)),
    sa.Column("consumed_at", sa.DateTime(timezone=True)),
)
sa.Index("event_batches_source", batches_table.c.source, batches_table.c.claimed_at)

counters_table = sa.Table(
    "tributary_event_counters",
    _meta,
    sa.Column("source", sa.String(200), primary_key=True),
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("count", sa.Integer, nullable=False),
    sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
)


def check_event_age(seconds: float, now: float, max_skew: float, what: str) -> None:
    """An event's own time (epoch seconds): not ahead of now by more than the skew, and no older
    than the event store remembers ids (``EVENT_MEMORY``). A redelivery hours after an outage is
    still taken; a replay older than the de-duplication memory is not."""
    if seconds - now > max_skew:
        raise Expired(f"{what} is {seconds - now:.0f}s in the future (allowed {max_skew:g}s)")
    if now - seconds > EVENT_MEMORY.total_seconds():
        raise Expired(f"{what} is older than the {EVENT_MEMORY.days} days event ids are remembered")


def purpose_of(kind: str) -> Purpose:
    """Which DAG an event of ``kind`` schedules: the permissions re-read or the sync."""
    return "permissions" if kind in PERMISSION_KINDS else "sync"


@dataclass(frozen=True, slots=True)
class EventHint:
    """One event as a receiver read it: the service's event id (its de-duplication key), the item
    it names in the connector's item-key form, what happened, and the service's event type."""

    event_id: str
    item_key: str
    kind: EventKind
    event_type: str
    event_time: dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class RecordResult:
    stored: int
    duplicates: int


@dataclass(frozen=True, slots=True)
class EventBatch:
    """The events one asset event carries: their ids, the distinct item keys in first-arrival
    order and, per key, the kinds seen (a key renamed then deleted has both)."""

    batch_id: str
    source: str
    purpose: Purpose
    event_ids: list[str]
    item_keys: list[str]
    kinds: dict[str, list[str]]
    first_received: dt.datetime
    last_received: dt.datetime
    claimed_at: dt.datetime
    run_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "source": self.source,
            "purpose": self.purpose,
            "event_ids": self.event_ids,
            "item_keys": self.item_keys,
            "kinds": self.kinds,
            "first_received": self.first_received.isoformat(),
            "last_received": self.last_received.isoformat(),
            "claimed_at": self.claimed_at.isoformat(),
            "run_id": self.run_id,
        }


@dataclass(frozen=True, slots=True)
class EventStats:
    """What the source page shows: events received (stored), coalesced into batches, runs they
    started, duplicates and refusals by reason, and the newest event."""

    received: int = 0
    pending: int = 0
    coalesced: int = 0
    batches: int = 0
    runs_started: int = 0
    duplicates: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    last_event_at: dt.datetime | None = None
    last_event_type: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "received": self.received,
            "pending": self.pending,
            "coalesced": self.coalesced,
            "batches": self.batches,
            "runs_started": self.runs_started,
            "duplicates": self.duplicates,
            "refused": dict(self.refused),
            "last_event_at": self.last_event_at.isoformat() if self.last_event_at else None,
            "last_event_type": self.last_event_type,
        }


class EventStore(SideStore):
    """Stored events of all sources; shares the state store's engine (thread-safe through its pool)."""

    metadata = _meta

    # ------------------------------------------------------------------------------ receive
    def record(self, source: str, hints: Sequence[EventHint], now: dt.datetime | None = None) -> RecordResult:
        """Store ``hints`` of ``source`` in one transaction; an event id already stored (a
        redelivery, a replay) is a duplicate, counted and not stored again."""
        now = now or _now()
        unique = list({h.event_id: h for h in hints}.values())
        with self.engine.begin() as conn:
            ids = [h.event_id for h in unique]
            known = (
                set(
                    conn.scalars(
                        sa.select(events_table.c.event_id).where(
                            events_table.c.source == source, events_table.c.event_id.in_(ids)
                        )
                    )
                )
                if ids
                else set()
            )
            rows = [_event_row(source, h, now) for h in unique if h.event_id not in known]
            if rows:
                conn.execute(_insert(conn, events_table).values(rows).on_conflict_do_nothing())
            duplicates = len(hints) - len(rows)
            if duplicates:
                _bump(conn, source, "duplicates", duplicates, now)
        return RecordResult(stored=len(rows), duplicates=duplicates)

    def count(self, source: str, name: str, n: int = 1, now: dt.datetime | None = None) -> None:
        """Count something that never became a row (``refused:<reason>``)."""
        with self.engine.begin() as conn:
            _bump(conn, source, name, n, now or _now())

    # ------------------------------------------------------------------------------ schedule
    def claim_due(
        self,
        source: str,
        purpose: Purpose,
        *,
        debounce_s: float,
        lease_s: float,
        max_keys: int = 10_000,
        now: dt.datetime | None = None,
    ) -> EventBatch | None:
        """Coalesce ``source``'s pending events of ``purpose`` into one batch once the oldest of
        them has waited ``debounce_s`` (a burst of edits is one run, and no event waits much
        longer than the window), at most ``max_keys`` distinct items a batch. Batches no run
        consumed within ``lease_s`` are released first. None: nothing is due yet."""
        now = now or _now()
        with self.engine.begin() as conn:
            self._release_stale(conn, source, purpose, now - dt.timedelta(seconds=lease_s))
            pending = conn.execute(
                sa.select(events_table)
                .where(
                    events_table.c.source == source,
                    events_table.c.purpose == purpose,
                    events_table.c.status == "pending",
                )
                .order_by(events_table.c.received_at, events_table.c.event_id)
            ).all()
            if not pending or _aware(pending[0].received_at) > now - dt.timedelta(seconds=debounce_s):  # type: ignore[operator]
                return None
            batch = _coalesce(source, purpose, pending, max_keys, now)
            conn.execute(batches_table.insert().values(_batch_row(batch)))
            for part in _chunks(batch.event_ids, 500):
                conn.execute(
                    events_table.update()
                    .where(events_table.c.source == source, events_table.c.event_id.in_(part))
                    .values(status="claimed", batch_id=batch.batch_id)
                )
        return batch

    @staticmethod
    def _release_stale(conn: sa.Connection, source: str, purpose: str, claimed_before: dt.datetime) -> None:
        stale = list(
            conn.scalars(
                sa.select(batches_table.c.batch_id).where(
                    batches_table.c.source == source,
                    batches_table.c.purpose == purpose,
                    batches_table.c.run_id.is_(None),
                    batches_table.c.released.is_(False),
                    batches_table.c.claimed_at < claimed_before,
                )
            )
        )
        if not stale:
            return
        conn.execute(batches_table.update().where(batches_table.c.batch_id.in_(stale)).values(released=True))
        conn.execute(
            events_table.update()
            .where(events_table.c.batch_id.in_(stale), events_table.c.status == "claimed")
            .values(status="pending", batch_id=None)
        )

    def batches(self, batch_ids: Iterable[str]) -> list[EventBatch]:
        """The stored batches of ``batch_ids`` (unknown ids are left out), in the order asked."""
        ids = list(dict.fromkeys(batch_ids))
        if not ids:
            return []
        with self.engine.connect() as conn:
            rows = {
                r.batch_id: r for r in conn.execute(sa.select(batches_table).where(batches_table.c.batch_id.in_(ids)))
            }
        return [_batch(rows[i]) for i in ids if i in rows]

    def consume(self, batch_ids: Iterable[str], run_id: str, now: dt.datetime | None = None) -> int:
        """Mark the batches (and their events) taken by ``run_id``; a re-run of the same task is a
        no-op. Returns how many batches this call marked."""
        ids = list(dict.fromkeys(batch_ids))
        if not ids:
            return 0
        now = now or _now()
        with self.engine.begin() as conn:
            marked = conn.execute(
                batches_table.update()
                .where(batches_table.c.batch_id.in_(ids), batches_table.c.run_id.is_(None))
                .values(run_id=run_id, consumed_at=now)
            ).rowcount
            conn.execute(events_table.update().where(events_table.c.batch_id.in_(ids)).values(status="consumed"))
        return int(marked or 0)

    # ------------------------------------------------------------------------------ report
    def stats(self, source: str) -> EventStats:
        """Counts for the source page and ``--json``."""
        e, b, c = events_table.c, batches_table.c, counters_table.c
        with self.engine.connect() as conn:
            by_status: dict[str, int] = dict(
                conn.execute(sa.select(e.status, sa.func.count()).where(e.source == source).group_by(e.status)).all()
            )
            last = conn.execute(
                sa.select(e.received_at, e.event_type).where(e.source == source).order_by(e.received_at.desc()).limit(1)
            ).first()
            batches, runs = conn.execute(
                sa.select(sa.func.count(), sa.func.count(sa.distinct(b.run_id))).where(b.source == source)
            ).one()
            counters = dict(conn.execute(sa.select(c.name, c["count"]).where(c.source == source)).all())
        return EventStats(
            received=sum(by_status.values()),
            pending=by_status.get("pending", 0),
            coalesced=by_status.get("claimed", 0) + by_status.get("consumed", 0),
            batches=int(batches),
            runs_started=int(runs),
            duplicates=counters.pop("duplicates", 0),
            refused={k.removeprefix("refused:"): v for k, v in counters.items() if k.startswith("refused:")},
            last_event_at=_aware(last.received_at) if last else None,
            last_event_type=last.event_type if last else None,
        )

    def recent_batches(self, source: str, limit: int = 20) -> list[EventBatch]:
        """The newest batches of ``source``, newest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(batches_table)
                .where(batches_table.c.source == source)
                .order_by(batches_table.c.claimed_at.desc())
                .limit(limit)
            ).all()
        return [_batch(r) for r in rows]

    def prune(self, source: str, older_than: dt.datetime) -> int:
        """Drop consumed events and consumed or released batches claimed before ``older_than``
        (the run log keeps which events started which run). Returns the events dropped."""
        with self.engine.begin() as conn:
            old = sa.select(batches_table.c.batch_id).where(
                batches_table.c.source == source,
                batches_table.c.claimed_at < older_than,
                sa.or_(batches_table.c.run_id.is_not(None), batches_table.c.released.is_(True)),
            )
            ids = list(conn.scalars(old))
            dropped = 0
            for part in _chunks(ids, 500):
                dropped += int(
                    conn.execute(
                        events_table.delete().where(
                            events_table.c.batch_id.in_(part), events_table.c.status == "consumed"
                        )
                    ).rowcount
                    or 0
                )
                conn.execute(batches_table.delete().where(batches_table.c.batch_id.in_(part)))
        return dropped


def _insert(conn: sa.Connection, table: sa.Table) -> Any:
    """The dialect's INSERT, which has ``on_conflict_do_nothing`` / ``on_conflict_do_update``."""
    return (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(table)


def _bump(conn: sa.Connection, source: str, name: str, n: int, now: dt.datetime) -> None:
    stmt = _insert(conn, counters_table).values(source=source, name=name, count=n, last_at=now)
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["source", "name"],
            set_={"count": counters_table.c["count"] + n, "last_at": now},
        )
    )


def _event_row(source: str, hint: EventHint, now: dt.datetime) -> dict[str, Any]:
    return {
        "source": source,
        "event_id": hint.event_id,
        "item_key": hint.item_key,
        "kind": hint.kind,
        "purpose": purpose_of(hint.kind),
        "event_type": hint.event_type,
        "event_time": hint.event_time,
        "received_at": now,
        "status": "pending",
        "batch_id": None,
    }


def _coalesce(source: str, purpose: Purpose, rows: Sequence[Any], max_keys: int, now: dt.datetime) -> EventBatch:
    """Pending rows (oldest first) into a batch of at most ``max_keys`` distinct items; its id is a
    digest of its events and claim time (events released by a lapsed lease get a new batch)."""
    kinds: dict[str, list[str]] = {}
    taken: list[Any] = []
    for row in rows:
        if row.item_key not in kinds and len(kinds) >= max_keys:
            continue  # the next batch takes it
        seen = kinds.setdefault(row.item_key, [])
        if row.kind not in seen:
            seen.append(row.kind)
        taken.append(row)
    event_ids = [r.event_id for r in taken]
    digest = hashlib.sha256("\x1f".join([source, purpose, now.isoformat(), *sorted(event_ids)]).encode()).hexdigest()[
        :32
    ]
    return EventBatch(
        batch_id=digest,
        source=source,
        purpose=purpose,
        event_ids=event_ids,
        item_keys=list(kinds),
        kinds=kinds,
        first_received=_aware(taken[0].received_at) or now,
        last_received=_aware(taken[-1].received_at) or now,
        claimed_at=now,
    )


def _batch_row(batch: EventBatch) -> dict[str, Any]:
    return {
        "batch_id": batch.batch_id,
        "source": batch.source,
        "purpose": batch.purpose,
        "event_ids": batch.event_ids,
        "item_keys": batch.item_keys,
        "kinds": batch.kinds,
        "first_received": batch.first_received,
        "last_received": batch.last_received,
        "claimed_at": batch.claimed_at,
        "released": False,
        "run_id": None,
    }


def _batch(row: Any) -> EventBatch:
    return EventBatch(
        batch_id=row.batch_id,
        source=row.source,
        purpose=row.purpose,
        event_ids=list(row.event_ids),
        item_keys=list(row.item_keys),
        kinds={k: list(v) for k, v in row.kinds.items()},
        first_received=_aware(row.first_received),  # type: ignore[arg-type]
        last_received=_aware(row.last_received),  # type: ignore[arg-type]
        claimed_at=_aware(row.claimed_at),  # type: ignore[arg-type]
        run_id=row.run_id,
    )


def _chunks(seq: list[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(seq), size):
        yield seq[start : start + size]
