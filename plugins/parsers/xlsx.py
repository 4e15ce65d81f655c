"""XLSX (openpyxl, read-only streaming): one table block per non-empty row.

* every visible sheet (hidden ones with option ``include_hidden_sheets``), a heading per sheet;
* ``first_row_as_header``: true / false / "auto" (default) -- see :mod:`._tabular`;
* cached formula values (``data_only``), numbers and dates rendered with their number format;
* merged ranges filled with their top-left value (read from the sheet XML, which read-only
  openpyxl does not expose);
* image formulas (WPS ``DISPIMG``, Excel ``_xlfn.IMAGE``) stripped;
* a run of 10,000 empty rows ends the sheet (styled-but-empty tails); ``max_rows`` caps data.
"""

from __future__ import annotations

import dataclasses
import io
import re
import warnings
import zipfile
from typing import Any

from lxml import etree

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode
from plugins.parsers._common import BlockBuilder, Deadline, Limits
from plugins.parsers._numfmt import format_value
from plugins.parsers._ooxml import check_zip, repair_relationships, xml_error
from plugins.parsers._tabular import emit_rows, header_option
from plugins.parsers.registry import ParseContext, register_parser
from plugins.parsers.sniff import XLSX

__all__ = ["parse_xlsx"]

_IMAGE_FORMULA = re.compile(r"^\s*=?\s*(?:_xlfn\.)?(?:DISPIMG|IMAGE)\s*\(", re.I)
_MAIN_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_REF = re.compile(r"([A-Z]+)(\d+)")
_IMAGE_CELL = re.compile(
    rb"<(?:\w+:)?c\b[^>]*?\br=[\"']([A-Z]+)(\d+)[\"'][^>]*>\s*<(?:\w+:)?f\b[^>]*>[^<]*?(?i:DISPIMG|_xlfn\.IMAGE)\s*\("
)
_MERGE = re.compile(rb"<(?:\w+:)?mergeCell\b[^>]*?\bref=[\"']\$?([A-Z]+\$?\d+):\$?([A-Z]+\$?\d+)[\"']")


def _col_index(letters: str) -> int:
    n = 0
    for ch in letters:
        n = n * 26 + ord(ch) - 64
    return n - 1


def _scan_sheet(zf: zipfile.ZipFile, path: str | None) -> tuple[list[tuple[int, int, int, int]], set[tuple[int, int]]]:
    """Merged ranges ((min_row, min_col, max_row, max_col), rows 1-based, cols 0-based) and the
    cells whose formula is an image function, from the raw sheet XML.

    A byte scan rather than an XML parse: ``<mergeCell>`` elements sit after the (possibly
    million-row) sheet data, and read-only openpyxl drops formulas when it reads cached values.
    Scanning bytes is two orders of magnitude faster than building an element per row.
    """
    merges: list[tuple[int, int, int, int]] = []
    images: set[tuple[int, int]] = set()
    if not path or path.lstrip("/") not in zf.namelist():
        return merges, images
    tail = b""
    with zf.open(path.lstrip("/")) as fh:
        while chunk := fh.read(1 << 20):
            buf = tail + chunk
            last_end = 0
            for m in _MERGE.finditer(buf) if b"mergeCell" in buf else ():
                ma, mb = _REF.fullmatch(m.group(1).decode()), _REF.fullmatch(m.group(2).decode())
                if ma and mb:
                    merges.append(
                        (int(ma.group(2)), _col_index(ma.group(1)), int(mb.group(2)), _col_index(mb.group(1)))
                    )
                last_end = max(last_end, m.end())
            # plain substring tests first: they run at memory speed, the regexes do not
            if b"DISPIMG" in buf or b"dispimg" in buf or b"_xlfn." in buf:
                for m in _IMAGE_CELL.finditer(buf):
                    images.add((int(m.group(2)), _col_index(m.group(1).decode())))
                    last_end = max(last_end, m.end())
            tail = buf[max(last_end, len(buf) - 4096) :]
    return merges, images


def _cell_text(cell: Any) -> str:
    value = getattr(cell, "value", None)
    if value is None:
        return ""
    if isinstance(value, str):
        return "" if _IMAGE_FORMULA.match(value) else value.strip()
    return format_value(value, getattr(cell, "number_format", None))


def _rows(ws: Any, merges: list[tuple[int, int, int, int]], images: set[tuple[int, int]]):
    # top-left value of each merge, filled in when the range's other cells stream past
    anchors: dict[tuple[int, int], tuple[int, int]] = {}
    for r0, c0, r1, c1 in merges:
        if (r1 - r0 + 1) * (c1 - c0 + 1) > 100_000:
            continue  # absurd ranges (whole columns): fill nothing rather than blow up
        for r in range(r0, r1 + 1):
            for c in range(c0, c1 + 1):
                if (r, c) != (r0, c0):
                    anchors[(r, c)] = (r0, c0)
    values: dict[tuple[int, int], str] = {}
    anchor_cells = set(anchors.values())
    first = ws.min_row or 1
    for i, row in enumerate(ws.iter_rows()):
        n = first + i
        cells = [_cell_text(c) for c in row]
        for r, c in images:
            if r == n and c < len(cells):
                cells[c] = ""
        if anchors:
            for c, text in enumerate(cells):
                if (n, c) in anchor_cells:
                    values[(n, c)] = text
            width = len(cells)
            for (r, c), src in anchors.items():
                if r == n:
                    if c >= width:
                        cells.extend([""] * (c + 1 - width))
                        width = len(cells)
                    if not cells[c]:
                        cells[c] = values.get(src, "")
        yield n, cells


@register_parser("xlsx", "1.0", (XLSX,), ("xlsx", "xlsm", "xltx", "xltm"))
def parse_xlsx(data: bytes, ctx: ParseContext) -> ParsedDocument:
    import openpyxl

    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    zf = check_zip(data, limits, "xlsx")
    repaired = repair_relationships(data, zf)
    if repaired is not data:
        data, zf = repaired, zipfile.ZipFile(io.BytesIO(repaired))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # openpyxl warns about every unknown extension
            wb = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True, keep_links=False)
    except etree.XMLSyntaxError as exc:
        raise xml_error(exc, "xlsx") from exc
    except (KeyError, zipfile.BadZipFile, OSError) as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"xlsx: {type(exc).__name__}: {exc}") from exc
    include_hidden = bool(ctx.options.get("include_hidden_sheets", False))
    header_opt = header_option(ctx.options.get("first_row_as_header", "auto"))
    builder = BlockBuilder(limits.max_blocks)
    sheets, skipped = [], []
    total_rows = 0
    try:
        for ws in wb.worksheets:
            if ws.sheet_state != "visible" and not include_hidden:
                skipped.append(ws.title)
                continue
            if not hasattr(ws, "iter_rows"):  # chartsheets
                continue
            ws.reset_dimensions()  # trust the rows, not a possibly stale <dimension>
            merges, images = _scan_sheet(zf, getattr(ws, "_worksheet_path", None))
            mark = len(builder.blocks)
            builder.heading(ws.title, 1)
            n = emit_rows(
                builder,
                _rows(ws, merges, images),
                sheet=ws.title,
                first_row_as_header=header_opt,
                limits=dataclasses.replace(limits, max_rows=limits.max_rows - total_rows),
                deadline=deadline,
            )
            total_rows += n
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
    if props is not None and props.creator:
        meta["author"] = props.creator
    title = props.title if props is not None and props.title else None
    return ParsedDocument(blocks=builder.blocks, title=title, media_type=XLSX, metadata=meta)
