"""No-change resync vs first sync of the demo site (wall time and bytes fetched, as ratios).

``python -m benchmarks resync``: serves the demo handbook on 127.0.0.1, runs the full pipeline
in-process (the same stage functions the DAG runs) into a fresh SQLite index, then resyncs with
nothing changed. Repeated ``rounds`` times; medians reported. The peer here is our own first
sync: what an incremental resync saves against re-downloading everything.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Any

from include.config import SourceConfig
from plugins.tributary_airflow.demo.serve import SITE, serve_directory


def _source(url: str) -> SourceConfig:
    return SourceConfig(
        kind="web",
        name="bench",
        options={"seeds": [url], "delay_seconds": 0, "allowlist": ["127.0.0.1"], "use_sitemaps": False},
        batch_size=4,
    )


def run(quick: bool = False) -> dict[str, Any]:
    from plugins.engine import run_pipeline

    rounds = 2 if quick else 5
    server, _ = serve_directory(SITE)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    first_t, again_t, first_b, again_b = [], [], [], []
    try:
        for _ in range(rounds):
            with tempfile.TemporaryDirectory() as home:
                os.environ["TRIBUTARY_HOME"] = home
                src = _source(url)
                t0 = time.perf_counter()
                first = run_pipeline(src)
                t1 = time.perf_counter()
                again = run_pipeline(src)
                t2 = time.perf_counter()
                assert again.counts["chunks_written"] == 0 and again.counts["parsed"] == 0
                first_t.append(t1 - t0)
                again_t.append(t2 - t1)
                first_b.append(first.counts["bytes_fetched"])
                again_b.append(again.counts["bytes_fetched"])
    finally:
        server.shutdown()
    ft, at = statistics.median(first_t), statistics.median(again_t)
    fb, ab = statistics.median(first_b), statistics.median(again_b)
    rows = [
        {"run": "first sync", "wall_s": ft, "bytes_fetched": fb, "pages_parsed": first.counts["parsed"]},
        {"run": "no-change resync", "wall_s": at, "bytes_fetched": ab, "pages_parsed": again.counts["parsed"]},
        {"run": "ratio resync/first", "wall_s": at / ft, "bytes_fetched": ab / fb if fb else 0.0, "pages_parsed": 0},
    ]
    return {
        "title": "Incremental resync of the demo site",
        "peer": "the first (full) sync, same run",
        "rows": rows,
        "summary": (
            f"Median of {rounds} rounds: the no-change resync takes {at / ft:.2f}x the first sync's wall time and "
            f"moves {ab / fb:.1%} of its bytes (304 answers; nothing parsed, chunked or written)."
        ),
    }
