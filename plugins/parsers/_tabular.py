"""Rows to blocks, shared by the spreadsheet and CSV parsers.

Each non-empty row becomes one ``table`` block (``rows=[row]``, ``header=<header row>``) with its
sheet and 1-based row number, so a table chunker can write ``header: value`` per row and a hit
points back at the exact row. The header row itself is emitted once as a paragraph so that its
text is searchable even when every data row is chunked separately.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from include.contract import BlockKind, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits

__all__ = ["CellBudget", "column_letter", "emit_rows", "header_option", "make_header"]

_NUMBERISH = re.compile(r"^[\s$€£¥%+\-.,:/0-9()]*$")
# Trailing formatting (a million styled but empty rows) is common in real workbooks; after this
# many empty rows in a row nothing below is read.
EMPTY_RUN_LIMIT = 10_000


class CellBudget:
    """Cells one document may expand to (``Limits.max_cells``), shared by all its sheets.

    Charged *before* a row list is allocated, so a cell in column XFD, a header 16,384 cells
    wide or a merged range copied down a sheet is refused instead of materialised.
    """

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def charge(self, cells: int, where: str) -> None:
        self.used += cells
        if self.used > self.limit:
            raise ParseError(
                ParseErrorCode.TOO_LARGE, f"more than {self.limit} cells (limit max_cells), reached at {where}"
            )


def column_letter(index: int) -> str:
    """0-based column index -> Excel letters (0 -> A, 26 -> AA)."""
    out = ""
    index += 1
    while index:
        index, rem = divmod(index - 1, 26)
        out = chr(65 + rem) + out
    return out


def header_option(value: object) -> bool | None:
    """``first_row_as_header``: True / False / "auto" (None)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "yes", "1"):
        return True
    if isinstance(value, str) and value.lower() in ("false", "no", "0"):
        return False
    return None


def _looks_like_header(first: list[str], second: list[str] | None) -> bool:
    filled = [c for c in first if c.strip()]
    if len(filled) < 2 and len(first) >= 2:
        return False
    if not filled or any(_NUMBERISH.match(c) for c in filled):
        return False
    if len(set(filled)) < len(filled) * 0.8:
        return False
    if second is None:
        return True
    # a header is usually shorter than the data under it, or the data has numbers
    return any(c and _NUMBERISH.match(c) for c in second) or (sum(map(len, filled)) <= sum(map(len, second)) * 1.5)


def make_header(cells: list[str], first_col: int = 0) -> list[str]:
    """Empty header cells are named by column letter (``cells[0]`` is column ``first_col``);
    duplicates get ``_2``, ``_3`` suffixes."""
    seen: dict[str, int] = {}
    out = []
    for i, cell in enumerate(cells):
        name = cell.strip() or column_letter(first_col + i)
        if name in seen:
            seen[name] += 1
            name = f"{name}_{seen[name]}"
        else:
            seen[name] = 1
        out.append(name)
    return out


def _pad(cells: list[str], width: int, budget: CellBudget | None, n: int) -> list[str]:
    """``cells`` padded to the header's ``width``, the padding charged to ``budget`` first."""
    if len(cells) >= width:
        return cells
    if budget is not None:
        budget.charge(width - len(cells), f"row {n} padded to the header")
    return cells + [""] * (width - len(cells))


def emit_rows(
    builder: BlockBuilder,
    rows: Iterable[tuple[int, list[str]]],
    *,
    sheet: str | None,
    first_row_as_header: bool | None,
    limits: Limits,
    deadline: Deadline,
    line_positions: bool = False,
    cells_budget: CellBudget | None = None,
    first_col: int = 0,
) -> int:
    """Append one block per non-empty row; returns the number of data rows emitted.

    ``rows`` yields ``(1-based row number, cells)``; ``line_positions`` records the number as a
    line (CSV) instead of a sheet row; ``first_col`` is the column of ``cells[0]``.
    """
    header: list[str] | None = None
    pending: tuple[int, list[str]] | None = None
    emitted = 0
    empty_run = 0
    decided = first_row_as_header is False

    def pos(n: int) -> list[Position]:
        return [Position(line=n)] if line_positions else [Position(sheet=sheet, row=n)]

    def emit(n: int, cells: list[str]) -> None:
        nonlocal emitted
        emitted += 1
        if emitted > limits.max_rows:
            raise ParseError(ParseErrorCode.TOO_LARGE, f"more than {limits.max_rows} rows")
        cells = _pad(cells, len(header) if header else 0, cells_budget, n)
        builder.add(BlockKind.TABLE, "\t".join(cells).strip(), pos(n), rows=[cells], header=header)

    for count, (n, cells) in enumerate(rows):
        if count % 1000 == 0:
            deadline.check("rows")
        while cells and not cells[-1].strip():
            cells.pop()
        if not cells:
            empty_run += 1
            if empty_run >= EMPTY_RUN_LIMIT:
                break
            continue
        empty_run = 0
        if not decided:
            if pending is None:
                if first_row_as_header:
                    header = make_header(cells, first_col)
                    builder.add(BlockKind.PARAGRAPH, "\t".join(cells), pos(n), role="header")
                    decided = True
                    continue
                pending = (n, cells)
                continue
            decided = True
            if _looks_like_header(pending[1], cells):
                header = make_header(pending[1], first_col)
                builder.add(BlockKind.PARAGRAPH, "\t".join(pending[1]), pos(pending[0]), role="header")
            else:
                emit(*pending)
            pending = None
        emit(n, cells)
    if pending is not None:  # a single non-empty row: data, not a header
        emit(*pending)
    return emitted
