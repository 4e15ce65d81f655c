"""The event trigger of a source's events asset: stored change events become Airflow asset events.

``SourceEventsTrigger`` runs in the triggerer as the trigger of an ``AssetWatcher`` (Airflow's
event-driven scheduling). Every ``poll_seconds`` it asks the event store (the state database)
for a due batch of the source's pending events (``EventStore.claim_due``: the oldest has waited
the debounce window), and yields one ``TriggerEvent`` per batch. Airflow turns each into an asset
event (extra ``{"from_trigger": True, "payload": ...}``) that schedules the DAGs on the asset: the
source's sync DAG (purpose ``sync``) or its permissions DAG (purpose ``permissions``).

The payload is small on purpose (ids and counts, never the item keys: a batch may name 10,000
items and the payload is stored in Airflow's metadata database); the run loads its batches from
the event store. The kwargs (source, purpose, debounce, lease, poll interval) are the trigger's
identity in Airflow, so they hold no URL or secret: the triggerer's own settings name the state
database, as the workers' do.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from include.settings import get_settings
from include.stores.events import EventBatch, EventStore

__all__ = ["SourceEventsTrigger", "batch_payload"]

# after a failed poll (state database down), wait longer each time up to this, then try again
_MAX_BACKOFF_S = 60.0


def batch_payload(batch: EventBatch) -> dict[str, Any]:
    """What one asset event carries: the batch to load, and counts for Airflow's own UI."""
    return {
        "source": batch.source,
        "purpose": batch.purpose,
        "batch_id": batch.batch_id,
        "events": len(batch.event_ids),
        "keys": len(batch.item_keys),
    }


class SourceEventsTrigger(BaseEventTrigger):
    """Yields a ``TriggerEvent`` per due batch of ``source``'s ``purpose`` events, forever.

    An event trigger never ends on its own (the triggerer runs it while an asset watches it). A
    failed poll is logged and retried with backoff instead of ending the trigger: the events wait
    in the store, and the scheduled poll reconciles in the meantime.
    """

    def __init__(
        self,
        *,
        source: str,
        purpose: str = "sync",
        debounce_s: float = 30.0,
        lease_s: float = 900.0,
        poll_seconds: float = 1.5,
        max_keys: int = 10_000,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow's BaseEventTrigger is untyped
        self.source = source
        self.purpose = purpose
        self.debounce_s = float(debounce_s)
        self.lease_s = float(lease_s)
        self.poll_seconds = float(poll_seconds)
        self.max_keys = int(max_keys)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "source": self.source,
                "purpose": self.purpose,
                "debounce_s": self.debounce_s,
                "lease_s": self.lease_s,
                "poll_seconds": self.poll_seconds,
                "max_keys": self.max_keys,
            },
        )

    def _claim(self, store: EventStore) -> EventBatch | None:
        return store.claim_due(
            self.source,
            self.purpose,  # type: ignore[arg-type]  # checked by the store's callers: sync|permissions
            debounce_s=self.debounce_s,
            lease_s=self.lease_s,
            max_keys=self.max_keys,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # opening the store may create its tables: off the event loop, like every poll
        store = await asyncio.to_thread(_open_store)
        backoff = self.poll_seconds
        try:
            while True:
                try:
                    batch = await asyncio.to_thread(self._claim, store)
                except Exception as exc:  # the database is down or locked: the events wait there
                    self.log.warning("%s %s events: poll failed (%s); retrying", self.source, self.purpose, exc)
                    backoff = min(backoff * 2, _MAX_BACKOFF_S)
                    await asyncio.sleep(backoff)
                    continue
                backoff = self.poll_seconds
                if batch is None:
                    await asyncio.sleep(self.poll_seconds)
                    continue
                payload = batch_payload(batch)
                self.log.info("%s: %d %s event(s) on %d item(s) -> batch %s", *_said(payload))
                yield TriggerEvent(payload)  # type: ignore[no-untyped-call]  # Airflow's TriggerEvent is untyped
        finally:
            await asyncio.to_thread(store.close)


def _open_store() -> EventStore:
    settings = get_settings()
    settings.ensure_dirs()  # the default state database is a file under TRIBUTARY_HOME
    return EventStore(settings.state_url)


def _said(payload: dict[str, Any]) -> tuple[Any, ...]:
    return payload["source"], payload["events"], payload["purpose"], payload["keys"], payload["batch_id"]
