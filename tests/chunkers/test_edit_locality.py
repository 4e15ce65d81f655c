"""Edit-stable chunks: one edit rewrites only the chunks around it, ids follow content.

A chunk is *rewritten* when its (id, text) pair was not among the document's chunks before the
edit: that is what the index and the vector cache key on.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from include.contract import Block, BlockKind, Chunk, ParsedDocument, content_chunk_id
from plugins.chunkers import chunk_document
from plugins.chunkers.options import ChunkOptions
from plugins.chunkers.token_chunker import chunk_with_options
from tests.chunkers.strategies import CJK, WORDS

LIMIT = 128


def _paragraph(rng: random.Random) -> str:
    if rng.random() < 0.2:  # some Chinese, with its own sentence ends
        return "。".join("".join(rng.choices(CJK, k=rng.randint(8, 30))) for _ in range(rng.randint(1, 4))) + "。"
    sentences = [" ".join(rng.choices(WORDS, k=rng.randint(4, 18))).capitalize() for _ in range(rng.randint(1, 5))]
    return ". ".join(sentences) + "."


def _document(seed: int, paragraphs: int = 60, headings: bool = False) -> ParsedDocument:
    rng = random.Random(seed)
    blocks = []
    for i in range(paragraphs):
        if headings and i % 9 == 0:
            blocks.append(Block(BlockKind.HEADING, f"Section {i // 9}", level=1 + (i // 9) % 2))
        blocks.append(Block(BlockKind.PARAGRAPH, _paragraph(rng)))
    return ParsedDocument(blocks)


def _edits(doc: ParsedDocument) -> list[tuple[str, ParsedDocument]]:
    """Insert, delete and change a paragraph at the start, middle and end (headings are left
    alone: in heading mode a heading's text is in every chunk under it)."""
    blocks = doc.blocks
    new = Block(BlockKind.PARAGRAPH, "A new paragraph written into the document by an edit, some twenty tokens long.")
    paragraphs = [i for i, b in enumerate(blocks) if b.kind == BlockKind.PARAGRAPH]
    out = []
    for where, i in (("start", paragraphs[0]), ("middle", paragraphs[len(paragraphs) // 2]), ("end", paragraphs[-1])):
        at = i + 1 if where == "end" else i
        text = blocks[i].text
        changed = replace(blocks[i], text=text[: len(text) // 2] + " edited " + text[len(text) // 2 :])
        out += [
            (f"insert {where}", replace(doc, blocks=[*blocks[:at], new, *blocks[at:]])),
            (f"delete {where}", replace(doc, blocks=[*blocks[:i], *blocks[i + 1 :]])),
            (f"change {where}", replace(doc, blocks=[*blocks[:i], changed, *blocks[i + 1 :]])),
        ]
    return out


def _rewritten(before: list[Chunk], after: list[Chunk]) -> int:
    old = {(c.chunk_id, c.text) for c in before}
    return sum((c.chunk_id, c.text) not in old for c in after)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(
    ("chunker", "options", "headings"),
    [
        ("token", {"chunk_token_num": LIMIT}, False),
        ("token", {"chunk_token_num": LIMIT, "overlap_tokens": 16}, False),
        ("heading", {"chunk_token_num": LIMIT}, True),
    ],
)
def test_one_edit_rewrites_at_most_a_few_chunks(
    seed: int, chunker: str, options: dict[str, Any], headings: bool
) -> None:
    doc = _document(seed, headings=headings)
    before = chunk_document(doc, "doc", chunker, options)
    assert len(before) >= 15
    counts = {name: _rewritten(before, chunk_document(edited, "doc", chunker, options)) for name, edited in _edits(doc)}
    assert max(counts.values()) <= 3, counts


def test_greedy_packing_rewrites_far_more() -> None:
    """What the content-defined cuts and ids are for: chunker version 1 (kept for the benchmark)
    against the default, over the same nine edits."""
    doc = _document(1)
    opts = ChunkOptions.from_mapping({"chunk_token_num": LIMIT})
    legacy_before = chunk_with_options(doc, "doc", opts, _legacy=True)
    assert [c.chunk_id for c in legacy_before] == [f"doc-{i:05d}" for i in range(len(legacy_before))]
    ours_before = chunk_with_options(doc, "doc", opts)
    legacy = ours = 0
    for _name, edited in _edits(doc):
        legacy += _rewritten(legacy_before, chunk_with_options(edited, "doc", opts, _legacy=True))
        ours += _rewritten(ours_before, chunk_with_options(edited, "doc", opts))
    assert legacy >= len(legacy_before)  # an edit at the start rewrites about every chunk
    assert ours <= 2 * 9 and 4 * ours < legacy, (ours, legacy)


def test_chunks_after_an_edit_keep_their_ids_with_a_new_sequence() -> None:
    doc = _document(2)
    before = chunk_document(doc, "doc", "token", {"chunk_token_num": LIMIT})
    after = chunk_document(dict(_edits(doc))["insert start"], "doc", "token", {"chunk_token_num": LIMIT})
    kept = {c.chunk_id: c for c in before}
    tail = after[3:]
    assert all(c.chunk_id in kept and kept[c.chunk_id].text == c.text for c in tail)
    assert [c.sequence for c in after] == list(range(len(after)))
    # The sequence moved with the insert; the ids did not.
    assert {c.sequence - kept[c.chunk_id].sequence for c in tail} == {len(after) - len(before)}


def test_table_rows_resynchronise_after_a_row_insert() -> None:
    rows = [[f"item {i}", f"{i * 7 % 97}", f"note {i % 5}"] for i in range(80)]

    def table(rs: list[list[str]]) -> ParsedDocument:
        text = "\n".join("\t".join(r) for r in rs)
        return ParsedDocument([Block(BlockKind.TABLE, text, rows=rs, header=["name", "value", "note"])])

    before = chunk_document(table(rows), "doc", "token", {})
    assert len(before) >= 8 and all(c.kind == "table" for c in before)
    for at in (0, 40, 80):
        after = chunk_document(table([*rows[:at], ["new item", "1", "note x"], *rows[at:]]), "doc", "token", {})
        assert _rewritten(before, after) <= 2, at
    assert max(c.text.count("\nname: ") for c in before) <= 10  # table_rows_per_chunk still caps rows


def test_ids_are_content_derived_unique_and_deterministic() -> None:
    paragraph = "The same paragraph, repeated in one document, word for word. " * 6
    doc = ParsedDocument([Block(BlockKind.PARAGRAPH, paragraph) for _ in range(12)])
    chunks = chunk_document(doc, "doc", "token", {"chunk_token_num": 64})
    ids = [c.chunk_id for c in chunks]
    assert len(set(ids)) == len(ids)
    # Identical chunks: the first has the plain id, the k-th repeat "-k".
    first = chunks[0]
    repeats = [c for c in chunks if c.text_hash == first.text_hash]
    assert len(repeats) > 2
    assert [c.chunk_id for c in repeats] == [content_chunk_id("doc", first.text_hash, k) for k in range(len(repeats))]
    assert repeats[0].chunk_id == f"doc-{first.text_hash[:16]}"
    again = chunk_document(ParsedDocument.from_dict(doc.to_dict()), "doc", "token", {"chunk_token_num": 64})
    assert [c.chunk_id for c in again] == ids
    other = chunk_document(doc, "other", "token", {"chunk_token_num": 64})
    assert {c.chunk_id for c in other}.isdisjoint(ids)


def test_cuts_prefer_the_block_end_before_a_heading() -> None:
    """Of the block ends inside the window, the one before a heading wins: a chunk then begins
    with its section (in heading mode, folded into the path)."""
    rng = random.Random(5)
    blocks = []
    for s in range(8):
        blocks.append(Block(BlockKind.HEADING, f"Part {s}", level=2))
        blocks += [Block(BlockKind.PARAGRAPH, _paragraph(rng)) for _ in range(3)]
    chunks = chunk_document(ParsedDocument(blocks), "doc", "heading", {"chunk_token_num": 256, "cross_sections": True})
    starts = [c.metadata.get("heading_folded", 0) > 0 for c in chunks]
    assert sum(starts) >= len(chunks) - 1, [c.text[:40] for c in chunks]
