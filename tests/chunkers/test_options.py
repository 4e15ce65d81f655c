"""Options: validation, the seed's delimiter syntax, overlap in tokens, lineage stamps."""

from __future__ import annotations

import itertools

import pytest

from include.contract import Block, BlockKind, ParsedDocument, options_hash
from plugins.chunkers import chunk_document
from plugins.chunkers.options import ChunkOptions, parse_delimiters
from plugins.chunkers.tokenizer import count_tokens


def test_delimiter_syntax() -> None:
    assert parse_delimiters("\n。；！？!?;") == tuple("\n。；！？!?;")
    # Backticks: one multi-character delimiter; longest first.
    assert parse_delimiters("。`\n\n`;`---`") == ("---", "\n\n", "。", ";")
    assert parse_delimiters(r"`\n\n`") == ("\n\n",)  # escaped newlines from single-quoted YAML


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"chunk_token_num": 8}, "chunk_token_num"),
        ({"overlap_tokens": 300}, "overlap_tokens=300 exceeds half"),
        ({"chunk_sise": 100}, "chunk_sise"),
        ({"delimiters": ""}, "delimiters"),
        ({"max_prefix_tokens": 500}, "max_prefix_tokens"),
    ],
)
def test_invalid_options_fail_loudly(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ChunkOptions.from_mapping(options)


def test_multi_character_delimiter_splits_long_blocks() -> None:
    text = "第一段内容很长。" * 20 + "\n\n" + "second part " * 30
    doc = ParsedDocument([Block(BlockKind.PARAGRAPH, text)])
    chunks = chunk_document(doc, "d", "token", {"chunk_token_num": 200, "delimiters": "`\n\n`"})
    assert chunks[0].text.endswith("\n\n")  # the delimiter stays with its sentence: nothing lost
    assert chunks[1].text.startswith("second part")


def test_long_sentence_without_delimiters_is_split_at_token_ends() -> None:
    text = "没有任何标点的超长句子" * 200
    chunks = chunk_document(ParsedDocument([Block(BlockKind.PARAGRAPH, text)]), "d", "token", {"chunk_token_num": 100})
    assert "".join(c.text for c in chunks) == text
    assert all(c.token_count <= 100 for c in chunks)
    assert sum(c.token_count >= 95 for c in chunks) >= len(chunks) - 1  # full chunks, not slivers


def test_overlap_is_counted_in_tokens() -> None:
    text = "".join(f"Item {i} is described here; 第{i}项的说明在这里！" for i in range(60))
    chunks = chunk_document(
        ParsedDocument([Block(BlockKind.PARAGRAPH, text)]), "d", "token", {"chunk_token_num": 80, "overlap_tokens": 12}
    )
    assert len(chunks) > 3
    exact = 0
    for prev, c in itertools.pairwise(chunks):
        repeated = c.text[: c.metadata["overlap_chars"]]
        assert prev.text.endswith(repeated)
        got = count_tokens(repeated)
        assert got == c.metadata["overlap_tokens"] <= 12
        if got == 12:
            exact += 1
        else:  # e.g. "块" is two byte tokens: no start in the previous chunk gives exactly 12
            assert all(count_tokens(prev.text[i:]) != 12 for i in range(len(prev.text)))
    assert exact >= len(chunks) // 2


def test_lineage_stamp() -> None:
    opts = {"chunk_token_num": 128}
    (chunk,) = chunk_document(ParsedDocument([Block(BlockKind.PARAGRAPH, "hi")]), "d", "token", opts)
    assert chunk.metadata["chunker"] == "token"
    assert chunk.metadata["chunker_options_hash"] == options_hash(opts)


def test_unknown_chunker_names_the_known_ones() -> None:
    from plugins.chunkers.registry import get_chunker

    assert get_chunker("heading").name == "heading"
    with pytest.raises(KeyError, match=r"unknown chunker 'tokens'; known: \['heading', 'token'"):
        chunk_document(ParsedDocument([Block(BlockKind.PARAGRAPH, "hi")]), "d", "tokens")
