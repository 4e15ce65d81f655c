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

__all__ = ["Line", "PageChars", "furniture", "lines_of", "norm", "page_chars", "paragraphs"]

_SYMBOL_BULLETS = str.maketrans({"\uf0b7": "•", "\uf0a7": "▪", "\uf076": "•", "\uf0d8": "•", "\uf0fc": "✓"})
_DIGITS = re.compile(r"\d+")
_BREAKS = frozenset("\r\n")


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


def page_chars(textpage: Any, page_height: float, max_chars: int) -> PageChars:
    """Every character of ``textpage`` (up to ``max_chars``) with its box, through pdfium's C API.

    One C call per value instead of pypdfium2's per-character wrappers: ~2 µs a character.
    UTF-16 surrogate halves (pdfium reports a non-BMP character as two) are joined, a lone
    half is dropped, so no unencodable string leaves the parser.
    """
    import pypdfium2.raw as pdfium_c  # pdfium's native library loads with the first PDF only

    raw = textpage.raw
    n = min(pdfium_c.FPDFText_CountChars(raw), max_chars)
    left, right, bottom, top = (ctypes.c_double() for _ in range(4))
    out = PageChars(textpage=textpage)
    text, boxes = out.text, out.boxes
    get_unicode, get_box = pdfium_c.FPDFText_GetUnicode, pdfium_c.FPDFText_GetCharBox
    pending_high = 0
    for i in range(n):
        code = get_unicode(raw, i)
        if 0xD800 <= code <= 0xDFFF:
            high, pending_high = pending_high, (code if code <= 0xDBFF else 0)
            code = 0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00) if high and code >= 0xDC00 else 0
        else:
            pending_high = 0
        if get_box(raw, i, left, right, bottom, top):
            boxes.append((left.value, page_height - top.value, right.value, page_height - bottom.value))
        else:
            boxes.append((0.0, 0.0, 0.0, 0.0))
        text.append(chr(code) if code else "")
    return out


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
