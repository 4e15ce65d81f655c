"""The events assets of a source with ``events.mode: callback``, and the schedules built on them.

One ``Asset`` per source and purpose: ``tributary-events-<kind>-<name>`` (the sync) and
``tributary-perm-events-<kind>-<name>`` (the permissions re-read), each watched by an
``AssetWatcher`` whose :class:`~plugins.tributary_airflow.triggers.events.SourceEventsTrigger`
turns the source's stored events into asset events in the triggerer. A DAG on it is scheduled
by its timetable *or* the asset (``AssetOrTimeSchedule``): the scheduled full listing stays the
safety net that reconciles anything an event missed. With events off nothing here is used.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset, AssetOrTimeSchedule, AssetWatcher

from include.config import SourceConfig
from plugins.tributary_airflow.triggers.events import SourceEventsTrigger

__all__ = ["events_asset", "with_events"]

_PREFIX = {"sync": "tributary-events", "permissions": "tributary-perm-events"}


def events_asset(source: SourceConfig, purpose: str = "sync") -> Asset:
    """The asset whose events schedule ``source``'s sync (or permissions) DAG."""
    events = source.events
    trigger = SourceEventsTrigger(
        source=source.source_id,
        purpose=purpose,
        debounce_s=events.debounce_seconds,
        lease_s=events.lease_seconds,
    )
    name = f"{_PREFIX[purpose]}-{source.kind}-{source.name}"
    segment = "events" if purpose == "sync" else "perm-events"
    return Asset(
        name=name,
        uri=f"tributary://{segment}/{source.kind}/{source.name}",
        group="tributary",
        watchers=[AssetWatcher(name=f"{name}-watcher", trigger=trigger)],
    )


def with_events(source: SourceConfig, schedule: Any, purpose: str = "sync") -> Any:
    """``schedule`` (a timetable, a preset or None) OR the events asset when the source's events
    are on; ``schedule`` itself when they are off. ``@once``/``@continuous`` presets keep only
    the asset beside them: they are not timetables ``AssetOrTimeSchedule`` can combine."""
    if not source.events.enabled:
        return schedule
    asset = events_asset(source, purpose)
    if schedule is None or isinstance(schedule, str):
        return asset
    return AssetOrTimeSchedule(timetable=schedule, assets=asset)
