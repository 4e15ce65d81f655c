"""XLSX (the package read directly, :mod:`._xlsx_package`): one table block per non-empty row.

* every visible sheet (hidden ones with option ``include_hidden_sheets``), a heading per sheet;
* ``first_row_as_header``: true / false / "auto" (default) -- see :mod:`._tabular`;
* cached formula values (``data_only``), numbers and dates rendered with their number format;
* merged ranges filled with their top-left value (a byte scan of the sheet XML before its rows);
* image formulas (WPS ``DISPIMG``, Excel ``_xlfn.IMAGE``) stripped;
* a run of 10,000 empty rows ends the sheet (styled-but-empty tails); ``max_rows`` caps data;
* rows are read sparse (a cell in column XFD is one cell, not 16,384) and trimmed after their
  last value; all rows and merge fills count against ``max_cells`` for the whole workbook;
* after each sheet's rows, its charts as tables of their cached data (:mod:`._ooxml_charts`)
  and the files embedded in it (:mod:`._ooxml_embedded`); chartsheets are not read;
* Strict OOXML workbooks are read through a Transitional copy (:mod:`._ooxml_strict`).
"""

from __future__ import annotations

import dataclasses
import re
import zipfile
from collections.abc import Iterator
from typing import Any

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits, parse_xml
from plugins.parsers._numfmt import format_value
from plugins.parsers._ooxml import charge_xml_parts, check_zip
from plugins.parsers._ooxml_charts import add_chart_block
from plugins.parsers._ooxml_embedded import PackageEmbeds, related_parts
from plugins.parsers._ooxml_strict import to_transitional
from plugins.parsers._tabular import EMPTY_RUN_LIMIT, CellBudget, emit_rows, header_option
from plugins.parsers._xlsx_package import Value, WorkbookPackage, read_workbook, sheet_rows
from plugins.parsers.registry import ParseContext, register_parser
from plugins.parsers.sniff import XLSX

__all__ = ["parse_xlsx"]

_IMAGE_FORMULA = re.compile(r"^\s*=?\s*(?:_xlfn\.)?(?:DISPIMG|IMAGE)\s*\(", re.I)
_REF = re.compile(r"([A-Z]+)(\d+)")
_IMAGE_CELL = re.compile(
    rb"<(?:\w+:)?c\b[^>]*?\br=[\"']([A-Z]+)(\d+)[\"'][^>]*>\s*<(?:\w+:)?f\b[^>]*>[^<]*?(?i:DISPIMG|_xlfn\.IMAGE)\s*\("
)
_CELL_COLUMN = re.compile(rb"<(?:\w+:)?c\b[^>]*?\br=[\"']\$?([A-Z]{1,3})[0-9]")
_CELL_WITHOUT_REF = re.compile(rb"<(?:\w+:)?c(?=[\s>/])(?![^>]*?\br=)")
# the <dimension> sits before the sheet data; it alone says whether column A is used
_DIMENSION = re.compile(rb"<(?:\w+:)?dimension\b[^>]*?\bref=[\"']\$?([A-Za-z]{1,3})")
_MERGE = re.compile(rb"<(?:\w+:)?mergeCell\b[^>]*?\bref=[\"']\$?([A-Z]+\$?\d+):\$?([A-Z]+\$?\d+)[\"']")


def _col_index(letters: str) -> int:
    n = 0
    for ch in letters:
        n = n * 26 + ord(ch) - 64
    return n - 1


# Excel itself has no hard limit, but real workbooks carry hundreds, not hundreds of thousands,
# of merged ranges; each costs a check on every row it spans.
MAX_MERGED_RANGES = 100_000
# a range larger than this (whole columns or rows) is not filled at all, as before
_MAX_MERGE_AREA = 100_000

_Range = tuple[int, int, int, int]


@dataclasses.dataclass(slots=True)
class _SheetScan:
    merges: set[_Range] = dataclasses.field(default_factory=set)
    images: set[tuple[int, int]] = dataclasses.field(default_factory=set)
    # 0-based column of the sheet's leftmost cell: columns left of it are empty in every row
    first_col: int | None = None


def _scan_sheet(zf: zipfile.ZipFile, path: str, deadline: Deadline) -> _SheetScan:
    """Merged ranges ((min_row, min_col, max_row, max_col), rows 1-based, cols 0-based), the
    cells whose formula is an image function and, where the ``<dimension>`` does not start at
    column A (or is missing), the leftmost cell's column, from the raw sheet XML.

    A byte scan rather than an XML parse: ``<mergeCell>`` elements sit after the (possibly
    million-row) sheet data, and the rows' stream reads cached values, not formulas.
    Scanning bytes is two orders of magnitude faster than building an element per row. Ranges
    are a set: the same range listed 20,000 times is one range.
    """
    scan = _SheetScan()
    merges, images = scan.merges, scan.images
    columns: set[bytes] = set()
    unnumbered: bool | None = None  # decided by the first chunk's <dimension>
    tail = b""
    with zf.open(path) as fh:
        while chunk := fh.read(1 << 20):
            deadline.check("xlsx sheet scan")
            buf = tail + chunk
            if unnumbered is None:
                data_at = buf.find(b"sheetData")
                dimension = _DIMENSION.search(buf, 0, data_at if data_at >= 0 else len(buf))
                unnumbered = dimension is not None and dimension.group(1).upper() == b"A"
            last_end = 0
            for m in _MERGE.finditer(buf) if b"mergeCell" in buf else ():
                ma, mb = _REF.fullmatch(m.group(1).decode()), _REF.fullmatch(m.group(2).decode())
                if ma and mb:
                    merges.add((int(ma.group(2)), _col_index(ma.group(1)), int(mb.group(2)), _col_index(mb.group(1))))
                last_end = max(last_end, m.end())
            # plain substring tests first: they run at memory speed, the regexes do not
            if b"DISPIMG" in buf or b"dispimg" in buf or b"_xlfn." in buf:
                for m in _IMAGE_CELL.finditer(buf):
                    images.add((int(m.group(2)), _col_index(m.group(1).decode())))
                    last_end = max(last_end, m.end())
            if not unnumbered:
                # a cell without r= sits at "the next column", which only the parse knows
                unnumbered = _CELL_WITHOUT_REF.search(buf) is not None
                columns.update(_CELL_COLUMN.findall(buf))
            if len(merges) > MAX_MERGED_RANGES or len(images) > MAX_MERGED_RANGES:
                raise ParseError(
                    ParseErrorCode.TOO_LARGE, f"xlsx: more than {MAX_MERGED_RANGES} merged ranges or image cells"
                )
            tail = buf[max(last_end, len(buf) - 4096) :]
    if not unnumbered and columns:
        scan.first_col = min(_col_index(c.decode()) for c in columns)
    return scan


class _MergeFill:
    """Fills each merged range's cells with its top-left value as the rows stream past.

    Only the ranges spanning the current row are visited (a sweep over ranges sorted by first
    row), never a per-cell map of every range: 2,000 ranges of 99,999 cells are 2,000 entries,
    not 200 million. Each visit and each filled cell is charged to the document's cell budget.
    """

    def __init__(self, merges: set[_Range], budget: CellBudget, deadline: Deadline) -> None:
        ok = (m for m in merges if (m[2] - m[0] + 1) * (m[3] - m[1] + 1) <= _MAX_MERGE_AREA)
        self._pending = sorted(m for m in ok if m[0] <= m[2] and m[1] <= m[3])
        self._next = 0
        self._active: list[_Range] = []
        self._values: dict[tuple[int, int], str] = {}
        self._budget = budget
        self._deadline = deadline

    def apply(self, n: int, texts: dict[int, str]) -> None:
        while self._next < len(self._pending) and self._pending[self._next][0] <= n:
            self._active.append(self._pending[self._next])
            self._next += 1
        if not self._active:
            return
        self._active = [m for m in self._active if m[2] >= n]
        self._budget.charge(len(self._active), f"merged ranges of row {n}")
        for i, (r0, c0, _r1, c1) in enumerate(self._active):
            if i % 256 == 255:
                self._deadline.check("xlsx merged cells")
            if r0 == n:
                self._values[(r0, c0)] = texts.get(c0, "")
            value = self._values.get((r0, c0), "")
            if not value:
                continue
            self._budget.charge(c1 - c0 + 1, f"merged range of row {n}")
            for c in range(c0, c1 + 1):
                if not texts.get(c):
                    texts[c] = value


def _cell_text(value: Value, number_format: str) -> str:
    if isinstance(value, str):
        return "" if _IMAGE_FORMULA.match(value) else value.strip()
    return format_value(value, number_format)


def _rows(
    rows: Iterator[tuple[int, list[tuple[int, Value, str]]]],
    title: str,
    fill: _MergeFill,
    scan: _SheetScan,
    budget: CellBudget,
) -> Iterator[tuple[int, list[str]]]:
    image_rows: dict[int, set[int]] = {}
    for r, c in scan.images:
        image_rows.setdefault(r, set()).add(c)
    # columns left of the sheet's leftmost cell are empty in every row: not materialised, so a
    # sheet written in column XFD has one-cell rows (header names keep their real letters)
    offset = scan.first_col or 0
    last = 0
    for n, present in rows:
        # rows absent from the XML are empty rows: yielded (at most the run that ends a sheet)
        # so that a long empty stretch still ends the sheet, as with styled empty rows
        for gap in range(last + 1, min(n, last + 1 + EMPTY_RUN_LIMIT)):
            yield gap, []
        last = max(last, n)
        skip = image_rows.get(n, ())
        texts: dict[int, str] = {}
        for col, value, number_format in present:
            if col not in skip and (text := _cell_text(value, number_format)):
                texts[col] = text
        fill.apply(n, texts)
        width = max(texts) + 1 - offset if texts else 0
        budget.charge(width, f"row {n} of sheet {title!r}")
        cells = [""] * max(width, 0)
        for col, text in texts.items():
            if col >= offset:
                cells[col - offset] = text
        yield n, cells


def _sheet_objects(
    zf: zipfile.ZipFile, path: str | None, title: str, builder: BlockBuilder, embeds: PackageEmbeds, deadline: Deadline
) -> None:
    """The sheet's charts (tables of their cached data), then the files embedded in it.

    Both hang off the sheet's drawing part (ECMA-376 Part 1, 18.3.1.36 ``drawing``), OLE
    objects also off the sheet itself (18.3.1.59 ``oleObject``).
    """
    if not path:
        return
    for _, drawing in related_parts(zf, path, ("/drawing",)):
        for _, chart in related_parts(zf, drawing, ("/chart",)):
            root = parse_xml(zf.read(chart), f"xlsx chart {chart}")
            add_chart_block(builder, root, deadline, [Position(sheet=title)])
    embeds.add_to(builder, embeds.files_of(path, f"sheet {title}", follow=("/drawing",)))


def _open_workbook(data: bytes, limits: Limits, deadline: Deadline) -> tuple[WorkbookPackage, zipfile.ZipFile]:
    zf = check_zip(data, limits, "xlsx")
    # the workbook, styles and shared strings parts are parsed whole; worksheets are streamed
    charge_xml_parts(zf, limits, "xlsx", skip=lambda name: name.startswith("xl/worksheets/"))
    _, zf = to_transitional(data, zf, limits, deadline, "xlsx")
    return read_workbook(zf, limits, deadline), zf


@register_parser("xlsx", "1.2", (XLSX,), ("xlsx", "xlsm", "xltx", "xltm"))
def parse_xlsx(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    book, zf = _open_workbook(data, limits, deadline)
    include_hidden = bool(ctx.options.get("include_hidden_sheets", False))
    header_opt = header_option(ctx.options.get("first_row_as_header", "auto"))
    builder = BlockBuilder(limits.max_blocks, limits.max_chars)
    cells = CellBudget(limits.max_cells)
    embeds = PackageEmbeds(zf, limits, deadline, ctx.options)
    sheets, skipped = [], []
    total_rows = 0
    for sheet in book.sheets:
        if sheet.state != "visible" and not include_hidden:
            skipped.append(sheet.title)
            continue
        if sheet.is_chartsheet or sheet.path is None:
            continue
        scan = _scan_sheet(zf, sheet.path, deadline)
        mark = len(builder.blocks)
        builder.heading(sheet.title, 1)
        rows = sheet_rows(zf, sheet.path, book, deadline)
        n = emit_rows(
            builder,
            _rows(rows, sheet.title, _MergeFill(scan.merges, cells, deadline), scan, cells),
            sheet=sheet.title,
            first_row_as_header=header_opt,
            limits=dataclasses.replace(limits, max_rows=limits.max_rows - total_rows),
            deadline=deadline,
            cells_budget=cells,
            first_col=scan.first_col or 0,
        )
        total_rows += n
        _sheet_objects(zf, sheet.path, sheet.title, builder, embeds, deadline)
        if len(builder.blocks) == mark + 1:  # an empty sheet: drop its lone heading
            builder.blocks.pop()
        else:
            sheets.append(sheet.title)
    if not any(b.kind != BlockKind.HEADING for b in builder.blocks):
        raise ParseError(ParseErrorCode.EMPTY, "no non-empty cells in visible sheets")
    meta: dict[str, Any] = {"sheets": sheets, "rows": total_rows}
    if skipped:
        meta["hidden_sheets_skipped"] = skipped
    embeds.record(meta)
    if book.creator:
        meta["author"] = book.creator
    return ParsedDocument(blocks=builder.blocks, title=book.title, media_type=XLSX, metadata=meta)
