"""One PDF page's lines and tables, reading every character's box only where a table may be.

A character's box costs a C call (~1 µs) and most pages have no table: reading them all took
the text engine on the real corpus from 308 to 96 pages/s. So each page is first read cheaply
(its text in one call, each line's box from pdfium's rectangles, ``_pdf_layout.text_lines``)
and checked for table candidates:

* ruled: a group of cells drawn by the page's path objects that makes a grid of two rows and
  two columns or more (``_pdf_tables.grid_of``, computed from the paths alone);
* unruled: a run of lines as ``_pdf_tables._unruled`` builds them (each cut by a gap wider
  than ``MIN_GAP`` line heights, at most three line heights apart), of three lines or more,
  where every row has a gap that all rows leave free (the x-gaps line up into a column
  separator). Gaps are read from the two characters around each space run, the line's
  text-object rectangles, and words too wide for their characters (cells set without a space).

Only a page with a candidate reads every character's box (``page_chars``) and goes through
``find_tables``; its lines then come from those boxes, as before. Each check is looser than
the detection it stands in for, given what ``_pieces`` assumes too (pdfium puts a space or a
new text object into a gap; a gap inside a short word of one text object, with no space, is
the case neither sees). On 238 PDFs (real corpus, ``pdf_tables``, ``parsers``) every table and
all text came out as before; one line's box differs (a space glyph's box, inside the line).
Private to the PDF parser.
"""

from __future__ import annotations

import ctypes
import itertools
import re
from collections.abc import Iterator
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
    apart), from each line's gaps (:class:`_Gaps`); a run, or it without its first or last line,
    may be a table only if each of its rows has a gap that all its rows leave free: the table's
    columns are separated by whitespace running down all rows, and every row has cells on both
    sides of one such separator. A line's gaps are measured as far as needed: its first gap
    says whether it extends a run, the rest only while a run still has a free gap in common."""
    gaps = _Gaps(raw, flat, cheap)
    lines = cheap.lines
    run: list[int] = []
    for k in [*range(len(lines)), -1]:
        gapped = k >= 0 and gaps.has_gap(k)
        adjacent = bool(run) and gapped and lines[k].top - lines[run[-1]].bottom <= 3.0 * lines[k].height
        if gapped and (adjacent or not run):
            run.append(k)
            continue
        if len(run) >= _RUN and _run_may_align(run, gaps):
            return True
        run = [k] if gapped else []
        deadline.check("pdf table candidates")
    return False


def _run_may_align(run: list[int], gaps: _Gaps) -> bool:
    # the run's second line is in all four parts tried: no gap of it free in the loosest part
    # (the run less its ends) is none in any part
    inner = run[1:-1]
    if len(inner) >= 1 and not _free_gap_of_first(inner, gaps):
        return False
    return any(_columns_possible(part, gaps) for part in (run, run[1:], run[:-1], inner) if len(part) >= _RUN)


_Intervals = list[tuple[float, float]]
_SLACK = 1.0  # points: a line's box from pdfium's rectangles may miss a character's by a glyph edge
_WIDE_GLYPH = 1.5  # line heights: wider than any glyph (a CJK one is about one line height)


class _Unmeasurable(Exception):
    """A line whose gaps cannot be told from the characters around its spaces."""


class _Gaps:
    """Each line's gaps (x from, x to), measured lazily and kept; None: not measurable."""

    def __init__(self, raw: Any, flat: str, cheap: TextLines) -> None:
        import pypdfium2.raw as pdfium_c  # loaded already: a text page is open

        self.raw, self.flat, self.cheap = raw, flat, cheap
        self.get_box = pdfium_c.FPDFText_GetCharBox
        self.found: dict[int, _Intervals | None] = {}

    def has_gap(self, k: int) -> bool:
        if k in self.found:
            return self.found[k] != []
        try:
            return next(self._measure(k), None) is not None
        except _Unmeasurable:
            self.found[k] = None
            return True

    def of(self, k: int) -> _Intervals | None:
        if k not in self.found:
            try:
                self.found[k] = list(self._measure(k))
            except _Unmeasurable:
                self.found[k] = None
        return self.found[k]

    def _measure(self, k: int) -> Iterator[tuple[float, float]]:
        """Where ``_pdf_tables._pieces`` could cut line ``k``, as x intervals (wider than
        ``MIN_GAP`` line heights): between consecutive text-object rectangles (cells set
        without a space between them); after each space run, between the characters around it
        (it holds the real gap: a piece's right edge is that character's, or past it for an
        overhanging glyph); across a word wider than :data:`_WIDE_GLYPH` line heights a
        character (its text object moved the pen without a space). A neighbour without a box,
        or one starting left of the previous one's start (a piece may restart there): raises."""
        line, spans, flat = self.cheap.lines[k], self.cheap.spans[k], self.flat
        if " " not in line.text:  # as ``_pieces``: no space, no gap
            return
        height = line.height
        min_gap = MIN_GAP * height
        for (x0, x1), (next_x0, _) in itertools.pairwise(spans):
            if next_x0 < x0 - _SLACK:
                raise _Unmeasurable
            if next_x0 - x1 > min_gap:
                yield x1, next_x0
        end_match = _LINE_END.search(flat, line.first)
        span = flat[line.first : end_match.start() if end_match else len(flat)]
        first, last = line.first + len(span) - len(span.lstrip()), line.first + len(span.rstrip())
        wide = _WIDE_GLYPH * height
        word_start, word_x0 = first, line.x0
        for space in _SPACE_RUN.finditer(flat, first, last):
            before, after = self._box(space.start() - 1), self._box(space.end())
            if after[0] < before[0]:
                raise _Unmeasurable
            if before[1] - word_x0 > (space.start() - word_start) * wide + min_gap:
                yield word_x0, before[1]
            if after[0] - before[1] > min_gap:
                yield before[1], after[0]
            word_start, word_x0 = space.end(), after[0]
        if line.x1 - word_x0 > (last - word_start) * wide + min_gap:
            yield word_x0, line.x1

    def _box(self, i: int) -> tuple[float, float]:
        """The character's left and right edges; without a box (``PageChars.has_box``): raises."""
        if not self.get_box(self.raw, i, _LEFT, _RIGHT, _BOTTOM, _TOP):
            raise _Unmeasurable
        left, right = _LEFT.value, _RIGHT.value
        if not (right > left or _TOP.value > _BOTTOM.value):
            raise _Unmeasurable
        return left, right


_LEFT, _RIGHT, _BOTTOM, _TOP = (ctypes.c_double() for _ in range(4))


def _free_gap_of_first(rows: list[int], gaps: _Gaps) -> bool:
    """Whether a gap of the first row is left free by all the others (measured until none is)."""
    own = gaps.of(rows[0])
    if own is None:
        return True
    free = sorted(own)
    for k in rows[1:]:
        other = gaps.of(k)
        if other is None:
            continue
        free = _uncovered(free, gaps.cheap.lines[k], other)
        if not free:
            return False
    return True


def _columns_possible(rows: list[int], gaps: _Gaps) -> bool:
    """Every row has a gap that no row covers (each covers its box less its gaps, with slack)."""
    measured = [gaps.of(k) for k in rows]
    if any(g is None for g in measured):
        return True
    free: _Intervals = [(float("-inf"), float("inf"))]
    for k, own in zip(rows, measured, strict=True):
        free = _uncovered(free, gaps.cheap.lines[k], own or [])
    return all(any(lo < b and a < hi for lo, hi in own or [] for a, b in free) for own in measured)


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
