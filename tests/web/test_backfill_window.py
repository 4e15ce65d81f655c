"""A backfill window honoured by the web source (issue 34, point 8).

Before: a backfill over 2026-12-01 re-indexed a page whose Last-Modified is 2026-12-04 as
``changed``, so the run page showed a window the run had not honoured. Now a page is processed
only when its Last-Modified falls in ``[window_start, window_end)``; the others are counted
``outside_window`` (listed, never deleted for it); a page with no usable date is processed and
counted ``undated_in_window``.
"""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from pathlib import Path

import pytest

from include.config import SourceConfig
from include.index import open_index
from plugins.connectors.web.window import ModifiedWindow, WindowPlace
from plugins.engine import run_pipeline
from tests.web.nginx import requires_nginx, serve_nginx

UTC = dt.UTC
DEC_1 = dt.datetime(2026, 12, 1, tzinfo=UTC)
DEC_2 = dt.datetime(2026, 12, 2, tzinfo=UTC)


def _write(root: Path, name: str, body: str, modified: dt.datetime) -> None:
    path = root / name
    path.write_text(f"<html><head><title>{name}</title></head><body><main>{body}</main></body></html>")
    os.utime(path, (modified.timestamp(), modified.timestamp()))  # nginx's Last-Modified is the mtime


def _texts(source: SourceConfig, query: str) -> set[str]:
    index = open_index(source.index)
    try:
        return {hit.url or "" for hit in index.search(query, k=10, source=source.source_id)}
    finally:
        index.close()


@pytest.mark.parametrize(
    ("header", "place"),
    [
        ("Tue, 01 Dec 2026 10:00:00 GMT", WindowPlace.INSIDE),
        ("Mon, 30 Nov 2026 23:59:59 GMT", WindowPlace.OUTSIDE),
        ("Wed, 02 Dec 2026 00:00:00 GMT", WindowPlace.OUTSIDE),  # the end is excluded
        ("Tuesday, 01-Dec-26 10:00:00 GMT", WindowPlace.INSIDE),  # RFC 850 form, still an HTTP-date
        (None, WindowPlace.UNDATED),
        ("", WindowPlace.UNDATED),
        ("yesterday", WindowPlace.UNDATED),
        ("Tue, 99 Dec 2026 10:00:00 GMT", WindowPlace.UNDATED),
    ],
)
def test_a_page_is_placed_by_its_last_modified(header: str | None, place: WindowPlace) -> None:
    assert ModifiedWindow(DEC_1, DEC_2).place(header) is place


def test_naive_bounds_are_utc_and_open_bounds_admit_everything() -> None:
    naive = ModifiedWindow(dt.datetime(2026, 12, 1), dt.datetime(2026, 12, 2))
    assert naive.place("Tue, 01 Dec 2026 00:00:00 GMT") is WindowPlace.INSIDE
    counts: Counter[str] = Counter()
    assert ModifiedWindow().admits("Mon, 30 Nov 2026 23:59:59 GMT", counts) and not counts
    assert ModifiedWindow(start=DEC_1).place("Fri, 04 Dec 2026 10:00:00 GMT") is WindowPlace.INSIDE


@requires_nginx
def test_a_backfill_processes_only_pages_modified_in_its_window(tmp_path: Path, tributary_home: Path) -> None:
    root = tmp_path / "www"
    root.mkdir()
    dec_4 = dt.datetime(2026, 12, 4, 9, tzinfo=UTC)
    _write(root, "index.html", '<h1>Home</h1><a href="early.html">e</a> <a href="late.html">l</a>', DEC_1)
    _write(root, "early.html", "<h1>Early</h1><p>The granite quarry opened.</p>", DEC_1)
    _write(root, "late.html", "<h1>Late</h1><p>The marble quarry opened.</p>", dec_4)
    with serve_nginx(root, tmp_path / "nginx") as server:
        source = SourceConfig(
            kind="web",
            name="window_site",
            options={"seeds": [server.base + "/"], "delay_seconds": 0, "allowlist": ["127.0.0.1"], "retries": 0},
        )
        assert run_pipeline(source).counts["new"] == 3

        # both pages edited; one edit dated inside the backfill's day, one three days later
        _write(root, "early.html", "<h1>Early</h1><p>The granite quarry closed.</p>", DEC_1 + dt.timedelta(hours=5))
        _write(root, "late.html", "<h1>Late</h1><p>The marble quarry flooded.</p>", dec_4 + dt.timedelta(hours=1))
        backfill = run_pipeline(source, {"window_start": DEC_1.isoformat(), "window_end": DEC_2.isoformat()})

        assert backfill.counts["changed"] == 1 and backfill.counts["deleted"] == 0
        crawl = backfill.counts["source_stats"]  # the crawl's own counts, as the run record keeps them
        assert crawl["outside_window"] == 1 and crawl["inside_window"] == 1
        assert _texts(source, "granite closed") == {f"{server.base}/early.html"}
        assert _texts(source, "marble opened") == {f"{server.base}/late.html"}  # left for its own window

        # the next ordinary run picks the late page up: nothing was lost by the backfill
        after = run_pipeline(source)
        assert after.counts["changed"] == 1
        assert _texts(source, "flooded") == {f"{server.base}/late.html"}


def test_a_web_source_refuses_scheduled_windows() -> None:
    from pydantic import ValidationError

    from plugins.connectors.web.options import WebOptions

    with pytest.raises(ValidationError, match="window_overlap_minutes"):
        WebOptions.model_validate({"seeds": ["http://127.0.0.1/"], "window_overlap_minutes": 10})
