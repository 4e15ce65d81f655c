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
