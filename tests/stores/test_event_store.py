"""The event store: stored before use, de-duplicated by event id, coalesced after the debounce
window, released when no run took a batch within its lease; on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from include.stores.events import EventHint, EventStore

T0 = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)
SRC = "feishu:handbook"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EventStore]:
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else f"sqlite:///{tmp_path}/s.db"
    events = EventStore(url)
    yield events
    events.close()


def _hint(n: int, key: str, kind: str = "changed") -> EventHint:
    return EventHint(event_id=f"ev-{n}", item_key=key, kind=kind, event_type="drive.file.edit_v1")  # type: ignore[arg-type]


def _at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def test_redelivered_events_are_counted_not_stored_twice(store: EventStore) -> None:
    first = store.record(SRC, [_hint(1, "doc:a"), _hint(2, "doc:b"), _hint(2, "doc:b")], now=T0)
    again = store.record(SRC, [_hint(1, "doc:a")], now=_at(5))
    assert (first.stored, first.duplicates) == (2, 1)
    assert (again.stored, again.duplicates) == (0, 1)
    stats = store.stats(SRC)
    assert (stats.received, stats.pending, stats.duplicates) == (2, 2, 2)
    assert store.stats("yuque:kb").received == 0  # per source


def test_a_burst_is_one_batch_once_the_oldest_event_has_waited_the_window(store: EventStore) -> None:
    store.record(SRC, [_hint(1, "doc:a")], now=T0)
    store.record(SRC, [_hint(2, "doc:b"), _hint(3, "doc:a", "renamed")], now=_at(10))
    assert store.claim_due(SRC, "sync", debounce_s=30, lease_s=600, now=_at(29)) is None
    batch = store.claim_due(SRC, "sync", debounce_s=30, lease_s=600, now=_at(30))
    assert batch is not None
    assert batch.item_keys == ["doc:a", "doc:b"]
    assert batch.kinds == {"doc:a": ["changed", "renamed"], "doc:b": ["changed"]}
    assert batch.event_ids == ["ev-1", "ev-2", "ev-3"]
    assert store.claim_due(SRC, "sync", debounce_s=30, lease_s=600, now=_at(31)) is None  # all claimed
    assert store.batches([batch.batch_id, "unknown"]) == [batch]
    assert store.stats(SRC).coalesced == 3


def test_permission_events_form_their_own_batches(store: EventStore) -> None:
    store.record(SRC, [_hint(1, "doc:a"), _hint(2, "doc:a", "permissions")], now=T0)
    perms = store.claim_due(SRC, "permissions", debounce_s=0, lease_s=600, now=_at(1))
    sync = store.claim_due(SRC, "sync", debounce_s=0, lease_s=600, now=_at(1))
    assert perms is not None and sync is not None
    assert (perms.event_ids, sync.event_ids) == (["ev-2"], ["ev-1"])


def test_a_batch_no_run_consumed_is_released_after_its_lease(store: EventStore) -> None:
    store.record(SRC, [_hint(1, "doc:a")], now=T0)
    lost = store.claim_due(SRC, "sync", debounce_s=0, lease_s=60, now=_at(1))
    assert lost is not None
    assert store.claim_due(SRC, "sync", debounce_s=0, lease_s=60, now=_at(30)) is None
    again = store.claim_due(SRC, "sync", debounce_s=0, lease_s=60, now=_at(62))
    assert again is not None and again.batch_id != lost.batch_id and again.event_ids == ["ev-1"]
    assert store.consume([again.batch_id], "manual__1") == 1
    assert store.consume([again.batch_id], "manual__1") == 0  # a re-run of the task
    assert store.claim_due(SRC, "sync", debounce_s=0, lease_s=60, now=_at(500)) is None  # consumed: never released
    stats = store.stats(SRC)
    assert (stats.batches, stats.runs_started, stats.pending) == (2, 1, 0)


def test_batches_hold_at_most_max_keys_items(store: EventStore) -> None:
    store.record(SRC, [_hint(n, f"doc:{n % 5}") for n in range(20)], now=T0)
    first = store.claim_due(SRC, "sync", debounce_s=0, lease_s=600, max_keys=3, now=_at(1))
    second = store.claim_due(SRC, "sync", debounce_s=0, lease_s=600, max_keys=3, now=_at(1))
    assert first is not None and second is not None
    assert first.item_keys == ["doc:0", "doc:1", "doc:2"] and len(first.event_ids) == 12
    assert second.item_keys == ["doc:3", "doc:4"] and len(second.event_ids) == 8


def test_refusals_are_counted_by_reason_and_pruning_keeps_what_is_open(store: EventStore) -> None:
    store.count(SRC, "refused:bad_signature", 3, now=T0)
    store.count(SRC, "refused:too_large", now=T0)
    store.record(SRC, [_hint(1, "doc:a"), _hint(2, "doc:b")], now=T0)
    batch = store.claim_due(SRC, "sync", debounce_s=0, lease_s=600, max_keys=1, now=_at(1))
    assert batch is not None
    store.consume([batch.batch_id], "run-1")
    assert store.stats(SRC).refused == {"bad_signature": 3, "too_large": 1}
    assert store.prune(SRC, older_than=_at(3600)) == 1
    stats = store.stats(SRC)
    assert (stats.received, stats.pending, stats.batches) == (1, 1, 0)
    assert stats.last_event_at == T0 and stats.last_event_type == "drive.file.edit_v1"
