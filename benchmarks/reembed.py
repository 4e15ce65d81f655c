"""A new embedding model: re-embed the indexed chunk texts, against the full re-processing it took.

``python -m benchmarks reembed``: a local ``files`` source of Markdown notes and PDFs is synced
once into a fresh SQLite home; then, ``rounds`` times, the source is switched to a new model and
synced (the re-embedding: issue 36, point 5; nothing fetched, parsed or chunked), interleaved with
the peer, the same switch to another new model with ``full_resync`` (fetch, parse, chunk, embed
and upsert of every item: what a model change cost before). Every run embeds every distinct chunk
text once with a model no vector of is cached. The embedder is a hash of each text (no model
time): the figure is the pipeline's own cost around the model, which a real model adds to both
sides alike. Items fetched, texts embedded and chunks written are counted; wall times are medians.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from include.config import EmbeddingConfig, SourceConfig
from plugins.embedders.base import EmbeddedTexts, Embedder
from plugins.embedders.registry import provider_model_id

PARAGRAPHS = 12
DIMS = 64


class HashEmbedder(Embedder):
    """Unit vectors from each text's SHA-256, counting the texts it is sent."""

    def __init__(self, model_id: str, tally: list[int]) -> None:
        self.model_id, self.dimensions, self.batch_size, self.tally = model_id, DIMS, 64, tally

    def embed_documents(self, texts: Sequence[str]) -> EmbeddedTexts:
        self.tally.append(len(texts))
        rows = [np.frombuffer(hashlib.sha512(t.encode()).digest() * 4, dtype=np.uint8)[:DIMS] for t in texts]
        matrix = np.stack(rows).astype(np.float32) + 1.0
        return EmbeddedTexts(matrix / np.linalg.norm(matrix, axis=1, keepdims=True), [])

    def embed_query(self, text: str) -> Any:
        return self.embed_documents([text]).vectors[0]


def _corpus(root: Path, per_kind: int) -> int:
    """``per_kind`` Markdown notes and one-page PDFs, distinct texts."""
    from tests.web.fault_server import pdf_bytes

    for i in range(per_kind):
        body = "\n\n".join(f"Paragraph {j} of note {i} on canal locks, weirs and sluices." for j in range(PARAGRAPHS))
        (root / f"note{i:04d}.md").write_text(f"# Note {i}\n\n{body}\n", encoding="utf-8")
        (root / f"report{i:04d}.pdf").write_bytes(pdf_bytes(f"Report {i} on estuary tides and river deltas"))
    return 2 * per_kind


def _source(root: Path, model: str) -> SourceConfig:
    return SourceConfig(
        kind="files",
        name="reembed",
        options={"root": str(root)},
        batch_size=50,
        chunker={"name": "token", "options": {"chunk_token_num": 48}},
        # an endpoint never called (the hash embedder stands in, see _timed): only its model id counts
        embedding=EmbeddingConfig(provider="openai", model=model, dimensions=DIMS, conn_id="bench_unused"),
    )


def _timed(source: SourceConfig, **params: Any) -> tuple[float, dict[str, Any]]:
    from plugins.engine import run_pipeline

    tally: list[int] = []
    model = str(provider_model_id(source.embedding))
    start = time.perf_counter()
    summary = run_pipeline(source, params, embedder_factory=lambda: HashEmbedder(model, tally))
    assert summary.status == "success", summary.counts
    return time.perf_counter() - start, {**summary.counts, "texts_sent": sum(tally)}


def _row(name: str, items: int, runs: list[tuple[float, dict[str, Any]]]) -> dict[str, Any]:
    counts = runs[-1][1]
    return {
        "run": name,
        "items": items,
        "fetched": counts["fetched"],
        "chunked": counts["chunked"],
        "texts_embedded": counts["texts_sent"],
        "chunks_written": counts["chunks_written"],
        "reembedded": counts.get("reembedded", 0),
        "wall_s": statistics.median(t for t, _ in runs),
    }


def run(quick: bool = False) -> dict[str, Any]:
    per_kind, rounds = (20, 2) if quick else (150, 3)
    targeted: list[tuple[float, dict[str, Any]]] = []
    full: list[tuple[float, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as home:
        os.environ["TRIBUTARY_HOME"] = home
        root = Path(home) / "notes"
        root.mkdir()
        items = _corpus(root, per_kind)
        _timed(_source(root, "bench-a"))
        for number in range(rounds):
            targeted.append(_timed(_source(root, f"bench-b{number}")))
            # the peer, interleaved: another new model, every item re-processed whole
            full.append(_timed(_source(root, f"bench-c{number}"), full_resync=True))
    rows = [_row("new model: re-embed (issue 36)", items, targeted), _row("peer: full re-process", items, full)]
    ratio = rows[0]["wall_s"] / rows[1]["wall_s"]
    rows.append({"run": "ratio re-embed/full", "wall_s": ratio})
    return {
        "title": "A new embedding model: re-embedding the indexed chunk texts (issue 36, point 5)",
        "peer": "the same model switch with full_resync (fetch, parse, chunk, embed, upsert), interleaved",
        "rows": rows,
        "summary": (
            f"Median of {rounds} rounds, {items} items: the re-embedding fetched {rows[0]['fetched']} items and "
            f"embedded {rows[0]['texts_embedded']} texts (full: {rows[1]['fetched']} fetched, "
            f"{rows[1]['texts_embedded']} texts) in {ratio:.2f}x the full re-process's wall time."
        ),
    }
