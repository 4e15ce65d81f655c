"""Heading-aware mode: every chunk starts with its heading path; top-level sections stay apart."""

from __future__ import annotations

from include.contract import Block, BlockKind, ParsedDocument
from plugins.chunkers import chunk_document
from plugins.chunkers.token_chunker import heading_paths


def _doc() -> ParsedDocument:
    H, P = BlockKind.HEADING, BlockKind.PARAGRAPH
    return ParsedDocument(
        [
            Block(H, "Guide", level=1),
            Block(P, "Welcome."),
            Block(H, "Install", level=2),
            Block(P, "Run pip install tributary. " * 12),
            Block(H, "Linux", level=3),
            Block(P, "Use apt."),
            Block(H, "Reference", level=1),
            Block(P, "API docs."),
        ]
    )


def test_heading_paths_from_levels_and_from_parsers() -> None:
    doc = _doc()
    assert heading_paths(doc.blocks)[5] == ("Guide", "Install", "Linux")
    assert heading_paths(doc.blocks)[4] == ("Guide", "Install")  # a heading sits under its parents
    # Parsers give a heading's own path ending with itself.
    blocks = [
        Block(BlockKind.HEADING, "A", level=1, heading_path=["A"]),
        Block(BlockKind.PARAGRAPH, "x", heading_path=["A"]),
    ]
    assert heading_paths(blocks) == [(), ("A",)]


def test_chunks_start_with_their_heading_path() -> None:
    chunks = chunk_document(_doc(), "d", "heading", {"chunk_token_num": 64})
    texts = [c.text for c in chunks]
    assert texts[0] == "Guide\nWelcome.\nInstall"
    assert all(c.token_count <= 64 for c in chunks)
    install = [c for c in chunks if c.heading_path == ["Guide", "Install"]]
    assert len(install) >= 2  # the long paragraph continues under the same path
    assert all(c.text.startswith("Guide > Install\n") for c in install)
    assert texts[-1] == "Reference\nAPI docs."
    assert chunks[-1].metadata["heading_folded"] == 1


def test_no_chunk_crosses_a_top_level_section() -> None:
    chunks = chunk_document(_doc(), "d", "heading", {})
    assert [c.text for c in chunks] == [
        "Guide\nWelcome.\n" + "Install\n" + ("Run pip install tributary. " * 12) + "\nLinux\nUse apt.",
        "Reference\nAPI docs.",
    ]
    joined = chunk_document(_doc(), "d", "heading", {"cross_sections": True})
    assert len(joined) == 1 and joined[0].text.endswith("Linux\nUse apt.\nReference\nAPI docs.")


def test_prefix_counts_toward_the_limit_and_long_paths_are_shortened() -> None:
    H, P = BlockKind.HEADING, BlockKind.PARAGRAPH
    deep = [Block(H, f"Section number {i} with a long title", level=i + 1) for i in range(6)]
    doc = ParsedDocument([*deep, Block(P, "正文内容。" * 80)])
    chunks = chunk_document(doc, "d", "heading", {"chunk_token_num": 64})
    assert all(c.token_count <= 64 for c in chunks)
    prefixes = {c.text[: c.metadata["prefix_chars"]] for c in chunks[1:]}
    assert len(prefixes) == 1
    (prefix,) = prefixes
    assert prefix.endswith("Section number 5 with a long title\n")
    assert not prefix.startswith("Section number 0")  # outer headings dropped to fit limit / 4


def test_token_mode_has_no_prefix_but_keeps_heading_path() -> None:
    chunks = chunk_document(_doc(), "d", "token", {"chunk_token_num": 64})
    assert chunks[0].text.startswith("Guide\nWelcome.")
    assert chunks[0].heading_path == ["Guide"]
    assert all("prefix_chars" not in c.metadata for c in chunks)
