"""Golden tests of the CLI's human text (issue 34 point 6): each case's output is kept in
``tests/engine/golden/<case>.txt``, so a change of wording shows in review as a diff of what a
person reads. ``TRIBUTARY_UPDATE_GOLDEN=1`` rewrites the files after a deliberate change."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import pytest

from plugins.engine.cli_format import run_report_text, runs_table_text, sync_summary_text

GOLDEN = Path(__file__).parent / "golden"
STARTED = dt.datetime(2026, 12, 4, 9, 30, tzinfo=dt.UTC)

SYNCS: dict[str, dict[str, Any]] = {
    "sync_success": {"outcome": "success", "new": 12, "unchanged": 30, "chunks_written": 41, "bytes_fetched": 90210},
    "sync_failed_unreachable": {
        "outcome": "failed",
        "reasons": {"connect": 1, "robots_unreachable": 1},
        "outcome_note": "nothing was reached (listing incomplete; connect 1, robots_unreachable 1)",
    },
    "sync_partial_deferred": {
        "outcome": "partial",
        "new": 8,
        "failed": 2,
        "deferred": 40,
        "chunks_written": 20,
        "bytes_fetched": 4096,
        "reasons": {"http_404": 1, "parse:corrupt": 1},
        "outcome_note": "2 of 10 items failed; the rest committed",
    },
    "sync_dry_run": {"outcome": "success", "dry_run": True, "would_add": 1, "would_update": 2, "unchanged": 5},
    "sync_forced_unchanged": {"outcome": "success", "unchanged": 1, "unchanged_forced": 1, "chunks_written": 0},
}


def _check(case: str, text: str) -> None:
    path = GOLDEN / f"{case}.txt"
    if os.environ.get("TRIBUTARY_UPDATE_GOLDEN") == "1":
        path.write_text(text + "\n", encoding="utf-8")
    assert text + "\n" == path.read_text(encoding="utf-8"), f"{case}: the human text changed (see {path})"


@pytest.mark.parametrize("case", sorted(SYNCS))
def test_sync_summaries(case: str) -> None:
    _check(case, sync_summary_text("manual__2026-12-04T09:30:00", "web:demo", SYNCS[case], 12.34))


def _run(run_id: str, status: str, counts: dict[str, Any], seconds: float, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "source": "web:demo",
        "status": status,
        "run_type": "manual",
        "index_backend": "sqlite",
        "index_name": "tributary",
        "started_at": STARTED.isoformat(),
        "ended_at": (STARTED + dt.timedelta(seconds=seconds)).isoformat(),
        "counts": counts,
        **extra,
    }


def test_runs_table() -> None:
    runs = [_run(f"r{n}", str(SYNCS[case]["outcome"]), SYNCS[case], 3.5 * n) for n, case in enumerate(sorted(SYNCS))]
    runs.append({"run_id": "r9", "source": "web:demo", "status": "running", "counts": {}})
    _check("runs_table", runs_table_text(runs))


def test_run_report() -> None:
    item = {"error": None, "warnings": {}, "version_before": None, "reason": None}
    report = {
        "run": _run(
            "r1",
            "partial",
            SYNCS["sync_partial_deferred"],
            61.0,
            window_start="2026-12-01T00:00:00+00:00",
            window_end="2026-12-02T00:00:00+00:00",
        ),
        "items": [
            {
                **item,
                "action": "new",
                "item_key": "https://docs.example/a.html",
                "version_after": {"modified_time": "t1"},
            },
            {
                **item,
                "action": "failed",
                "item_key": "https://docs.example/gone.html",
                "version_after": None,
                "reason": "fetch:http_404",
                "error": "HTTP 404",
            },
            {
                **item,
                "action": "changed",
                "item_key": "https://docs.example/scan.pdf",
                "version_after": {"modified_time": "t2"},
                "reason": "content changed",
                "warnings": {"needs_ocr": "3 pages without text"},
            },
        ],
    }
    _check("run_report", run_report_text(report))


def test_run_report_says_what_an_incomplete_listing_deleted() -> None:
    """An events run lists only the named items: absence deletes nothing, but an item the source
    reported gone is deleted, and the report must not say otherwise."""
    counts = {"outcome": "success", "listing_complete": False, "unchanged": 1}
    quiet = run_report_text({"run": _run("r2", "success", {**counts, "deleted": 0}, 2.0), "items": []})
    deleting = run_report_text({"run": _run("r3", "success", {**counts, "deleted": 1}, 2.0), "items": []})
    assert "listing incomplete: nothing deleted" in quiet
    assert "listing incomplete: deletions only of items the source reported gone" in deleting
    assert "nothing deleted" not in deleting
