"""Put a doc's place in the repo (its TOC path) in front of its Markdown, as headings.

The chunker is given no document-level path: it builds every chunk's heading path from the
heading blocks the parser finds. So the connector writes the path into the text it hands over:
``# <repo>`` / ``## <TOC title>`` ... / ``#### <doc title>``, and moves the doc's own headings
down by as many levels, so that they nest under the path instead of replacing it. Headings are
found with markdown-it (the parser's own library), so ``#`` lines inside code fences and HTML
blocks are left alone. Markdown has six levels: headings pushed past ``######`` stay at six, and
when the path itself is longer than five, its outer entries are dropped (the innermost, nearest
context is the useful one).
"""

from __future__ import annotations

import re

import yaml
from markdown_it import MarkdownIt

__all__ = ["with_heading_path"]

_MAX_LEVEL = 6
_ATX = re.compile(r"^( {0,3})(#{1,6})(?=[ \t]|$)")


def _escape(title: str) -> str:
    # a title must stay one heading line whose text is the title (no trailing #'s eaten)
    return " ".join(title.split()).replace("#", "\\#") or "-"


def _demote(markdown: str, by: int) -> str:
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    md.core.ruler.disable("inline")
    lines = markdown.splitlines(keepends=True)
    for token in md.parse(markdown):
        if token.type != "heading_open" or token.map is None:
            continue
        level = min(int(token.tag[1:]) + by, _MAX_LEVEL)
        start, end = token.map
        if token.markup in ("=", "-"):  # setext: text lines, then the underline
            text = " ".join(line.strip() for line in lines[start : end - 1])
            newline = "\n" if lines[end - 1].endswith("\n") else ""
            lines[start:end] = [f"{'#' * level} {text}{newline}"] + [""] * (end - start - 1)
        else:
            m = _ATX.match(lines[start])
            if m is not None:
                lines[start] = m.group(1) + "#" * level + lines[start][m.end() :]
    return "".join(lines)


def with_heading_path(markdown: str, path: list[str], title: str | None = None) -> str:
    """``markdown`` under the headings ``path`` (outermost first). ``title`` goes in YAML front
    matter, which the Markdown parser takes as the document title (else the first heading, the
    repo name here, would be)."""
    path = [p for p in path if p and p.strip()]
    if not path:
        return markdown
    path = path[-(_MAX_LEVEL - 1) :]
    head = "".join(f"{'#' * depth} {_escape(entry)}\n\n" for depth, entry in enumerate(path, start=1))
    front = ""
    if title and not markdown.startswith("---"):  # a body with its own front matter keeps it first
        front = "---\n" + yaml.safe_dump({"title": title}, allow_unicode=True, width=10_000) + "---\n"
    return front + head + _demote(markdown, len(path))
