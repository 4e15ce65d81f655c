"""Property tests of the token and heading chunkers over random mixed documents."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from include.contract import Block, BlockKind, ParsedDocument, content_chunk_id, text_hash
from plugins.chunkers import chunk_document
from plugins.chunkers.table import TableRows, render_row
from plugins.chunkers.tokenizer import count_tokens
from tests.chunkers.strategies import documents, nonws

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
limits = st.sampled_from([32, 48, 64, 100, 512])


@st.composite
def configs(draw: st.DrawFn) -> dict:
    limit = draw(limits)
    overlap = draw(st.sampled_from([0, 0, 1, 5, 16]))
    return {"chunk_token_num": limit, "overlap_tokens": min(overlap, limit // 2)}


def _expected_stream(doc: ParsedDocument) -> tuple[str, str]:
    """Non-whitespace characters the text chunks and the table chunks must reproduce, in order."""
    text, tables = [], []
    for b in doc.blocks:
        if b.kind == BlockKind.TABLE:
            t = TableRows.from_block(b, [])
            rendered = [render_row(t.header, r) for r in t.rows]
            tables.append(nonws("".join(rendered)))
        else:
            text.append(nonws(b.text))
    return "".join(text), "".join(tables)


def _bodies(chunks, kind: str) -> str:
    out = []
    for c in chunks:
        if c.kind != kind:
            continue
        prefix = c.metadata.get("prefix_chars", 0)
        folded = c.metadata.get("heading_folded", 0)
        if folded:
            out.extend(nonws(h) for h in c.heading_path[-folded:])
        out.append(nonws(c.text[prefix + c.metadata.get("overlap_chars", 0) :]))
    return "".join(out)


def _check_common(doc: ParsedDocument, chunks, limit: int) -> None:
    seen: dict[str, int] = {}
    for seq, c in enumerate(chunks):
        assert c.token_count == count_tokens(c.text), c.text
        assert c.token_count <= limit
        # The id follows the text: the k-th chunk with the same text in the document gets "-k".
        occurrence = seen.get(c.text_hash, 0)
        seen[c.text_hash] = occurrence + 1
        assert c.sequence == seq and c.chunk_id == content_chunk_id("doc", c.text_hash, occurrence)
        assert c.doc_id == "doc"
        assert c.text_hash == text_hash(c.text)
        # Tables never share a chunk with prose: a chunk's positions are all of one kind.
        kinds = {doc.blocks[p.line - 1].kind == BlockKind.TABLE for p in c.positions}
        assert kinds == {c.kind == "table"}, (c.kind, c.positions)


def _check_overlap(chunks, want: int) -> None:
    for prev, c in itertools.pairwise(chunks):
        chars = c.metadata.get("overlap_chars", 0)
        if not chars:
            continue
        assert want and c.kind == "text" and prev.kind == "text"
        start = c.metadata.get("prefix_chars", 0)
        repeated = c.text[start : start + chars]
        assert prev.text.endswith(repeated)
        got = count_tokens(repeated)
        assert got == c.metadata["overlap_tokens"] <= want
        if got != want:
            # "Where a boundary allows": no start in the previous chunk's body gives exactly `want`.
            body = prev.text[prev.metadata.get("prefix_chars", 0) :]
            assert all(count_tokens(body[i:]) != want for i in range(max(0, len(body) - 8 * want - 8), len(body)))


@SETTINGS
@given(blocks=documents(), cfg=configs())
def test_token_chunker_properties(blocks, cfg) -> None:
    doc = ParsedDocument(blocks)
    chunks = chunk_document(doc, "doc", "token", cfg)
    _check_common(doc, chunks, cfg["chunk_token_num"])
    text_stream, table_stream = _expected_stream(doc)
    assert _bodies(chunks, "text") == text_stream
    assert _bodies(chunks, "table") == table_stream
    _check_overlap(chunks, cfg["overlap_tokens"])
    # Same input, same chunks and ids.
    again = chunk_document(ParsedDocument.from_dict(doc.to_dict()), "doc", "token", cfg)
    assert [c.to_dict() for c in again] == [c.to_dict() for c in chunks]


def _sections(doc: ParsedDocument) -> list[int]:
    """Top-level section index of every block (a level-1-like heading opens a new one)."""
    from plugins.chunkers.token_chunker import heading_paths

    out, section = [], 0
    for block, path in zip(doc.blocks, heading_paths(doc.blocks), strict=True):
        if block.kind == BlockKind.HEADING and not path:
            section += 1
        out.append(section)
    return out


@SETTINGS
@given(blocks=documents(), cfg=configs())
def test_heading_chunker_properties(blocks, cfg) -> None:
    doc = ParsedDocument(blocks)
    chunks = chunk_document(doc, "doc", "heading", cfg)
    _check_common(doc, chunks, cfg["chunk_token_num"])
    text_stream, table_stream = _expected_stream(doc)
    assert _bodies(chunks, "text") == text_stream
    assert _bodies(chunks, "table") == table_stream
    _check_overlap(chunks, cfg["overlap_tokens"])
    sections = _sections(doc)
    for c in chunks:
        # Never across a top-level section boundary.
        assert len({sections[p.line - 1] for p in c.positions}) <= 1
        prefix = c.metadata.get("prefix_chars", 0)
        if prefix and c.kind == "text":  # (a table's prefix adds its header line)
            line = c.text[:prefix].rstrip("\n")
            # The path (outer headings dropped if too long); one level up when the chunk's body
            # starts with its own heading (not folded because the whole path did not fit).
            assert " > ".join(c.heading_path).endswith(line) or " > ".join(c.heading_path[:-1]).endswith(line)
            assert "\n" not in line
    again = chunk_document(doc, "doc", "heading", cfg)
    assert [c.to_dict() for c in again] == [c.to_dict() for c in chunks]


def test_exact_overlap_found_when_counts_are_not_monotonic() -> None:
    """Regression (found by this property test in CI): a longer tail can tokenize into fewer
    tokens, so the search for an exact overlap must not stop at the first overshoot."""
    case = json.loads((Path(__file__).parent / "golden" / "overlap_nonmonotonic_case.json").read_text("utf-8"))
    doc = ParsedDocument(blocks=[Block.from_dict(b) for b in case["blocks"]])
    chunks = chunk_document(doc, "doc", "heading", case["cfg"])
    _check_overlap(chunks, case["cfg"]["overlap_tokens"])
