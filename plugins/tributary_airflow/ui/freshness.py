"""Freshness of a source against its DAG's schedule: on time, late or never (Airbyte's
Healthy / Delayed, judged by the schedule rather than a fixed age)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from croniter import croniter

__all__ = ["Freshness", "freshness"]


@dataclass(frozen=True, slots=True)
class Freshness:
    state: str  # on time | late | never | unscheduled | unknown schedule
    detail: str


def _utc(moment: dt.datetime) -> dt.datetime:
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment.astimezone(dt.UTC)


def freshness(schedule: str | None, last_success: dt.datetime | None, now: dt.datetime) -> Freshness:
    """``on time`` when the last successful run started no earlier than the schedule's
    second-to-last tick (the latest tick's run may still be running); ``late`` otherwise."""
    if not schedule:
        if last_success is None:
            return Freshness("never", "no successful run yet (no schedule: runs are triggered by hand)")
        return Freshness("unscheduled", "no schedule: runs are triggered by hand")
    try:
        ticks = croniter(schedule, _utc(now))
        latest = ticks.get_prev(dt.datetime)
        before = ticks.get_prev(dt.datetime)
    except (ValueError, KeyError) as exc:
        return Freshness("unknown schedule", f"{schedule!r}: {exc}")
    if last_success is None:
        return Freshness("never", f"no successful run yet; schedule {schedule}")
    if _utc(last_success) >= before:
        return Freshness("on time", f"schedule {schedule}; last tick {latest:%Y-%m-%d %H:%M} UTC")
    return Freshness(
        "late",
        f"schedule {schedule}: no successful run since {before:%Y-%m-%d %H:%M} UTC (last tick {latest:%Y-%m-%d %H:%M})",
    )
