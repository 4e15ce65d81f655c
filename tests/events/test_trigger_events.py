"""The events trigger and the schedules built on it (issue 37, point 3): what the triggerer runs,
what Airflow stores of it, and that a source with events off keeps its DAG exactly as it was."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

from airflow.sdk import Asset, AssetOrTimeSchedule
from airflow.serialization.serialized_objects import DagSerialization
from airflow.timetables.interval import CronDataIntervalTimetable
from airflow.timetables.trigger import DeltaTriggerTimetable

from include.config import SourceConfig
from include.stores import open_state_store
from include.stores.events import EventHint, EventStore
from plugins.tributary_airflow.dag_factory import build_dag, build_permissions_dag
from plugins.tributary_airflow.dag_factory.events import events_asset
from plugins.tributary_airflow.operators.base import triggering_batches
from plugins.tributary_airflow.triggers.events import SourceEventsTrigger

FEISHU = {"folders": ["fldcnX"]}


def _source(events: dict[str, Any] | None = None, schedule: str | None = "@hourly") -> SourceConfig:
    return SourceConfig(kind="feishu", name="drive", options=FEISHU, schedule=schedule, events=events or {})


def _timetable(dag: Any) -> dict[str, Any]:
    return DagSerialization.to_dict(dag)["dag"]["timetable"]


def test_with_events_off_the_serialized_schedules_are_todays() -> None:
    off = _source()
    assert _timetable(build_dag(off)) == {
        "__type": "airflow.timetables.interval.CronDataIntervalTimetable",
        "__var": {"expression": "0 * * * *", "timezone": "UTC"},
    }
    assert isinstance(build_dag(off).timetable, CronDataIntervalTimetable)
    assert isinstance(build_permissions_dag(off).timetable, DeltaTriggerTimetable)
    assert json.dumps(_timetable(build_dag(off))) == json.dumps(_timetable(build_dag(_source({"mode": "off"}))))


def test_with_events_on_the_cron_or_the_watched_asset_schedules_each_dag() -> None:
    source = _source({"mode": "callback", "debounce_seconds": 12})
    sync, perms = build_dag(source), build_permissions_dag(source)
    assert isinstance(sync.timetable, AssetOrTimeSchedule) and isinstance(perms.timetable, AssetOrTimeSchedule)
    stored = _timetable(sync)["__var"]
    assert stored["timetable"]["__var"]["expression"] == "0 * * * *"  # the safety net stays
    asset = stored["asset_condition"]
    assert (asset["name"], asset["uri"]) == ("tributary-events-feishu-drive", "tributary://events/feishu/drive")
    (watcher,) = asset["watchers"]
    assert watcher["trigger"] == {
        "classpath": "plugins.tributary_airflow.triggers.events.SourceEventsTrigger",
        "kwargs": {
            "source": "feishu:drive",
            "purpose": "sync",
            "debounce_s": 12.0,
            "lease_s": 900.0,
            "poll_seconds": 1.5,
            "max_keys": 10000,
        },
    }
    perm_asset = _timetable(perms)["__var"]["asset_condition"]
    assert perm_asset["name"] == "tributary-perm-events-feishu-drive"
    assert perm_asset["watchers"][0]["trigger"]["kwargs"]["purpose"] == "permissions"
    # the identity Airflow keys a watcher's trigger by is stable from one parse to the next
    again = events_asset(source).watchers[0].trigger.serialize()
    assert again == events_asset(source).watchers[0].trigger.serialize()


def test_a_source_without_cron_is_scheduled_by_its_events_alone() -> None:
    dag = build_dag(_source({"mode": "callback"}, schedule=None))
    assert isinstance(dag.timetable.asset_condition, Asset)  # type: ignore[attr-defined]
    assert not isinstance(dag.timetable, AssetOrTimeSchedule)


def _first_event(trigger: SourceEventsTrigger) -> Any:
    async def first() -> Any:
        runs = trigger.run()
        try:
            return await anext(runs)
        finally:
            await runs.aclose()

    return asyncio.run(first())


def test_the_trigger_yields_one_small_event_per_due_batch(tributary_home) -> None:
    state = open_state_store()
    try:
        store = EventStore(state)
        hints = [EventHint(f"e{n}", f"doxcn{n % 7}", "changed", "drive.file.edit_v1") for n in range(50)]
        hints.append(EventHint("p1", "doxcn1", "permissions", "drive.file.permission_member_added_v1"))
        store.record("feishu:drive", hints)
        trigger = SourceEventsTrigger(source="feishu:drive", debounce_s=0, poll_seconds=0.05)
        classpath, kwargs = trigger.serialize()
        rebuilt = SourceEventsTrigger(**kwargs)  # what the triggerer does with the stored kwargs
        assert classpath == "plugins.tributary_airflow.triggers.events.SourceEventsTrigger"
        event = _first_event(rebuilt)
        payload = event.payload
        assert set(payload) == {"source", "purpose", "batch_id", "events", "keys"}  # no item keys
        assert (payload["source"], payload["purpose"], payload["events"], payload["keys"]) == (
            "feishu:drive",
            "sync",
            50,
            7,
        )
        (batch,) = store.batches([payload["batch_id"]])
        assert len(batch.item_keys) == 7 and batch.run_id is None
        perm = _first_event(SourceEventsTrigger(source="feishu:drive", purpose="permissions", debounce_s=0))
        assert (perm.payload["purpose"], perm.payload["keys"]) == ("permissions", 1)
    finally:
        state.close()


def _ref(extra: dict[str, Any]) -> Any:
    return SimpleNamespace(extra=extra)


def test_a_run_takes_only_its_own_sources_trigger_batches() -> None:
    """``triggering_asset_events``: asset -> the asset events (``.extra``) that scheduled the run."""
    ours = {"from_trigger": True, "payload": {"source": "feishu:drive", "purpose": "sync", "batch_id": "b1"}}
    events = {
        "events-asset": [_ref(ours), _ref(ours), _ref({**ours, "payload": {**ours["payload"], "batch_id": "b2"}})],
        "other": [
            _ref({"from_trigger": True, "payload": {"source": "yuque:kb", "purpose": "sync", "batch_id": "x"}}),
            _ref({"payload": {"source": "feishu:drive", "batch_id": "posted-by-hand"}}),
            _ref(
                {"from_trigger": True, "payload": {"source": "feishu:drive", "purpose": "permissions", "batch_id": "p"}}
            ),
        ],
    }
    context: Any = {"triggering_asset_events": events}
    assert triggering_batches("feishu:drive", context) == ["b1", "b2"]
    assert triggering_batches("feishu:drive", context, "permissions") == ["p"]
    assert triggering_batches("feishu:drive", {}) == []  # type: ignore[arg-type]  # a manual run
