"""PDF page layout: pdfium's characters with boxes, lines, paragraphs and page furniture.

Coordinates are PDF points from the page's top-left corner, ``(x0, top, x1, bottom)``, the
convention of :class:`include.contract.Position`. Private to the PDF parser.
"""

from __future__ import annotations

import ctypes
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Line",
    "PageChars",
    "TextLines",
    "flat_text",
    "furniture",
    "lines_of",
    "norm",
    "page_chars",
    "page_text",
    "paragraphs",
    "text_lines",
]

_SYMBOL_BULLETS = str.maketrans({"\uf0b7": "•", "\uf0a7": "▪", "\uf076": "•", "\uf0d8": "•", "\uf0fc": "✓"})
_DIGITS = re.compile(r"\d+")
_BREAKS = frozenset("\r\n")
_Box = tuple[float, float, float, float]  # x0, top, x1, bottom


@dataclass(slots=True)
class Line:
    text: str
    x0: float
    top: float
    x1: float
    bottom: float
    first: int = 0  # index of its first character in pdfium's reading order (orders tables among lines)
    ocr: bool = False

    @property
    def height(self) -> float:
        return max(self.bottom - self.top, 0.1)


@dataclass(slots=True)
class PageChars:
    """One page's characters in pdfium's reading order, each with its box (zero for generated ones).

    Index ``i`` is pdfium's character index ``i`` (a surrogate pair's first half is an empty
    string), so :meth:`weight` can ask pdfium about it while the text page is open.
    """

    text: list[str] = field(default_factory=list)
    boxes: list[tuple[float, float, float, float]] = field(default_factory=list)
    textpage: Any = None  # the open pdfium text page, for font weights (tables' header rows only)

    def has_box(self, i: int) -> bool:
        x0, top, x1, bottom = self.boxes[i]
        return x1 > x0 or bottom > top

    def weight(self, i: int) -> int:
        """The character's font weight (400 regular, 700 bold), 0 when unknown."""
        if self.textpage is None:
            return 0
        import pypdfium2.raw as pdfium_c  # loaded already: a text page is open

        return max(int(pdfium_c.FPDFText_GetFontWeight(self.textpage.raw, i)), 0)


def page_text(textpage: Any, max_chars: int) -> list[str]:
    """The page's characters (up to ``max_chars``) as strings, index ``i`` pdfium's character ``i``.

    One bulk ``FPDFText_GetText`` call instead of one C call per character. pdfium's text buffer
    matches its character list except where it writes U+FFFE for a marker character (those
    characters are asked one by one), drops a control character or splits a non-BMP one (those
    pages, 10 of 513 on the real corpus, are read one character at a time, as
    :func:`_unicode_by_char` always did), so the result is the same.
    """
    import pypdfium2.raw as pdfium_c  # pdfium's native library loads with the first PDF only

    raw = textpage.raw
    n = min(pdfium_c.FPDFText_CountChars(raw), max_chars)
    if n <= 0:
        return []
    buffer = ctypes.create_string_buffer(2 * (n + 1))
    written = pdfium_c.FPDFText_GetText(raw, 0, n, ctypes.cast(buffer, ctypes.POINTER(ctypes.c_ushort)))
    bulk = buffer.raw[: 2 * max(written - 1, 0)].decode("utf-16-le", "surrogatepass")
    if len(bulk) != n or _SURROGATE.search(bulk):
        return _unicode_by_char(raw, n)
    text = list(bulk)
    for marker in _MARKER.finditer(bulk):  # where pdfium's buffer says U+FFFE, ask the character
        code = pdfium_c.FPDFText_GetUnicode(raw, marker.start())
        if 0xD800 <= code <= 0xDFFF:
            return _unicode_by_char(raw, n)
        text[marker.start()] = chr(code) if code else ""
    return text


_SURROGATE = re.compile("[\ud800-\udfff]")
_MARKER = re.compile("\ufffe")


def _unicode_by_char(raw: Any, n: int) -> list[str]:
    """Per-character text: UTF-16 surrogate halves (pdfium reports a non-BMP character as two)
    are joined, the first half an empty string, a lone half dropped, so no unencodable string
    leaves the parser."""
    import pypdfium2.raw as pdfium_c  # loaded already: a text page is open

    get_unicode = pdfium_c.FPDFText_GetUnicode
    text: list[str] = []
    pending_high = 0
    for i in range(n):
        code = get_unicode(raw, i)
        if 0xD800 <= code <= 0xDFFF:
            high, pending_high = pending_high, (code if code <= 0xDBFF else 0)
            code = 0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00) if high and code >= 0xDC00 else 0
        else:
            pending_high = 0
        text.append(chr(code) if code else "")
    return text


def page_chars(textpage: Any, page_height: float, max_chars: int, text: list[str] | None = None) -> PageChars:
    """Every character of ``textpage`` (up to ``max_chars``) with its box, through pdfium's C API.

    One C call per box (~1 µs a character): only pages with table candidates need this;
    ``text`` is :func:`page_text`'s result when the caller has it already.
    """
    import pypdfium2.raw as pdfium_c  # pdfium's native library loads with the first PDF only

    raw = textpage.raw
    out = PageChars(text=text if text is not None else page_text(textpage, max_chars), textpage=textpage)
    left, right, bottom, top = (ctypes.c_double() for _ in range(4))
    boxes, get_box = out.boxes, pdfium_c.FPDFText_GetCharBox
    for i in range(len(out.text)):
        if get_box(raw, i, left, right, bottom, top):
            boxes.append((left.value, page_height - top.value, right.value, page_height - bottom.value))
        else:
            boxes.append((0.0, 0.0, 0.0, 0.0))
    return out


def flat_text(text: list[str]) -> str:
    """:func:`page_text`'s characters as one string, one slot per index (U+FFFE for an empty one)."""
    return "".join(ch or "\ufffe" for ch in text) if "" in text else "".join(text)


@dataclass(slots=True)
class TextLines:
    lines: list[Line]
    spans: list[list[tuple[float, float]]]  # per line, the x ranges of its rectangles, in reading order


def text_lines(textpage: Any, text: list[str], flat: str, page_height: float) -> TextLines:
    """pdfium's text lines with boxes from its own rectangles, never a character's box.

    ``FPDFText_CountRects`` unites, in C, the boxes of a range's characters (one rectangle per
    run of a text object's characters): over a line's span from its first to its last non-space
    character that is the union :func:`lines_of` builds from every character's box (real
    corpus: 2 of 13,492 lines differ, by a space glyph's or a mirrored glyph's box), for a few
    calls a line. The rectangles' x ranges are kept: a table's cells are often text objects.
    """
    import pypdfium2.raw as pdfium_c  # loaded already: a text page is open

    raw = textpage.raw
    left, top, right, bottom = (ctypes.c_double() for _ in range(4))
    out = TextLines([], [])
    for match in _LINE_SPAN.finditer(flat):
        start, end = match.span()
        span = match.group()
        stripped = "".join(text[start:end]).strip()
        if not stripped:
            continue
        first, last = start + len(span) - len(span.lstrip()), start + len(span.rstrip())
        box: _Box | None = None
        xs: list[tuple[float, float]] = []
        for k in range(pdfium_c.FPDFText_CountRects(raw, first, last - first)):
            pdfium_c.FPDFText_GetRect(raw, k, left, top, right, bottom)
            if left.value == right.value == top.value == bottom.value == 0.0:
                continue  # pdfium's empty rectangle: no character in the span has a box
            rect = (left.value, page_height - top.value, right.value, page_height - bottom.value)
            box = rect if box is None else _union(box, rect)
            xs.append((left.value, right.value))
        out.lines.append(Line(stripped.translate(_SYMBOL_BULLETS), *(box or (0.0, 0.0, 0.0, 0.0)), first=start))
        out.spans.append(xs)
    return out


_LINE_SPAN = re.compile("[^\r\n]+")


def _union(a: _Box, b: _Box) -> _Box:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


def lines_of(chars: PageChars, skip: Sequence[bool] | None = None) -> list[Line]:
    """pdfium's text lines; characters flagged in ``skip`` (a table's) cut a line into pieces."""
    lines: list[Line] = []
    start = -1
    for i, ch in enumerate(chars.text):
        cut = ch in _BREAKS or (skip is not None and skip[i])
        if cut:
            if start >= 0:
                _append_line(lines, chars, start, i)
            start = -1
        elif start < 0:
            start = i
    if start >= 0:
        _append_line(lines, chars, start, len(chars.text))
    return lines


def _append_line(lines: list[Line], chars: PageChars, start: int, end: int) -> None:
    text = "".join(chars.text[start:end])
    stripped = text.strip()
    if not stripped:
        return
    boxed = [chars.boxes[i] for i in range(start, end) if chars.has_box(i) and not chars.text[i].isspace()]
    if boxed:
        box = (
            min(b[0] for b in boxed),
            min(b[1] for b in boxed),
            max(b[2] for b in boxed),
            max(b[3] for b in boxed),
        )
    else:
        box = (0.0, 0.0, 0.0, 0.0)
    lines.append(Line(stripped.translate(_SYMBOL_BULLETS), *box, first=start))


def furniture(pages: list[list[Line]], heights: list[float]) -> set[tuple[int, int]]:
    """(page, line) indices of header/footer lines repeated on most pages.

    Only lines in the top or bottom margin band (10% of the page) qualify, so a chapter title
    or a repeated sentence in the body is never mistaken for furniture; digits are ignored so
    running page numbers match.
    """
    if len(pages) < 3:
        return set()
    threshold = max(3, int(len(pages) * 0.5 + 0.5))
    drop: set[tuple[int, int]] = set()
    for edge in ("head", "foot"):
        for depth in range(2):  # the first/last two lines of a page
            keys: list[tuple[int, int, str]] = []
            for p, lines in enumerate(pages):
                if len(lines) <= depth:
                    continue
                idx = depth if edge == "head" else len(lines) - 1 - depth
                line, band = lines[idx], 0.1 * heights[p]
                if (edge == "head" and line.bottom > band) or (edge == "foot" and line.top < heights[p] - band):
                    continue
                keys.append((p, idx, _DIGITS.sub("#", " ".join(line.text.lower().split()))))
            counts = Counter(k for _, _, k in keys)
            for p, idx, key in keys:
                if counts[key] >= threshold:
                    drop.add((p, idx))
    return drop


def paragraphs(lines: list[Line], titles: set[str]) -> list[list[Line]]:
    """Group lines into paragraphs; a line equal to an outline title always stands alone."""
    groups: list[list[Line]] = []
    for line in lines:
        alone = norm(line.text) in titles
        if groups and not alone and norm(groups[-1][-1].text) not in titles:
            prev = groups[-1][-1]
            gap = line.top - prev.bottom
            tallest = max(prev.height, line.height)
            # glyph boxes are ~0.7 of the font size, so normal leading leaves a gap below one box height
            size_change = abs(line.height - prev.height) > 0.4 * tallest
            jumped = line.top < prev.top - prev.height  # new column or out-of-order object
            if gap <= 1.0 * tallest and not size_change and not jumped and line.ocr == prev.ocr:
                groups[-1].append(line)
                continue
        groups.append([line])
    return groups


def norm(text: str) -> str:
    return " ".join(text.lower().split())
