"""Put a doc's place in the repo (its TOC path) in front of its Markdown, as headings.

The chunker is given no document-level path: it builds every chunk's heading path from the
heading blocks the parser finds. So the connector writes the path into the text it hands over:
``# <repo>`` / ``## <TOC title>`` ... / ``#### <doc title>``, and moves the doc's own headings
down by as many levels, so that they nest under the path instead of replacing it.

Headings are found by one pass over the lines (CommonMark's rules for ATX and setext headings,
fenced and indented code), not by a Markdown parser: a parser's token list for a body of many
tiny blocks costs hundreds of times the body in memory (3.8 MiB of one-line blocks took 1.9 GiB
and 35 s through markdown-it), and this runs in the fetch task on whatever Yuque sends. Markdown
has six levels: headings pushed past ``######`` stay at six, and when the path itself is longer
than five, its outer entries are dropped (the innermost, nearest context is the useful one).
"""

from __future__ import annotations

import re

import yaml

__all__ = ["with_heading_path"]

_MAX_LEVEL = 6
_ATX = re.compile(r"( {0,3})(#{1,6})(?=[ \t]|$)")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*")
# lines a setext underline cannot turn into a heading (CommonMark 4.3: only paragraph text can)
_FRONT_END = re.compile(r"\n(?:---|\.\.\.)[ \t]*(?:\r?\n|$)")
_NOT_PARAGRAPH = re.compile(r" {0,3}(?:[-+*][ \t]|\d{1,9}[.)][ \t]|>|#{1,6}(?:[ \t]|$)|(?:[-*_][ \t]*){3,}$)")


def _escape(title: str) -> str:
    # a title must stay one heading line whose text is the title (no trailing #'s eaten)
    return " ".join(title.split()).replace("#", "\\#") or "-"


def _demote(markdown: str, by: int) -> str:
    lines = markdown.splitlines(keepends=True)
    fence: str | None = None  # the open fence's marker, while inside a fenced code block
    paragraph = False  # the previous line is paragraph text (a setext underline may follow)
    for i, line in enumerate(lines):
        text = line.rstrip("\r\n")
        if fence is not None:
            m = _FENCE.match(text)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not text[m.end() :].strip():
                fence = None
            continue
        if m := _FENCE.match(text):
            fence, paragraph = m.group(1), False
            continue
        if not text.strip() or (text.startswith(("    ", "\t")) and not paragraph):
            paragraph = False  # blank, or indented code
            continue
        if m := _ATX.match(text):
            level = min(len(m.group(2)) + by, _MAX_LEVEL)
            lines[i] = m.group(1) + "#" * level + line[m.end() :]
            paragraph = False
            continue
        if paragraph and _SETEXT.fullmatch(text):
            level = min((1 if text.strip()[0] == "=" else 2) + by, _MAX_LEVEL)
            newline = lines[i - 1][len(lines[i - 1].rstrip("\r\n")) :]
            lines[i - 1] = "#" * level + " " + lines[i - 1].strip() + newline
            lines[i] = ""  # of a multi-line setext heading, only the last line becomes the heading
            paragraph = False
            continue
        paragraph = not _NOT_PARAGRAPH.match(text)
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
    front, body = _split_front_matter(markdown)
    if title and not front:  # a body with its own front matter keeps it (and its title)
        front = "---\n" + yaml.safe_dump({"title": title}, allow_unicode=True, width=10_000) + "---\n"
    return front + head + _demote(body, len(path))


def _split_front_matter(markdown: str) -> tuple[str, str]:
    """(the YAML front matter block, the rest); ("", markdown) when there is none."""
    if not markdown.startswith("---\n") and not markdown.startswith("---\r\n"):
        return "", markdown
    m = _FRONT_END.search(markdown, 3)
    return (markdown[: m.end()], markdown[m.end() :]) if m else ("", markdown)
