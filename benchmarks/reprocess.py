"""A new PDF parser version: re-process only the PDFs, against the full resync it used to take.

``python -m benchmarks reprocess``: a local ``files`` source of Markdown, HTML and PDF items is
synced once into a fresh SQLite home; then, ``rounds`` times, the PDF parser is registered again
under a new version (as an upgraded release would) and the source synced (the targeted
re-process: issue 36), interleaved with the peer, a ``full_resync`` of the same source (what
reached a new parser version before: nothing else did). Items fetched and chunks written are
counted from the run's counts, wall times are medians.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from include.config import SourceConfig

PARAGRAPHS = 12


def _corpus(root: Path, per_kind: int) -> dict[str, int]:
    """``per_kind`` Markdown notes, HTML pages and PDFs (one page each), distinct texts."""
    from tests.web.fault_server import pdf_bytes

    for i in range(per_kind):
        body = "\n\n".join(f"Paragraph {j} of note {i} on canal locks, weirs and sluices." for j in range(PARAGRAPHS))
        (root / f"note{i:04d}.md").write_text(f"# Note {i}\n\n{body}\n", encoding="utf-8")
        paras = "".join(f"<p>Section {j} of page {i} about flood plains in spring.</p>" for j in range(PARAGRAPHS))
        (root / f"page{i:04d}.html").write_text(f"<html><body><main><h1>Page {i}</h1>{paras}</main></body></html>")
        (root / f"report{i:04d}.pdf").write_bytes(pdf_bytes(f"Report {i} on estuary tides and river deltas"))
    return {"md": per_kind, "html": per_kind, "pdf": per_kind}


def _bump_pdf_parser(version: str) -> None:
    from plugins.parsers import registry

    registry.load_builtins()
    for table in (registry._BY_MEDIA_TYPE, registry._BY_EXTENSION):
        for key, spec in list(table.items()):
            if spec.name == "pdf":
                table[key] = dataclasses.replace(spec, version=version)


def _timed(source: SourceConfig, **params: Any) -> tuple[float, dict[str, Any]]:
    from plugins.engine import run_pipeline

    start = time.perf_counter()
    summary = run_pipeline(source, params)
    assert summary.status == "success", summary.counts
    return time.perf_counter() - start, summary.counts


def run(quick: bool = False) -> dict[str, Any]:
    per_kind, rounds = (20, 2) if quick else (100, 3)
    targeted: list[tuple[float, dict[str, Any]]] = []
    full: list[tuple[float, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as home:
        os.environ["TRIBUTARY_HOME"] = home
        root = Path(home) / "mixed"
        root.mkdir()
        kinds = _corpus(root, per_kind)
        source = SourceConfig(kind="files", name="reprocess", options={"root": str(root)}, batch_size=50)
        _timed(source)
        for number in range(rounds):
            _bump_pdf_parser(f"bench.{number}")
            targeted.append(_timed(source))
            full.append(_timed(source, full_resync=True))  # the peer, same state, interleaved
    rows = []
    for name, runs in (("new PDF parser version (targeted)", targeted), ("peer: full resync", full)):
        counts = runs[-1][1]
        rows.append(
            {
                "run": name,
                "items": sum(kinds.values()),
                "fetched": counts["fetched"],
                "chunks_written": counts["chunks_written"],
                "reprocessed": sum((counts.get("reprocessed") or {}).values()),
                "wall_s": statistics.median(t for t, _ in runs),
            }
        )
    ratio = rows[0]["wall_s"] / rows[1]["wall_s"]
    rows.append({"run": "ratio targeted/full", "fetched": rows[0]["fetched"] / rows[1]["fetched"], "wall_s": ratio})
    return {
        "title": "Re-processing after a PDF parser upgrade (issue 36)",
        "peer": "full_resync of the same source, interleaved in the same run",
        "rows": rows,
        "summary": (
            f"Median of {rounds} rounds, {per_kind} items of each kind: the targeted run fetched "
            f"{rows[0]['fetched']} of {rows[0]['items']} items (the PDFs) in {ratio:.2f}x the full resync's wall time."
        ),
    }
