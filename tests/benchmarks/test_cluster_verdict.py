"""The cluster benchmark's verdict: the speed-up over the in-process run at the goal's batch size,
with an index matching the in-process run's; not judged when that batch size was not run."""

from __future__ import annotations

from typing import Any

from benchmarks.cluster import GOAL_BATCH, GOAL_SPEEDUP, _task_stats, _verdict


def _b(batch: int, speedup: float, same: str = "yes") -> dict[str, Any]:
    return {
        "run": "B: Celery cluster",
        "batch_size": batch,
        "speedup_vs_A": speedup,
        "overhead_ms_per_doc": 1.0,
        "same_chunks_as_A": same,
    }


def test_the_goal_is_judged_at_its_batch_size_by_the_speed_up() -> None:
    rows = [{"run": "A: CLI in-process", "batch_size": GOAL_BATCH}, _b(250, 2.0), _b(GOAL_BATCH, GOAL_SPEEDUP)]
    assert _verdict(rows).startswith(f"Goal (cluster >= {GOAL_SPEEDUP}x") and " met: " in _verdict(rows)
    slower = _verdict([_b(GOAL_BATCH, GOAL_SPEEDUP - 0.01)])
    assert "NOT met" in slower


def test_a_run_whose_index_differs_does_not_meet_the_goal() -> None:
    assert "NOT met" in _verdict([_b(GOAL_BATCH, 3.0, same="NO")])


def test_without_the_goal_batch_size_nothing_is_judged() -> None:
    assert "not judged" in _verdict([_b(250, 3.0)])


def test_task_stats_count_states_workers_and_queue_wait() -> None:
    tasks: list[dict[str, Any]] = [
        {"state": "success", "hostname": "w-a", "duration": 2.0,
         "queued_when": "2026-01-01T00:00:00Z", "start_date": "2026-01-01T00:00:03Z"},
        {"state": "success", "hostname": "w-b", "duration": 4.0,
         "queued_when": "2026-01-01T00:00:00Z", "start_date": "2026-01-01T00:00:01Z"},
        {"state": "failed", "hostname": "w-b", "duration": None, "queued_when": None, "start_date": None},
    ]  # fmt: skip
    stats = _task_stats(tasks)
    assert stats["count"] == 3
    assert stats["states"] == {"success": 2, "failed": 1}
    assert stats["hosts"] == {"w-a": 1, "w-b": 2}
    assert stats["busy_s"] == 6.0
    assert stats["mean_wait_s"] == 2.0
