"""The benchmark corpus, chunked, against digests of every chunk (``golden/benchmark_corpus.json``).

The golden tests of ``test_golden.py`` pin a few small documents; this one pins the chunker's
whole behaviour on the benchmark's quick corpus (``python -m benchmarks chunkers --quick``: the
seed documents from ``../shared/seeds`` and Python's HTML documentation), under option sets
that reach every way a chunk is built: plain runs, overlaps, heading prefixes, folded headings,
headings with nothing under them, sections, tables, and small limits that split inside sentences.

Each document's chunks are stored as one digest of their dicts (id, text, token count, content
hash, heading path, positions, kind, metadata), so a change to any field of any chunk fails the
test. The file records the corpus it was made from; on other machines (no shared seeds, no
``python3-doc``, or different files) the test is skipped with the reason. Regenerate
deliberately with ``TRIBUTARY_UPDATE_GOLDEN=1 pytest tests/chunkers/test_corpus_golden.py`` and
say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks.chunkers import PYDOCS, SEEDS, corpus
from include.contract import Block, BlockKind, Chunk, ParsedDocument
from plugins.chunkers import chunk_document

GOLDEN = Path(__file__).parent / "golden" / "benchmark_corpus.json"
UPDATE = os.environ.get("TRIBUTARY_UPDATE_GOLDEN") == "1"

ChunkFn = Callable[[ParsedDocument, str, str, dict[str, Any]], list[Chunk]]


def _paragraphs(paragraphs: list[str]) -> ParsedDocument:
    return ParsedDocument([Block(BlockKind.PARAGRAPH, p) for p in paragraphs])


def _with_headings(paragraphs: list[str]) -> ParsedDocument:
    """Short lines without closing punctuation become headings (levels 1-3), to reach heading mode."""
    blocks = []
    for i, p in enumerate(paragraphs):
        if len(p) < 60 and not p.rstrip().endswith((".", "。", ":", ")")):
            blocks.append(Block(BlockKind.HEADING, p, level=1 if i % 7 == 0 else 2 + i % 2))
        else:
            blocks.append(Block(BlockKind.PARAGRAPH, p))
    return ParsedDocument(blocks)


def _as_table(paragraphs: list[str]) -> ParsedDocument:
    """Every paragraph a row of one table (its first words, the rest), between two paragraphs."""
    rows = [[p[:30], p[30:]] for p in paragraphs]
    table = Block(BlockKind.TABLE, "\n".join("\t".join(r) for r in rows), rows=rows, header=["start", "rest"])
    return ParsedDocument(
        [Block(BlockKind.PARAGRAPH, paragraphs[0]), table, Block(BlockKind.PARAGRAPH, paragraphs[-1])]
    )


# (case name, chunker, options, how a document's paragraphs become blocks)
CASES: list[tuple[str, str, dict[str, Any], Callable[[list[str]], ParsedDocument]]] = [
    ("token-512", "token", {"chunk_token_num": 512}, _paragraphs),
    ("token-128-overlap-32", "token", {"chunk_token_num": 128, "overlap_tokens": 32}, _paragraphs),
    ("token-64-overlap-16", "token", {"chunk_token_num": 64, "overlap_tokens": 16}, _paragraphs),
    ("heading-256", "heading", {"chunk_token_num": 256}, _with_headings),
    ("heading-200-overlap-40", "heading", {"chunk_token_num": 200, "overlap_tokens": 40}, _with_headings),
    (
        "heading-300-cross-sections",
        "heading",
        {"chunk_token_num": 300, "cross_sections": True, "overlap_tokens": 20},
        _with_headings,
    ),
    ("token-100-headings", "token", {"chunk_token_num": 100, "headings": True}, _with_headings),
    ("table-200", "token", {"chunk_token_num": 200, "table_rows_per_chunk": 6}, _as_table),
    ("table-64-headings", "heading", {"chunk_token_num": 64}, _as_table),
]


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, ensure_ascii=False, sort_keys=True).encode("utf-8")).hexdigest()


def corpus_digests(docs: list[list[str]], chunk: ChunkFn = chunk_document) -> dict[str, Any]:
    """For every case: the number of chunks and one digest per document of all its chunks' fields."""
    out: dict[str, Any] = {"corpus": _digest(docs), "documents": len(docs), "cases": {}}
    for name, chunker, options, build in CASES:
        per_doc = [[c.to_dict() for c in chunk(build(d), f"doc{i}", chunker, options)] for i, d in enumerate(docs)]
        out["cases"][name] = {
            "chunks": sum(map(len, per_doc)),
            "documents": [_digest(chunks) for chunks in per_doc],
        }
    return out


@pytest.fixture(scope="module")
def docs() -> list[list[str]]:
    if not any(SEEDS.glob("*.txt")):
        pytest.skip(f"shared seed documents absent ({SEEDS}; ../shared/seeds beside the repository)")
    if not any(PYDOCS.glob("*.html")):
        pytest.skip(f"Python HTML documentation absent ({PYDOCS}; apt-get install -y python3-doc)")
    return corpus(quick=True)


def test_benchmark_corpus_chunks_match_the_golden_digests(docs: list[list[str]]) -> None:
    got = corpus_digests(docs)
    if UPDATE:
        GOLDEN.write_text(json.dumps(got, indent=1) + "\n", encoding="utf-8")
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    if got["corpus"] != expected["corpus"]:
        pytest.skip("the benchmark corpus here differs from the one the golden digests were made from")
    for name, case in expected["cases"].items():
        changed = [
            i for i, (a, b) in enumerate(zip(got["cases"][name]["documents"], case["documents"], strict=True)) if a != b
        ]
        assert (got["cases"][name]["chunks"], changed) == (case["chunks"], []), f"{name}: documents {changed} differ"
