"""Runs started by change events: what they re-read, what the run log says, when events are done.

An asset event of a source's events asset (its trigger: ``SourceEventsTrigger``) names one batch
of stored events (``include.stores.events``). The run it schedules:

- at discover (:func:`apply_event_trigger`, from ``start_run``): loads its batches and adds their
  item keys to ``only_keys`` (after any the run was given: a run's own keys and the events' are
  both re-read), and records its trigger in the run log's params: ``{"type": "events",
  "batch_ids", "event_ids", "kinds", "items"}``. A batch no longer in the store (pruned) adds
  nothing; a run whose batches are all gone has no ``only_keys`` from events and lists the whole
  source, which reconciles whatever they named.
- after commit (:func:`consume_events`): marks its batches consumed. Only there, and only when the
  run's outcome is not ``failed``: a run that fails before (or reaches nothing) leaves them
  claimed, and the store releases them to a new batch once their lease lapses, so a failed run
  loses no event.

Events are hints: the run re-reads each named item through the API as any run does, so a
deleted item is a deletion only when the source confirms it (the connector's re-check), through
the plan's explicit deletions and the mass-delete guard.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from include.stores import StateStore
from include.stores.events import EventStore
from plugins.engine.context import RunContext

__all__ = [
    "apply_event_trigger",
    "consume_events",
    "event_trigger_of",
    "events_text",
    "trigger_batch_ids",
    "trigger_text",
]

log = logging.getLogger("tributary")


def trigger_batch_ids(events: Iterable[Mapping[str, Any]], source: str, purpose: str = "sync") -> list[str]:
    """The batch ids of the asset events' extras that our trigger made for ``source``'s ``purpose``
    (an asset event posted by hand, or another source's, names none)."""
    out: list[str] = []
    for extra in events:
        payload = extra.get("payload") if extra.get("from_trigger") else None
        if not isinstance(payload, Mapping):
            continue
        if payload.get("source") == source and payload.get("purpose", "sync") == purpose and payload.get("batch_id"):
            out.append(str(payload["batch_id"]))
    return list(dict.fromkeys(out))


def event_trigger_of(store: StateStore, batch_ids: Iterable[str]) -> tuple[dict[str, Any], list[str]]:
    """(the run log's trigger record, the item keys) of the stored batches ``batch_ids``."""
    ids = list(batch_ids)
    batches = EventStore(store).batches(ids)
    keys: dict[str, None] = {}
    kinds: dict[str, int] = {}
    event_ids: list[str] = []
    for batch in batches:
        event_ids += batch.event_ids
        for key in batch.item_keys:
            keys[key] = None
        for seen in batch.kinds.values():
            for kind in seen:
                kinds[kind] = kinds.get(kind, 0) + 1
    trigger = {
        "type": "events",
        "batch_ids": ids,
        "missing_batches": [i for i in ids if i not in {b.batch_id for b in batches}],
        "event_ids": event_ids,
        "kinds": kinds,  # kind -> items with an event of that kind
        "items": len(keys),
    }
    return trigger, list(keys)


def apply_event_trigger(ctx: RunContext, store: StateStore) -> None:
    """Give ``ctx`` (a RunContext with ``event_batches``) its events' keys and trigger record."""
    if not ctx.event_batches:
        return
    trigger, keys = event_trigger_of(store, ctx.event_batches)
    ctx.trigger = trigger
    if trigger["missing_batches"]:
        log.warning(
            "%s: %d event batch(es) no longer stored; their items are reconciled by a full listing",
            ctx.source.source_id,
            len(trigger["missing_batches"]),
        )
    if not keys:
        return
    given = list(ctx.params.only_keys or [])
    ctx.params.only_keys = list(dict.fromkeys([*given, *keys]))


def consume_events(ctx: RunContext, store: StateStore, counts: Mapping[str, Any]) -> int:
    """Mark the run's event batches consumed once its commit stands (see the module's doc).
    Returns how many batches this call marked."""
    # every task of the run reads the same triggering asset events: commit's are discover's
    batch_ids = list(ctx.event_batches)
    if not batch_ids or counts.get("outcome") == "failed" or ctx.params.dry_run:
        return 0
    return EventStore(store).consume(batch_ids, ctx.run_id)


def trigger_text(params: Mapping[str, Any] | None, shown: int = 5) -> str | None:
    """ "started by events: 3 events (ev-1, ev-2, ev-3), 2 items" for a run its events started
    (its run-log params' ``trigger``), None for any other run."""
    trigger = (params or {}).get("trigger")
    if not isinstance(trigger, Mapping) or trigger.get("type") != "events":
        return None
    ids = [str(i) for i in trigger.get("event_ids") or []]
    listed = ", ".join(ids[:shown]) + (f", … {len(ids) - shown} more" if len(ids) > shown else "")
    kinds = trigger.get("kinds") or {}
    said = f"started by events: {len(ids)} event{'s' if len(ids) != 1 else ''}"
    said += f" ({listed})" if ids else ""
    said += f", {trigger.get('items', 0)} item{'s' if trigger.get('items', 0) != 1 else ''}"
    if kinds:
        said += " — " + ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))
    if trigger.get("missing_batches"):
        said += f"; {len(trigger['missing_batches'])} batch(es) no longer stored: listed in full"
    return said


def events_text(source_events: Mapping[str, Any]) -> str:
    """A source's events line for ``cli sources`` (the source's ``events`` entry of ``--json``)."""
    if source_events.get("mode", "off") == "off":
        return "events off"
    last = source_events.get("last_event_at")
    parts = [
        f"events {source_events['mode']}",
        f"last {source_events.get('last_event_type')} at {last}" if last else "no event yet",
        f"received {source_events.get('received', 0)}",
        f"coalesced {source_events.get('coalesced', 0)}",
        f"runs started {source_events.get('runs_started', 0)}",
        f"duplicates {source_events.get('duplicates', 0)}",
    ]
    refused = source_events.get("refused") or {}
    if refused:
        parts.append("refused " + ", ".join(f"{k} {v}" for k, v in sorted(refused.items())))
    return "; ".join(parts)
