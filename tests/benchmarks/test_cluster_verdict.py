"""The cluster benchmark's verdict: the smallest batch size whose overhead meets the goal and whose
index matched the in-process run's; none when no batch size does (no cluster is started)."""

from __future__ import annotations

from typing import Any

from benchmarks.cluster import GOAL_MS, _task_stats, _verdict


def _b(batch: int, overhead: float, same: str = "yes") -> dict[str, Any]:
    return {"run": "B: Celery cluster", "batch_size": batch, "overhead_ms_per_doc": overhead, "same_chunks_as_A": same}


def test_the_smallest_batch_size_meeting_the_goal_is_picked() -> None:
    rows = [{"run": "A: CLI in-process", "batch_size": 250}, _b(250, GOAL_MS + 1), _b(1000, 3.0), _b(2500, 1.0)]
    assert "smallest batch size meeting it: 1000" in _verdict(rows)


def test_a_batch_size_whose_index_differs_does_not_count() -> None:
    verdict = _verdict([_b(250, 1.0, same="NO"), _b(1000, GOAL_MS + 0.5)])
    assert verdict.startswith("Goal") and "NOT met" in verdict
    assert "250: 1.0 ms/doc" in verdict


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
