"""Markdown and plain-text parsers."""

from __future__ import annotations

import pytest

from include.contract import BlockKind, ParseError, ParseErrorCode, RawDocument
from plugins.parsers import parse_document

MD = """---
title: Front title
tags: [a, b]
---
# Top

Para with *emph*, `code` and [a link](http://x).

Euler: $e^{i\\pi} + 1 = 0$ and $a_1 * b_1$.

## Lists

3. three
4. four
   - sub item
     continued

| Name | Qty |
|------|-----|
| pear | 2   |

```python
print("hi")
```

<div>raw <b>html</b></div>
"""


def _parse(data: bytes, name: str, declared: str | None = None):
    return parse_document(RawDocument("k", data, name, media_type=declared))


def test_markdown_structure():
    doc = _parse(MD.encode(), "doc.md")
    assert doc.parser == "markdown"
    assert doc.title == "Front title"
    assert doc.metadata["tags"] == ["a", "b"]
    kinds = [b.kind for b in doc.blocks]
    assert kinds == [
        BlockKind.HEADING,
        BlockKind.PARAGRAPH,
        BlockKind.PARAGRAPH,
        BlockKind.HEADING,
        BlockKind.LIST,
        BlockKind.TABLE,
        BlockKind.CODE,
        BlockKind.PARAGRAPH,
    ]
    assert doc.blocks[0].positions[0].line == 5  # line numbers count the front matter
    assert doc.blocks[1].text == "Para with emph, code and a link."
    # math stays literal (no emphasis eaten)
    assert doc.blocks[2].text == "Euler: $e^{i\\pi} + 1 = 0$ and $a_1 * b_1$."
    assert doc.blocks[4].text == "3. three\n4. four\n  - sub item\n    continued"
    assert doc.blocks[4].heading_path == ["Top", "Lists"]
    assert doc.blocks[5].header == ["Name", "Qty"] and doc.blocks[5].rows == [["pear", "2"]]
    assert doc.blocks[6].text == 'print("hi")' and doc.blocks[6].metadata["language"] == "python"
    assert doc.blocks[7].text == "raw html"


def test_markdown_gbk_detected():
    text = "# 标题\n\n这是中文的段落内容，用于检测编码是否正确识别出来。" * 2
    doc = _parse(text.encode("gbk"), "zh.md")
    assert doc.blocks[0].text == "标题"


def test_text_paragraphs_lines_and_encodings():
    doc = _parse("first line\nsecond\n\n\nnext para\n".encode("utf-16"), "a.txt")
    assert [(b.text, b.positions[0].line) for b in doc.blocks] == [("first line\nsecond", 1), ("next para", 5)]
    sj = "日本語のテキストファイルです。文字コードはシフトJISです。" * 3
    assert _parse(sj.encode("shift_jis"), "j.txt", "text/plain; charset=shift_jis").text == sj


def test_empty_text_is_typed_error():
    with pytest.raises(ParseError) as err:
        _parse(b"  \n\n ", "blank.txt")
    assert err.value.code == ParseErrorCode.EMPTY


def test_markdown_reference_definitions_are_not_text():
    md = b"See [the docs][docs] and [site].\n\n[docs]: https://example.com/docs\n[site]: https://example.com\n\n```\n[kept]: in code\n```\n"
    doc = _parse(md, "r.md")
    assert [b.text for b in doc.blocks] == ["See the docs and [site].", "[kept]: in code"]
    assert doc.blocks[1].positions[0].line == 6


_SECTION = """## Section {i}

Intro paragraph {i} with *emphasis* and a [link](http://x/{i}).

- item one of {i}

  continued after a blank line (still the item)
- item two
  lazy continuation

> quoted {i}

Next paragraph after the quote.

```text
# not a heading inside a fence {i}

Alpha line inside the fence
```

<!-- a comment that spans

Lines that look like paragraphs {i}
-->

    indented code {i}

Setext title {i}
================

| a | b |
|---|---|
| {i} | x |

"""


def test_large_markdown_parses_in_pieces_to_the_same_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces are cut only where every block has ended: the same blocks and lines as one parse."""
    from plugins.parsers import markdown

    data = ("# Big\n\n" + "".join(_SECTION.format(i=i) for i in range(400))).encode()
    pieces = list(markdown._segments(data.decode(), target=2_000))
    assert len(pieces) > 50  # really cut
    assert "\n".join(p for p, _ in pieces) == data.decode()
    for piece, first in pieces:
        assert not piece.startswith(("Lines that look", "Alpha line", "  continued"))
        assert data.decode().split("\n")[first] == piece.split("\n")[0]
    monkeypatch.setattr(markdown, "_SEGMENT_CHARS", 2_000)
    pieced = _parse(data, "big.md")
    monkeypatch.setattr(markdown, "_SEGMENT_CHARS", 10**9)
    whole = _parse(data, "big.md")
    assert [b.to_dict() for b in pieced.blocks] == [b.to_dict() for b in whole.blocks]
    kinds = {b.kind for b in whole.blocks}
    assert {BlockKind.HEADING, BlockKind.LIST, BlockKind.TABLE, BlockKind.CODE, BlockKind.PARAGRAPH} <= kinds


def test_large_markdown_peak_memory_is_bounded_by_the_piece_size() -> None:
    """markdown-it's token stream is ~80x its text; in pieces the peak no longer grows with the file."""
    import tracemalloc

    data = ("# Big\n\n" + "".join(_SECTION.format(i=i) for i in range(4_000))).encode()  # ~2 MiB
    tracemalloc.start()
    try:
        doc = _parse(data, "big.md")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(doc.blocks) > 30_000
    # The result itself (blocks, positions) is a few times the input; the parse adds a bounded
    # amount on top (one piece's tokens), instead of 80x the whole file.
    assert peak < 64 * 1024 * 1024 + 12 * len(data), f"peak {peak / 2**20:.1f} MiB for {len(data) / 2**20:.1f} MiB"
