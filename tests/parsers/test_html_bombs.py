"""HTML at the size limits: a 20 MB page in bounded memory, huge text nodes and deep nesting kept.

Each case runs in a forked child under an address-space cap (tests/parsers/capped.py): the
peak RSS growth it reports is that child's high-water mark over its resident set at the fork.
"""

from __future__ import annotations

import pytest

from include.contract import ParsedDocument, ParseError
from tests.parsers.capped import MiB, run_capped
from tests.parsers.conftest import parse_bytes
from tests.parsers.html_golden import dense_page

_SENTENCE = "The committee reviews <b>section {i}</b> of the <a href='/doc/{i}'>handbook</a> in detail. "


def article_page(target: int) -> bytes:
    """An article of ``target`` bytes: headings, paragraphs of inline markup, lists."""
    parts = ["<!doctype html><html><head><title>Big</title></head><body><nav>Home</nav><article>"]
    size, i = len(parts[0]), 0
    while size < target:
        if i % 5 == 0:
            piece = f"<h2>Section {i}</h2>\n"
        elif i % 11 == 0:
            piece = "<ul>" + "".join(f"<li>point {j} of list {i}</li>" for j in range(4)) + "</ul>\n"
        else:
            piece = "<p>" + _SENTENCE.format(i=i) * 5 + "</p>\n"
        parts.append(piece)
        size += len(piece)
        i += 1
    parts.append("</article><footer>footer</footer></body></html>")
    return "".join(parts).encode()


def _outcome(data: bytes, name: str = "page.html") -> ParsedDocument | tuple[str, str]:
    try:
        return parse_bytes(data, name)
    except ParseError as err:  # a ParseError does not pickle
        return err.code.value, err.message


def test_a_20mb_page_parses_within_8x_its_size():
    data = article_page(20_000_000)
    result, growth = run_capped(lambda: _outcome(data), 2048 * MiB, timeout_s=240)
    assert isinstance(result, ParsedDocument), result
    assert result.blocks[0].text == "Section 0"
    assert "of the handbook in detail." in result.blocks[1].text
    assert growth <= 8 * len(data), f"peak RSS growth {growth / len(data):.1f}x the page"


def test_a_dense_20mb_page_a_block_every_80_bytes_parses_within_12x_its_size():
    """Issue 36's dense page: 19.8x before the walker freed what it had read; 10.1-10.5x now.

    The issue's goal is 8x; the bound here is what this parser keeps with headroom (the block
    records alone are ~6x such a page: a Block, its text, a Position and its path per block).
    """
    data = dense_page(20_000_000)
    result, growth = run_capped(lambda: _outcome(data), 2048 * MiB, timeout_s=240)
    assert isinstance(result, ParsedDocument), result
    assert len(result.blocks) > len(data) // 80
    assert [b.text for b in result.blocks[:2]] == ["Part 0 of the reference", "Line 1 says something about the topic."]
    assert result.blocks[1].heading_path == ["Part 0 of the reference"]
    assert growth <= 12 * len(data), f"peak RSS growth {growth / len(data):.1f}x the page"


def test_a_text_node_over_libxml2s_10mb_limit_is_kept():
    words = "lorem ipsum dolor sit amet " * (12 * MiB // 27)
    data = f"<html><body><p>{words}</p><p>after the long one</p></body></html>".encode()
    result, _ = run_capped(lambda: _outcome(data), 1536 * MiB)
    assert isinstance(result, ParsedDocument), result
    assert [len(b.text) for b in result.blocks] == [len(words.strip()), len("after the long one")]


@pytest.mark.parametrize("depth", [300, 100_000])
def test_deep_nesting_keeps_its_text_and_what_follows(depth: int):
    nest = "<div>" * depth + "<p>deep text</p>" + "</div>" * depth
    data = f"<html><body><h1>Top</h1>{nest}<h2>After</h2><p>closing words</p></body></html>".encode()
    result, _ = run_capped(lambda: _outcome(data), 1024 * MiB)
    assert isinstance(result, ParsedDocument), result
    assert [b.text for b in result.blocks] == ["Top", "deep text", "After", "closing words"]
