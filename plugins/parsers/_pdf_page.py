"""One PDF page's lines and tables, reading every character's box only where a table may be.

A character's box costs a C call (~1 µs) and most pages have no table: reading them all took
the text engine on the real corpus from 308 to 96 pages/s. So each page is first read cheaply
(its text in one call, each line's box from pdfium's rectangles, ``_pdf_layout.text_lines``)
and checked for table candidates:

* ruled: a group of cells drawn by the page's path objects that makes a grid of two rows and
  two columns or more (``_pdf_tables.grid_of``, computed from the paths alone);
* unruled: three consecutive lines that each have a gap wider than ``MIN_GAP`` line heights
  at a run of spaces (pdfium puts a space into every gap it sees between words, the
  assumption ``_pdf_tables._pieces`` makes too), one of them a gap the other two leave free
  (the x-gaps line up), judged from the boxes of the two characters around each space run.

Only a page with a candidate reads every character's box (``page_chars``) and goes through
``find_tables``; its lines then come from those boxes, as before. Each check is looser than the
detection it stands in for, so it never drops a table the full path would find.
Private to the PDF parser.
"""

from __future__ import annotations

import ctypes
import itertools
import re
from dataclasses import dataclass
from typing import Any

from include.contract import ParseError, ParseErrorCode
from plugins.parsers._common import Deadline
from plugins.parsers._pdf_layout import Line, TextLines, flat_text, lines_of, page_chars, page_text, text_lines
from plugins.parsers._pdf_tables import MIN_GAP, PageTables, RuledScan, find_tables, grid_of, scan_rules

__all__ = ["PageRead", "read_page"]

_SPACE_RUN = re.compile(r"\s+")
_LINE_END = re.compile("[\r\n]")
_RUN = 3  # rows an unruled table needs (``_pdf_tables._unruled``)


@dataclass(slots=True)
class PageRead:
    lines: list[Line]
    found: PageTables
    char_boxes_read: bool  # whether the page went through every character's box


def read_page(page: Any, textpage: Any, height: float, max_chars: int, deadline: Deadline | None) -> PageRead:
    """The page's lines and, given a deadline for them, its tables (none once it has run out)."""
    text = page_text(textpage, max_chars)
    flat = flat_text(text)
    cheap = text_lines(textpage, text, flat, height)
    lines = cheap.lines
    if deadline is None or not lines:
        return PageRead(lines, PageTables([]), False)
    if deadline.remaining <= 0:
        return PageRead(lines, PageTables([], "time budget"), False)
    try:
        rules = scan_rules(page, height, deadline)
        if not _has_candidates(textpage, flat, cheap, rules, deadline):
            return PageRead(lines, PageTables([], rules.skipped), False)
    except ParseError as exc:
        if exc.code != ParseErrorCode.TIMEOUT:
            raise
        return PageRead(lines, PageTables([], "time budget"), False)
    chars = page_chars(textpage, height, max_chars, text)
    lines = lines_of(chars)
    found = find_tables(page, chars, lines, height, deadline, rules)
    chars.textpage = None
    if found.tables:
        taken = set().union(*(t.members for t in found.tables))
        lines = lines_of(chars, [i in taken for i in range(len(chars.text))])
    return PageRead(lines, found, True)


def _has_candidates(textpage: Any, flat: str, cheap: TextLines, rules: RuledScan, deadline: Deadline) -> bool:
    if any(grid_of(cells) is not None for cells in rules.groups):
        return True
    return _aligned_run(textpage.raw, flat, cheap, deadline)


def _aligned_run(raw: Any, flat: str, cheap: TextLines, deadline: Deadline) -> bool:
    """Whether a run of lines ``_pdf_tables._unruled`` would try could hold an aligned table.

    The runs are built as there (consecutive lines cut at wide gaps, at most three line heights
    apart), from each line's gaps (:func:`_line_gaps`); a run, or it without its first or last
    line, may be a table only if each of its rows has a gap that all its rows leave free: the
    table's columns are separated by whitespace running down all rows, and every row has cells
    on both sides of one such separator."""
    run: list[tuple[Line, _Gaps]] = []
    for line, spans in [*zip(cheap.lines, cheap.spans, strict=True), (None, [])]:
        gaps = _line_gaps(raw, flat, line, spans) if line is not None else []
        adjacent = bool(run) and line is not None and line.top - run[-1][0].bottom <= 3.0 * line.height
        if gaps != [] and (adjacent or not run):
            run.append((line, gaps))  # type: ignore[arg-type]
            continue
        if len(run) >= _RUN and any(_columns_possible(part) for part in (run, run[1:], run[:-1], run[1:-1])):
            return True
        run = [(line, gaps)] if line is not None and gaps != [] else []
        deadline.check("pdf table candidates")
    return False


_Gaps = list[tuple[float, float]] | None  # a line's gaps (x from, x to); None: not measurable
_SLACK = 1.0  # points: a line's box from pdfium's rectangles may miss a character's by a glyph edge


def _line_gaps(raw: Any, flat: str, line: Line, spans: list[tuple[float, float]]) -> _Gaps:
    """Where ``_pdf_tables._pieces`` could cut the line, as x intervals (wider than ``MIN_GAP``
    line heights):

    * after each space run, between the characters around it (it holds the real gap: a piece's
      right edge is that character's, or past it for an overhanging glyph);
    * between consecutive text-object rectangles (cells set without a space between them);
    * across a word wider than :data:`_WIDE_GLYPH` line heights a character: its text object
      moved the pen without a space (a real file sets two cells as one word that way).

    A neighbour without a box, or one starting left of the previous one's start (a piece may
    restart there), makes the line unmeasurable: None."""
    if " " not in line.text:  # as ``_pieces``: no space, no gap
        return []
    end_match = _LINE_END.search(flat, line.first)
    end = end_match.start() if end_match else len(flat)
    span = flat[line.first : end]
    first, last = line.first + len(span) - len(span.lstrip()), line.first + len(span.rstrip())
    min_gap = MIN_GAP * line.height
    out: list[tuple[float, float]] = []
    for (x0, x1), (next_x0, _) in itertools.pairwise(spans):
        if next_x0 < x0 - _SLACK:
            return None
        if next_x0 - x1 > min_gap:
            out.append((x1, next_x0))
    word_start, word_x0 = first, line.x0
    for space in _SPACE_RUN.finditer(flat, first, last):
        before, after = _char_box(raw, space.start() - 1), _char_box(raw, space.end())
        if before is None or after is None or after[0] < before[0]:
            return None
        _wide_word(out, word_x0, before[1], space.start() - word_start, line.height)
        if after[0] - before[1] > min_gap:
            out.append((before[1], after[0]))
        word_start, word_x0 = space.end(), after[0]
    _wide_word(out, word_x0, line.x1, last - word_start, line.height)
    return out


_WIDE_GLYPH = 1.5  # line heights: wider than any glyph (a CJK one is about one line height)


def _wide_word(out: list[tuple[float, float]], x0: float, x1: float, n_chars: int, height: float) -> None:
    if x1 - x0 > n_chars * _WIDE_GLYPH * height + MIN_GAP * height:
        out.append((x0, x1))


def _columns_possible(rows: list[tuple[Line, _Gaps]]) -> bool:
    """Every row has a gap that no row covers (each covers its box less its gaps, with slack)."""
    if len(rows) < _RUN or any(gaps is None for _, gaps in rows):
        return len(rows) >= _RUN
    free: list[tuple[float, float]] = [(float("-inf"), float("inf"))]
    for line, gaps in rows:
        free = _uncovered(free, line, gaps or [])
        if not free:
            return False
    return all(any(lo < b and a < hi for lo, hi in gaps or [] for a, b in free) for _, gaps in rows)


def _uncovered(
    free: list[tuple[float, float]], line: Line, gaps: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """The parts of ``free`` (sorted, disjoint) outside what ``line`` covers: its box less its
    gaps, widened by the slack; sorted and disjoint again, so a long run stays linear."""
    holes: list[list[float]] = []
    for lo, hi in sorted([(float("-inf"), line.x0 + _SLACK), *((g0 - _SLACK, g1 + _SLACK) for g0, g1 in gaps)]):
        if holes and lo <= holes[-1][1]:
            holes[-1][1] = max(holes[-1][1], hi)
        else:
            holes.append([lo, hi])
    if holes[-1][1] >= line.x1 - _SLACK:
        holes[-1][1] = float("inf")
    else:
        holes.append([line.x1 - _SLACK, float("inf")])
    out, k = [], 0
    for lo, hi in free:  # both sorted: one merge pass
        while k < len(holes) and holes[k][1] <= lo:
            k += 1
        j = k
        while j < len(holes) and holes[j][0] < hi:
            a, b = max(lo, holes[j][0]), min(hi, holes[j][1])
            if a < b:
                out.append((a, b))
            j += 1
    return out


_LEFT, _RIGHT, _BOTTOM, _TOP = (ctypes.c_double() for _ in range(4))


def _char_box(raw: Any, i: int) -> tuple[float, float] | None:
    """The character's left and right edges, None without a box (``PageChars.has_box``)."""
    import pypdfium2.raw as pdfium_c  # loaded already: a text page is open

    if not pdfium_c.FPDFText_GetCharBox(raw, i, _LEFT, _RIGHT, _BOTTOM, _TOP):
        return None
    if not (_RIGHT.value > _LEFT.value or _TOP.value > _BOTTOM.value):
        return None
    return _LEFT.value, _RIGHT.value
