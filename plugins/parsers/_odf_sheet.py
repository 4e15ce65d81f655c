"""OpenDocument spreadsheet tables (ODF 1.2/1.3 part 1, 9.1) into numbered rows of cell texts.

Repeats (``table:number-columns-repeated`` / ``number-rows-repeated``, 19.675/19.678) are what
a LibreOffice sheet is made of: a used row ends with one cell repeated to column 1024 or 16384,
and a sheet ends with a row repeated to row 1,048,576. They are never expanded blindly: empty
repeats at a row's end are dropped, empty rows are counted (the run that ends a sheet is
yielded at most :data:`EMPTY_RUN_LIMIT` long), and every cell that is materialised is charged
to the document's :class:`CellBudget` (``Limits.max_cells``) before the list exists.

Merged cells (``number-columns-spanned`` / ``number-rows-spanned`` over covered cells, 9.1.5)
are filled with the merging cell's text, as the XLSX parser fills merged ranges.
"""

from __future__ import annotations

from collections.abc import Iterator

from lxml import etree

from plugins.parsers._common import Deadline
from plugins.parsers._odf_text import cell_text, qname, repeat_count, rows_of
from plugins.parsers._tabular import EMPTY_RUN_LIMIT, CellBudget

__all__ = ["hidden_table_styles", "sheet_rows"]

_CELL, _COVERED = qname("table:table-cell"), qname("table:covered-table-cell")
_COLS_REPEATED, _ROWS_REPEATED = qname("table:number-columns-repeated"), qname("table:number-rows-repeated")
_COLS_SPANNED, _ROWS_SPANNED = qname("table:number-columns-spanned"), qname("table:number-rows-spanned")
# a cell without paragraphs (other generators than LibreOffice) still has its value (19.385-19.390)
_VALUE_ATTRS = tuple(
    qname(f"office:{a}") for a in ("string-value", "value", "date-value", "time-value", "boolean-value")
)
_STYLE, _TABLE_PROPS = qname("style:style"), qname("style:table-properties")
_STYLE_NAME, _FAMILY, _DISPLAY = qname("style:name"), qname("style:family"), qname("table:display")


def hidden_table_styles(automatic_styles: etree._Element | None) -> set[str]:
    """Names of table styles that hide their sheet (``table:display="false"``, 17.15)."""
    hidden: set[str] = set()
    if automatic_styles is None:
        return hidden
    for style in automatic_styles.iter(_STYLE):
        if style.get(_FAMILY) != "table":
            continue
        props = style.find(_TABLE_PROPS)
        if props is not None and props.get(_DISPLAY) == "false":
            hidden.add(style.get(_STYLE_NAME) or "")
    return hidden


def _displayed(cell: etree._Element) -> str:
    """What the cell shows: its paragraphs (the formatted value), else its raw value."""
    text = cell_text(cell)
    if text:
        return text
    for attr in _VALUE_ATTRS:
        value = cell.get(attr)
        if value:
            return str(value).strip()
    return ""


class _Merges:
    """The text each merging cell spreads over the covered cells of its span: col -> (text, last row)."""

    def __init__(self, budget: CellBudget) -> None:
        self._by_col: dict[int, tuple[str, int]] = {}
        self._budget = budget

    def start(self, cell: etree._Element, row: int, col: int, text: str) -> None:
        cols, rows = repeat_count(cell, _COLS_SPANNED), repeat_count(cell, _ROWS_SPANNED)
        if (cols == 1 and rows == 1) or not text:
            return
        self._budget.charge(cols, f"merged cells at row {row}")
        for c in range(col, col + cols):
            self._by_col[c] = (text, row + rows - 1)

    def covered(self, row: int, col: int) -> str:
        found = self._by_col.get(col)
        return found[0] if found is not None and found[1] >= row else ""


def _row_cells(row: etree._Element, n: int, merges: _Merges, budget: CellBudget) -> list[str]:
    cells: list[str] = []
    pending_empty = 0
    col = 0
    for cell in row:
        if cell.tag not in (_CELL, _COVERED):
            continue
        times = repeat_count(cell, _COLS_REPEATED)
        if cell.tag == _CELL:
            text = _displayed(cell)
            merges.start(cell, n, col, text)
        else:
            text = merges.covered(n, col)
        if not text:
            pending_empty += times  # trailing empty repeats are dropped, never materialised
            col += times
            continue
        budget.charge(pending_empty + times, f"row {n}")
        cells.extend([""] * pending_empty)
        cells.extend([text] * times)
        pending_empty = 0
        col += times
    return cells


def sheet_rows(table: etree._Element, budget: CellBudget, deadline: Deadline) -> Iterator[tuple[int, list[str]]]:
    """``(1-based row number, cells)`` for each row of one sheet, repeats handled as above."""
    merges = _Merges(budget)
    n = 0
    for count, (_, row) in enumerate(rows_of(table, False)):
        if count % 256 == 0:
            deadline.check("ods rows")
        times = repeat_count(row, _ROWS_REPEATED)
        cells = _row_cells(row, n + 1, merges, budget)
        if not cells:
            for i in range(min(times, EMPTY_RUN_LIMIT)):
                yield n + 1 + i, []
            n += times
            continue
        budget.charge(len(cells) * (times - 1), f"row {n + 1} repeated {times} times")
        for i in range(times):
            if i % 1024 == 1023:
                deadline.check("ods repeated rows")
            yield n + 1 + i, list(cells)
        n += times
