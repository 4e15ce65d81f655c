"""XLSX (openpyxl, read-only streaming): one table block per non-empty row.

* every visible sheet (hidden ones with option ``include_hidden_sheets``), a heading per sheet;
* ``first_row_as_header``: true / false / "auto" (default) -- see :mod:`._tabular`;
* cached formula values (``data_only``), numbers and dates rendered with their number format;
* merged ranges filled with their top-left value (read from the sheet XML, which read-only
  openpyxl does not expose);
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
import io
import re
import warnings
import zipfile
from collections.abc import Iterator
from typing import Any

from lxml import etree

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits, parse_xml
from plugins.parsers._numfmt import format_value
from plugins.parsers._ooxml import charge_xml_parts, check_zip, repair_relationships, xml_error
from plugins.parsers._ooxml_charts import add_chart_block
from plugins.parsers._ooxml_embedded import PackageEmbeds, related_parts
from plugins.parsers._ooxml_strict import to_transitional
from plugins.parsers._tabular import EMPTY_RUN_LIMIT, CellBudget, emit_rows, header_option
from plugins.parsers.registry import ParseContext, register_parser
from plugins.parsers.sniff import XLSX

__all__ = ["parse_xlsx"]

_IMAGE_FORMULA = re.compile(r"^\s*=?\s*(?:_xlfn\.)?(?:DISPIMG|IMAGE)\s*\(", re.I)
_MAIN_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_REF = re.compile(r"([A-Z]+)(\d+)")
_IMAGE_CELL = re.compile(
    rb"<(?:\w+:)?c\b[^>]*?\br=[\"']([A-Z]+)(\d+)[\"'][^>]*>\s*<(?:\w+:)?f\b[^>]*>[^<]*?(?i:DISPIMG|_xlfn\.IMAGE)\s*\("
)
_CELL_COLUMN = re.compile(rb"<(?:\w+:)?c\b[^>]*?\br=[\"']\$?([A-Z]{1,3})[0-9]")
_CELL_WITHOUT_REF = re.compile(rb"<(?:\w+:)?c(?=[\s>/])(?![^>]*?\br=)")
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


def _scan_sheet(zf: zipfile.ZipFile, path: str | None, deadline: Deadline, find_first_col: bool) -> _SheetScan:
    """Merged ranges ((min_row, min_col, max_row, max_col), rows 1-based, cols 0-based), the
    cells whose formula is an image function and (``find_first_col``) the leftmost cell's
    column, from the raw sheet XML.

    A byte scan rather than an XML parse: ``<mergeCell>`` elements sit after the (possibly
    million-row) sheet data, and read-only openpyxl drops formulas when it reads cached values.
    Scanning bytes is two orders of magnitude faster than building an element per row. Ranges
    are a set: the same range listed 20,000 times is one range.
    """
    scan = _SheetScan()
    if not path or path.lstrip("/") not in zf.namelist():
        return scan
    merges, images = scan.merges, scan.images
    columns: set[bytes] = set()
    unnumbered = not find_first_col
    tail = b""
    with zf.open(path.lstrip("/")) as fh:
        while chunk := fh.read(1 << 20):
            deadline.check("xlsx sheet scan")
            buf = tail + chunk
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


def _cell_text(cell: Any) -> str:
    value = getattr(cell, "value", None)
    if value is None:
        return ""
    if isinstance(value, str):
        return "" if _IMAGE_FORMULA.match(value) else value.strip()
    return format_value(value, getattr(cell, "number_format", None))


def _sparse_rows(ws: Any) -> Iterator[tuple[int, list[Any]]]:
    """``(row number, cells present)`` straight from openpyxl's sheet parser.

    ``ws.iter_rows()`` pads every row with an empty cell per missing column, so one cell in
    column XFD makes 16,384 cells per row; the parser underneath yields only the cells present.
    """
    # openpyxl is heavy (its styles and formula modules); loaded by the first spreadsheet only
    from openpyxl.cell.read_only import ReadOnlyCell  # heavy, see above
    from openpyxl.worksheet._reader import WorkSheetParser  # heavy, see above

    wb = ws.parent
    with ws._get_source() as src:
        parser = WorkSheetParser(
            src,
            ws._shared_strings,
            data_only=wb.data_only,
            epoch=wb.epoch,
            date_formats=wb._date_formats,
            timedelta_formats=wb._timedelta_formats,
        )
        for n, row in parser.parse():
            yield n, [ReadOnlyCell(ws, **cell) for cell in row]


def _rows(ws: Any, fill: _MergeFill, scan: _SheetScan, budget: CellBudget) -> Iterator[tuple[int, list[str]]]:
    image_rows: dict[int, set[int]] = {}
    for r, c in scan.images:
        image_rows.setdefault(r, set()).add(c)
    # columns left of the sheet's leftmost cell are empty in every row: not materialised, so a
    # sheet written in column XFD has one-cell rows (header names keep their real letters)
    offset = scan.first_col or 0
    last = 0
    for n, present in _sparse_rows(ws):
        # rows absent from the XML are empty rows: yielded (at most the run that ends a sheet)
        # so that a long empty stretch still ends the sheet, as with styled empty rows
        for gap in range(last + 1, min(n, last + 1 + EMPTY_RUN_LIMIT)):
            yield gap, []
        last = max(last, n)
        skip = image_rows.get(n, ())
        texts: dict[int, str] = {}
        for cell in present:
            col = cell.column - 1
            if col not in skip and (text := _cell_text(cell)):
                texts[col] = text
        fill.apply(n, texts)
        width = max(texts) + 1 - offset if texts else 0
        budget.charge(width, f"row {n} of sheet {ws.title!r}")
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


def _load_workbook(data: bytes) -> Any:
    """``openpyxl.load_workbook(read_only=True, data_only=True)`` with a lean stylesheet step.

    openpyxl's own (``apply_stylesheet``) builds every font, fill, border and named style: half
    of a small workbook's parse, for values that need only each cell format's number format
    (:func:`_apply_number_formats`). Custom properties and the theme are not read either."""
    from openpyxl.reader.excel import ExcelReader  # heavy (styles, formulas); first spreadsheet only

    reader = ExcelReader(io.BytesIO(data), read_only=True, data_only=True, keep_links=False)
    reader.read_manifest()
    reader.read_strings()
    reader.read_workbook()
    reader.read_properties()
    if _STYLES_PART in reader.archive.namelist():
        _apply_number_formats(reader.archive.read(_STYLES_PART), reader.wb)
    reader.read_worksheets()
    reader.parser.assign_names()
    return reader.wb


_STYLES_PART = "xl/styles.xml"


def _apply_number_formats(styles_xml: bytes, wb: Any) -> None:
    """Each cell format's number format, and which are dates or durations, as openpyxl's
    ``Stylesheet._normalise_numbers`` sets them (custom ids rebased past the built-ins)."""
    from openpyxl.styles.cell_style import StyleArray  # loaded already with the reader
    from openpyxl.styles.numbers import (  # loaded already with the reader
        BUILTIN_FORMATS_MAX_SIZE,
        BUILTIN_FORMATS_REVERSE,
        builtin_format_code,
        is_date_format,
        is_timedelta_format,
    )
    from openpyxl.utils.indexed_list import IndexedList  # loaded already with the reader

    root = parse_xml(styles_xml, "xlsx styles")
    ns = {"m": _MAIN_NS}
    xfs = root.findall("m:cellXfs/m:xf", ns)
    if not xfs:  # as openpyxl: no cell formats, its defaults stay
        return
    try:
        custom = {int(n.get("numFmtId", "")): n.get("formatCode", "") for n in root.iterfind("m:numFmts/m:numFmt", ns)}
        ids = [int(xf.get("numFmtId", "0")) for xf in xfs]
    except ValueError as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"xlsx styles: {exc}") from exc
    formats: Any = IndexedList()
    styles, dates, durations = [], set(), set()
    for index, fmt_id in enumerate(ids):
        if fmt_id in custom:
            fmt = custom[fmt_id]
            reverse = BUILTIN_FORMATS_REVERSE.get(fmt)  # a built-in written out: its own id
            fmt_id = reverse if reverse is not None else formats.add(fmt) + BUILTIN_FORMATS_MAX_SIZE
        else:
            fmt = builtin_format_code(fmt_id)
        if is_date_format(fmt):
            dates.add(index)
        if is_timedelta_format(fmt):
            durations.add(index)
        styles.append(StyleArray([0, 0, 0, fmt_id, 0, 0, 0, 0, 0]))
    wb._number_formats, wb._cell_styles = formats, IndexedList(styles)
    wb._date_formats, wb._timedelta_formats = dates, durations


def _open_workbook(data: bytes, limits: Limits, deadline: Deadline) -> tuple[Any, zipfile.ZipFile]:
    zf = check_zip(data, limits, "xlsx")
    # openpyxl builds trees of the workbook, styles and shared strings; worksheets it streams
    charge_xml_parts(zf, limits, "xlsx", skip=lambda name: name.startswith("xl/worksheets/"))
    data, zf = to_transitional(data, zf, limits, deadline, "xlsx")
    repaired = repair_relationships(data, zf)
    if repaired is not data:
        data, zf = repaired, zipfile.ZipFile(io.BytesIO(repaired))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # openpyxl warns about every unknown extension
            wb = _load_workbook(data)
    except etree.XMLSyntaxError as exc:
        raise xml_error(exc, "xlsx") from exc
    except (KeyError, zipfile.BadZipFile, OSError) as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"xlsx: {type(exc).__name__}: {exc}") from exc
    return wb, zf


@register_parser("xlsx", "1.1", (XLSX,), ("xlsx", "xlsm", "xltx", "xltm"))
def parse_xlsx(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    wb, zf = _open_workbook(data, limits, deadline)
    include_hidden = bool(ctx.options.get("include_hidden_sheets", False))
    header_opt = header_option(ctx.options.get("first_row_as_header", "auto"))
    builder = BlockBuilder(limits.max_blocks, limits.max_chars)
    cells = CellBudget(limits.max_cells)
    embeds = PackageEmbeds(zf, limits, deadline, ctx.options)
    sheets, skipped = [], []
    total_rows = 0
    try:
        for ws in wb.worksheets:
            if ws.sheet_state != "visible" and not include_hidden:
                skipped.append(ws.title)
                continue
            if not hasattr(ws, "iter_rows"):  # chartsheets
                continue
            # the leftmost column is looked for where the <dimension> does not start at A
            # (or is missing): the only sheets that can have empty leading columns
            find_first_col = ws.min_column != 1 or ws.max_column is None
            scan = _scan_sheet(zf, getattr(ws, "_worksheet_path", None), deadline, find_first_col)
            mark = len(builder.blocks)
            builder.heading(ws.title, 1)
            n = emit_rows(
                builder,
                _rows(ws, _MergeFill(scan.merges, cells, deadline), scan, cells),
                sheet=ws.title,
                first_row_as_header=header_opt,
                limits=dataclasses.replace(limits, max_rows=limits.max_rows - total_rows),
                deadline=deadline,
                cells_budget=cells,
                first_col=scan.first_col or 0,
            )
            total_rows += n
            _sheet_objects(zf, getattr(ws, "_worksheet_path", None), ws.title, builder, embeds, deadline)
            if len(builder.blocks) == mark + 1:  # an empty sheet: drop its lone heading
                builder.blocks.pop()
            else:
                sheets.append(ws.title)
    except etree.XMLSyntaxError as exc:
        raise xml_error(exc, "xlsx") from exc
    finally:
        wb.close()
    if not any(b.kind != BlockKind.HEADING for b in builder.blocks):
        raise ParseError(ParseErrorCode.EMPTY, "no non-empty cells in visible sheets")
    props = wb.properties
    meta: dict[str, Any] = {"sheets": sheets, "rows": total_rows}
    if skipped:
        meta["hidden_sheets_skipped"] = skipped
    embeds.record(meta)
    if props is not None and props.creator:
        meta["author"] = props.creator
    title = props.title if props is not None and props.title else None
    return ParsedDocument(blocks=builder.blocks, title=title, media_type=XLSX, metadata=meta)
