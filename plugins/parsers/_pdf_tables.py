"""Tables on PDF pages: ruled grids from path objects, unruled ones from aligned text.

Ruled tables follow the lattice method of pdfplumber's table finder (edges -> intersections
-> cells -> tables): every stroked or filled path on the page is cut into its straight
segments (a thin filled rectangle is a rule too); horizontal and vertical ones are snapped
and joined, their crossings found, and each crossing's smallest enclosing rectangle whose four
sides are drawn is a cell. Cells that share corners form a table; the distinct cell borders
give its grid, and a merged cell's text sits in its top-left grid slot (the others empty).

Unruled tables: runs of at least three consecutive lines that each split into two or more
pieces at wide gaps, whose gaps line up into common columns (whitespace that runs down all
rows), with short cells: two-column running text never qualifies.

Characters go to the cell containing their centre, in pdfium's reading order, so a cell of
several lines reads in order. Coordinates: points from the page's top-left corner.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from include.contract import ParseError, ParseErrorCode
from plugins.parsers._common import Deadline
from plugins.parsers._pdf_grid import GridCut, ruled_cell_groups
from plugins.parsers._pdf_layout import Line, PageChars
from plugins.parsers._tabular import _looks_like_header

__all__ = ["MIN_GAP", "PageTables", "RuledScan", "Table", "find_tables", "grid_of", "scan_rules"]

_SNAP = 3.0  # points: rules this close are the same rule (pdfplumber's snap_tolerance)
MIN_GAP = 0.5  # a column gap in unruled text: this many times the line's height (a space is ~0.3)
_MIN_TABLE_SIDE = 40.0  # points: a grid narrower than this is a diagram's detail
_MAX_CELL_CHARS = 40
# a list item's marker: "1)", "2.", "(a)", "(iv)", "•", "-"; a first column of these is a list
_LIST_MARKER = re.compile(
    r"^(?:\(?[0-9A-Za-z]{1,4}[.)]|\([ivxlcdmIVXLCDM]+\)|[•▪◦‣∙·*\-–—])$"
)  # mean characters per cell of an unruled table: longer is running text


@dataclass(slots=True)
class Table:
    bbox: tuple[float, float, float, float]
    rows: list[list[str]]
    header: list[str] | None
    first: int  # the first character index inside it: where it sits in reading order
    members: set[int] = field(default_factory=set)  # character indices it took from the page
    ruled: bool = True


@dataclass(slots=True)
class PageTables:
    tables: list[Table]
    skipped: str | None = None  # why detection was cut short on the page (its text is kept)


@dataclass(slots=True)
class RuledScan:
    """The page's ruled cell groups (from path objects alone), and why the scan stopped, if it did."""

    groups: list[list[tuple[float, ...]]]
    skipped: str | None = None


def scan_rules(page: Any, height: float, deadline: Deadline) -> RuledScan:
    """Ruled cell groups; a grid past a cap is no groups, with the reason (raises on timeout)."""
    try:
        return RuledScan(ruled_cell_groups(page, height, deadline))
    except GridCut as cut:
        return RuledScan([], str(cut))


def find_tables(
    page: Any, chars: PageChars, lines: list[Line], height: float, deadline: Deadline, rules: RuledScan | None = None
) -> PageTables:
    """Ruled tables first, then unruled ones among the lines they left; out of ``deadline``
    (the tables' share of the document's budget) none, and the page's text stays as text.
    ``rules``: :func:`scan_rules`'s result when the caller has it already."""
    try:
        return _find_tables(rules or scan_rules(page, height, deadline), chars, lines, deadline)
    except ParseError as exc:
        if exc.code != ParseErrorCode.TIMEOUT:
            raise
        return PageTables([], "time budget")


def _find_tables(rules: RuledScan, chars: PageChars, lines: list[Line], deadline: Deadline) -> PageTables:
    tables = []
    for cells in rules.groups:
        table = _fill_ruled(cells, chars)
        if table is not None:
            tables.append(table)
    taken = set().union(*(t.members for t in tables)) if tables else set()
    free = [ln for ln in lines if not _line_taken(ln, chars, taken)]
    tables.extend(_unruled(free, chars, deadline))
    return PageTables(tables, rules.skipped)


def _line_taken(line: Line, chars: PageChars, taken: set[int]) -> bool:
    return line.first in taken


# --------------------------------------------------------------------------- cell text


def _grid(values: Sequence[float]) -> list[float]:
    out: list[float] = []
    for v in sorted(values):
        if not out or v - out[-1] > _SNAP:
            out.append(v)
    return out


def _slot(grid: list[float], v: float) -> int:
    return max(0, bisect.bisect_right(grid, v + _SNAP) - 1)


def grid_of(cells: list[tuple[float, ...]]) -> tuple[list[float], list[float]] | None:
    """The distinct column and row borders of a cell group, or None when it cannot be a table."""
    xs = _grid([c[0] for c in cells] + [c[2] for c in cells])
    ys = _grid([c[1] for c in cells] + [c[3] for c in cells])
    if len(xs) < 3 or len(ys) < 3:  # fewer than two columns or two rows: a box, not a table
        return None
    if xs[-1] - xs[0] < _MIN_TABLE_SIDE or ys[-1] - ys[0] < _MIN_TABLE_SIDE / 2:  # a figure's boxes
        return None
    return xs, ys


def _fill_ruled(cells: list[tuple[float, ...]], chars: PageChars) -> Table | None:
    grid = grid_of(cells)
    if grid is None:
        return None
    xs, ys = grid
    bbox = (xs[0], ys[0], xs[-1], ys[-1])
    # grid slot -> the cell covering it, the smallest winning: a character belongs to the
    # innermost cell around it (an outer frame is a cell too)
    owner: dict[tuple[int, int], tuple[int, int]] = {}
    slots: dict[tuple[int, int], tuple[float, ...]] = {}
    for c in sorted(cells, key=lambda c: (c[2] - c[0]) * (c[3] - c[1]), reverse=True):
        r0, c0, r1, c1 = _slot(ys, c[1]), _slot(xs, c[0]), _slot(ys, c[3]), _slot(xs, c[2])
        slots[(r0, c0)] = c
        for r in range(r0, max(r1, r0 + 1)):
            for k in range(c0, max(c1, c0 + 1)):
                owner[(r, k)] = (r0, c0)
    texts: dict[tuple[int, int], list[int]] = {}
    members: set[int] = set()
    for i, (x0, top, x1, bottom) in enumerate(chars.boxes):
        cx, cy = (x0 + x1) / 2, (top + bottom) / 2
        if not (bbox[0] <= cx <= bbox[2] and bbox[1] <= cy <= bbox[3]) or not chars.has_box(i):
            continue
        key = owner.get((bisect.bisect_right(ys, cy) - 1, bisect.bisect_right(xs, cx) - 1))
        if key is not None:  # a character in no cell (a grid with gaps) stays in the text flow
            texts.setdefault(key, []).append(i)
            members.add(i)
    if len(texts) < 2:
        return None
    texts = _split_unruled_rows(texts, chars, slots)
    n_rows = 1 + max(r for r, _ in texts)
    n_cols = len(xs) - 1
    rows = [[_cell_text(chars, texts.get((r, c), [])) for c in range(n_cols)] for r in range(n_rows)]
    return _table(bbox, rows, chars, texts, members, ruled=True)


def _visual_lines(chars: PageChars, indices: list[int]) -> list[list[int]]:
    """The cell's characters cut into lines where a character starts below the previous one's box."""
    out: list[list[int]] = []
    for i in indices:
        top, bottom = chars.boxes[i][1], chars.boxes[i][3]
        if out and top < chars.boxes[out[-1][-1]][3] and bottom > chars.boxes[out[-1][-1]][1]:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _split_unruled_rows(
    texts: dict[tuple[int, int], list[int]], chars: PageChars, slots: dict[tuple[int, int], tuple[float, ...]]
) -> dict[tuple[int, int], list[int]]:
    """A grid row whose cells all have the same k >= 2 lines at the same heights is k rows
    drawn without rules between them (a table ruled by columns only); a cell that wraps while its
    neighbours do not stays one multi-line cell."""
    by_row: dict[int, dict[int, list[list[int]]]] = {}
    for (r, c), idx in texts.items():
        by_row.setdefault(r, {})[c] = _visual_lines(chars, idx)
    out: dict[tuple[int, int], list[int]] = {}
    shift = 0
    for r in sorted(by_row):
        cells = by_row[r]
        counts = {len(v) for v in cells.values()}
        k = counts.pop() if len(counts) == 1 else 1
        # three or more lines in every cell at the same heights are rows drawn without rules
        # between them (a table ruled by columns only); two lines are that only when no cell
        # fills its width before the break (a wrap), since a narrow column wraps every cell
        wrapped = k == 2 and any(_wraps(lines, chars, slots[(r, c)]) for c, lines in cells.items())
        if k >= 2 and len(cells) >= 2 and not wrapped and _same_heights(cells, chars):
            for c, lines in cells.items():
                for j, line in enumerate(lines):
                    out[(r + shift + j, c)] = line
            shift += k - 1
        else:
            for c, lines in cells.items():
                out[(r + shift, c)] = [i for line in lines for i in line]
    return out


def _wraps(lines: list[list[int]], chars: PageChars, cell: tuple[float, ...]) -> bool:
    """A line before the last reaching across most of the cell (padding aside): text wrapped there, one cell."""
    width = cell[2] - cell[0]
    return any(
        max(chars.boxes[i][2] for i in line) - min(chars.boxes[i][0] for i in line) > 0.6 * width for line in lines[:-1]
    )


def _same_heights(cells: dict[int, list[list[int]]], chars: PageChars) -> bool:
    tops = [[chars.boxes[line[0]][3] for line in lines] for lines in cells.values()]
    return all(abs(a - b) <= _SNAP for column in zip(*tops, strict=True) for a in column for b in column)


def _cell_text(chars: PageChars, indices: list[int]) -> str:
    """The characters in reading order; a jump (another cell's text between) is a space,
    except between two CJK characters, which a line wrap does not separate."""
    out: list[str] = []
    prev = -2
    for i in indices:
        ch = chars.text[i]
        if i != prev + 1 and out and not out[-1].isspace() and not (_cjk(out[-1]) and _cjk(ch)):
            out.append(" ")
        out.append(ch)
        prev = i
    return " ".join("".join(out).split())


def _cjk(ch: str) -> bool:
    return "\u2e80" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af" or "\uff00" <= ch <= "\uffef"


def _table(
    bbox: tuple[float, ...],
    rows: list[list[str]],
    chars: PageChars,
    texts: dict[tuple[int, int], list[int]],
    members: set[int],
    ruled: bool,
) -> Table | None:
    rows = [r for r in rows if any(r)]
    if len(rows) < 2 and not ruled:
        return None
    if not rows:
        return None
    header = None
    if len(rows) >= 2 and (_row_is_bold(0, chars, texts) or _looks_like_header(rows[0], rows[1])):
        header, rows = rows[0], rows[1:]
    first = min(members)
    return Table(tuple(round(v, 2) for v in bbox), rows, header, first, members, ruled)  # type: ignore[arg-type]


def _row_is_bold(row: int, chars: PageChars, texts: dict[tuple[int, int], list[int]]) -> bool:
    """The first row is set in bold and the rest are not: a header row (HTML ``th``, Word's style)."""
    head = [chars.weight(i) for (r, _), idx in texts.items() if r == row for i in idx]
    body = [chars.weight(i) for (r, _), idx in texts.items() if r != row for i in idx]
    if not head or not body:
        return False
    return sum(w >= 600 for w in head) > 0.8 * len(head) and sum(w >= 600 for w in body) < 0.2 * len(body)


# --------------------------------------------------------------------------- unruled


def _pieces(line: Line, chars: PageChars) -> list[tuple[float, float, list[int]]]:
    """The line cut at gaps wider than :data:`MIN_GAP` line heights: ``(x0, x1, char indices)``."""
    if " " not in line.text:  # pdfium puts a space into every gap it sees between words
        return []
    gap = MIN_GAP * line.height
    out: list[list[Any]] = []  # [x0, x1, indices], grown in place: one line may be 500k characters
    i = line.first
    while i < len(chars.text) and chars.text[i] not in "\r\n":
        if chars.has_box(i) and not chars.text[i].isspace():
            x0, _, x1, _ = chars.boxes[i]
            if out and x0 - out[-1][1] <= gap and x0 >= out[-1][0] - 1:
                last = out[-1]
                last[1] = max(last[1], x1)
                last[2].append(i)
            else:
                out.append([x0, x1, [i]])
        i += 1
    return [(x0, x1, idx) for x0, x1, idx in out]


def _unruled(lines: list[Line], chars: PageChars, deadline: Deadline) -> list[Table]:
    tables: list[Table] = []
    run: list[tuple[Line, list[tuple[float, float, list[int]]]]] = []
    for line in [*lines, None]:
        pieces = _pieces(line, chars) if line is not None else []
        adjacent = bool(run) and line is not None and line.top - run[-1][0].bottom <= 3.0 * line.height
        if len(pieces) >= 2 and (adjacent or not run):
            run.append((line, pieces))  # type: ignore[arg-type]
            continue
        if len(run) >= 3:
            table = _aligned_run(run, chars)
            if table is not None:
                tables.append(table)
        run = [(line, pieces)] if line is not None and len(pieces) >= 2 else []
        deadline.check("pdf unruled tables")
    return tables


def _aligned_run(run: list[tuple[Line, list[tuple[float, float, list[int]]]]], chars: PageChars) -> Table | None:
    """The run as a table, else without its first or last line: a paragraph's last line whose
    word gaps look wide may touch a table's first row."""
    for piece in (run, run[1:], run[:-1], run[1:-1]):
        table = _aligned_table(piece, chars) if len(piece) >= 3 else None
        if table is not None:
            return table
    return None


def _aligned_table(run: list[tuple[Line, list[tuple[float, float, list[int]]]]], chars: PageChars) -> Table | None:
    """Columns are the x ranges that the rows' pieces cover together; gaps run down all rows."""
    spans = sorted((p[0], p[1]) for _, pieces in run for p in pieces)
    columns: list[list[float]] = []
    for x0, x1 in spans:
        if columns and x0 <= columns[-1][1]:
            columns[-1][1] = max(columns[-1][1], x1)
        else:
            columns.append([x0, x1])
    if len(columns) < 2:
        return None
    texts: dict[tuple[int, int], list[int]] = {}
    for r, (_, pieces) in enumerate(run):
        for x0, _x1, idx in pieces:
            c = next(k for k, col in enumerate(columns) if col[0] <= x0 <= col[1])
            texts.setdefault((r, c), []).extend(idx)
    rows = [[_cell_text(chars, texts.get((r, c), [])) for c in range(len(columns))] for r in range(len(run))]
    filled = [cell for row in rows for cell in row if cell]
    # every row must fill most columns, cells must be short, and two columns need a number
    # column or shorter cells still: otherwise this is a two-column page or a list with tab leaders
    if any(sum(1 for c in row if c) < max(2, (len(columns) + 1) // 2) for row in rows):
        return None
    if sum(all(row) for row in rows) * 2 < len(rows):  # two text columns fill alternate halves
        return None
    if sum(len(c) for c in filled) > _MAX_CELL_CHARS * len(filled):
        return None
    numbers = any(all(_numeric(row[c]) for row in rows[1:] if row[c]) for c in range(2))
    if len(columns) == 2 and not numbers and sum(len(c) for c in filled) > _MAX_CELL_CHARS / 3 * len(filled):
        return None
    if all(_LIST_MARKER.match(row[0]) for row in rows if row[0]):  # a numbered or bulleted list
        return None
    lines = [ln for ln, _ in run]
    if any(b.top - a.top < 0.5 * a.height for a, b in itertools.pairwise(lines)):  # sub/superscripts
        return None
    members = {i for idx in texts.values() for i in idx}
    bbox = (min(ln.x0 for ln in lines), lines[0].top, max(ln.x1 for ln in lines), max(ln.bottom for ln in lines))
    return _table(bbox, rows, chars, texts, members, ruled=False)


def _numeric(text: str) -> bool:
    stripped = text.replace(",", "").replace("%", "").replace("$", "").replace("€", "").strip("()+- ")
    try:
        float(stripped)
    except ValueError:
        return False
    return True
