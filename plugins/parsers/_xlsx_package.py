"""SpreadsheetML read straight from the package: the workbook's sheets, shared strings, cell
number formats and core properties, and each worksheet's cells as a stream of rows.

The values are the cached ones a spreadsheet application last computed (what openpyxl calls
``data_only``), typed as ECMA-376 Part 1, 18.18.11 ``ST_CellType`` says: shared and inline
strings, numbers (dates where the cell's number format is a date format), booleans, errors and
ISO 8601 dates. Nothing else of the workbook is read: no fonts, fills, borders or named
styles, which is what made a general library's load cost most of a small workbook's parse.

Every part is parsed by lxml without entities, network or huge trees; worksheets and the
shared-string table are streamed and cleared as they go, so memory follows a row, not a sheet.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import posixpath
import re
import zipfile
from collections.abc import Iterator
from typing import IO

from lxml import etree

from include.contract import ParseError, ParseErrorCode
from plugins.parsers._common import Deadline, Limits, parse_xml
from plugins.parsers._numfmt import BUILTIN_FORMATS, excel_serial_to_datetime, is_date_format, is_duration_format
from plugins.parsers._ooxml import content_types

__all__ = ["CellFormats", "SheetEntry", "WorkbookPackage", "read_workbook", "sheet_rows"]

_MAIN = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_REL = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
_PKG_REL = "{http://schemas.openxmlformats.org/package/2006/relationships}"
_DC = "{http://purl.org/dc/elements/1.1/}"
_ROW, _C, _V, _IS, _T, _R = (f"{_MAIN}{tag}" for tag in ("row", "c", "v", "is", "t", "r"))
_WORKBOOK_TYPES = frozenset(
    {
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.template.main+xml",
        "application/vnd.ms-excel.sheet.macroEnabled.main+xml",
        "application/vnd.ms-excel.template.macroEnabled.main+xml",
    }
)
_CELL_REF = re.compile(r"\$?([A-Za-z]{1,3})\$?[0-9]+")
# the first id past the built-in number formats (ECMA-376 Part 1, 18.8.30)
_FIRST_CUSTOM_FORMAT = 164
# a .rels part lists a part's relationships: a few KB in real files
_MAX_RELS_BYTES = 4 << 20
Value = str | int | float | bool | dt.datetime | dt.time | dt.timedelta


@dataclasses.dataclass(frozen=True, slots=True)
class SheetEntry:
    title: str
    state: str  # visible, hidden or veryHidden (18.18.68 ST_SheetState)
    path: str | None  # the sheet's part in the zip; None where the workbook points at nothing
    is_chartsheet: bool


@dataclasses.dataclass(frozen=True, slots=True)
class CellFormats:
    """The number format of each cell format (``cellXfs``), which cells' ``s`` attribute indexes."""

    codes: tuple[str, ...] = ()
    dates: frozenset[int] = frozenset()
    durations: frozenset[int] = frozenset()

    def code(self, style: int) -> str:
        return self.codes[style] if 0 <= style < len(self.codes) else "General"


@dataclasses.dataclass(frozen=True, slots=True)
class WorkbookPackage:
    sheets: list[SheetEntry]
    strings: list[str]
    formats: CellFormats
    date1904: bool
    creator: str | None = None
    title: str | None = None


def _xml(zf: zipfile.ZipFile, name: str, what: str) -> etree._Element:
    try:
        data = zf.read(name)
    except (KeyError, zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"xlsx: {what}: {type(exc).__name__}: {exc}") from exc
    return parse_xml(data, f"xlsx {what}")


def _relationships(zf: zipfile.ZipFile, part: str) -> dict[str, tuple[str, str]]:
    """``{id: (type, target part)}`` of ``part``'s internal relationships (OPC, ECMA-376 Part 2, 9.3)."""
    base, name = posixpath.split(part)
    rels_name = posixpath.join(base, "_rels", f"{name}.rels")
    try:
        info = zf.getinfo(rels_name)
    except KeyError:
        return {}
    if info.file_size > _MAX_RELS_BYTES:
        raise ParseError(ParseErrorCode.TOO_LARGE, f"xlsx: {rels_name} of {info.file_size} bytes")
    out: dict[str, tuple[str, str]] = {}
    for rel in _xml(zf, rels_name, rels_name).iter(f"{_PKG_REL}Relationship"):
        target = rel.get("Target") or ""
        if rel.get("TargetMode") == "External" or not target:
            continue
        resolved = target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(base, target))
        out[rel.get("Id") or ""] = (rel.get("Type") or "", resolved)
    return out


def _workbook_part(zf: zipfile.ZipFile, limits: Limits) -> str:
    """The workbook part: the one its content type names, else the conventional name."""
    _, overrides = content_types(zf, limits)
    names = set(zf.namelist())
    for part, content_type in overrides.items():
        if content_type in _WORKBOOK_TYPES:
            for name in names:  # content-type keys are lower case, zip names need not be
                if name.lower() == part:
                    return name
    if "xl/workbook.xml" in names:
        return "xl/workbook.xml"
    raise ParseError(ParseErrorCode.CORRUPT, "xlsx: no workbook part")


def _related(rels: dict[str, tuple[str, str]], suffix: str, names: set[str], default: str) -> str | None:
    for rel_type, target in rels.values():
        if rel_type.endswith(suffix) and target in names:
            return target
    return default if default in names else None


def read_workbook(zf: zipfile.ZipFile, limits: Limits, deadline: Deadline) -> WorkbookPackage:
    """The workbook's sheets in tab order, its shared strings, cell formats and core properties."""
    part = _workbook_part(zf, limits)
    root = _xml(zf, part, part)
    rels = _relationships(zf, part)
    names = set(zf.namelist())
    sheets = []
    for sheet in root.iterfind(f"{_MAIN}sheets/{_MAIN}sheet"):
        rel_type, target = rels.get(sheet.get(f"{_REL}id") or "", ("", ""))
        sheets.append(
            SheetEntry(
                title=sheet.get("name") or "",
                state=sheet.get("state") or "visible",
                path=target if target in names else None,
                is_chartsheet="chartsheet" in rel_type,
            )
        )
    props = root.find(f"{_MAIN}workbookPr")
    date1904 = props is not None and (props.get("date1904") or "").lower() in ("1", "true")
    strings_part = _related(rels, "/sharedStrings", names, "xl/sharedStrings.xml")
    styles_part = _related(rels, "/styles", names, "xl/styles.xml")
    creator, title = _core_properties(zf, names)
    return WorkbookPackage(
        sheets=sheets,
        strings=_shared_strings(zf, strings_part, deadline) if strings_part else [],
        formats=_cell_formats(_xml(zf, styles_part, "styles")) if styles_part else CellFormats(),
        date1904=date1904,
        creator=creator,
        title=title,
    )


def _core_properties(zf: zipfile.ZipFile, names: set[str]) -> tuple[str | None, str | None]:
    """``dc:creator`` and ``dc:title`` of the package's core properties (ECMA-376 Part 2, 11)."""
    if "docProps/core.xml" not in names:
        return None, None
    try:
        root = _xml(zf, "docProps/core.xml", "core properties")
    except ParseError:  # damaged metadata costs the author and title, not the workbook
        return None, None
    return root.findtext(f"{_DC}creator") or None, root.findtext(f"{_DC}title") or None


def _string_item(item: etree._Element) -> str:
    """A shared or inline string (18.4.8 ``si``, 18.3.1.53 ``is``): its plain text or the text
    of its rich-text runs; phonetic runs (``rPh``) are a reading aid, not content."""
    parts = []
    for child in item:
        if child.tag == _T:
            parts.append(child.text or "")
        elif child.tag == _R:
            parts.extend(t.text or "" for t in child if t.tag == _T)
    # "_x005F_" escapes an underscore that would otherwise start an "_xHHHH_" escape (22.9.2.19)
    return "".join(parts).replace("x005F_", "")


def _shared_strings(zf: zipfile.ZipFile, part: str, deadline: Deadline) -> list[str]:
    strings: list[str] = []
    with zf.open(part) as fh:
        for item in _stream(fh, f"{_MAIN}si", "xlsx shared strings"):
            strings.append(_string_item(item))
            if len(strings) % 4096 == 0:
                deadline.check("xlsx shared strings")
    return strings


def _cell_formats(root: etree._Element) -> CellFormats:
    """Each cell format's number format: its ``numFmt`` element, else the built-in of that id."""
    try:
        custom = {
            int(n.get("numFmtId", "")): n.get("formatCode", "") for n in root.iterfind(f"{_MAIN}numFmts/{_MAIN}numFmt")
        }
        ids = [int(xf.get("numFmtId", "0")) for xf in root.iterfind(f"{_MAIN}cellXfs/{_MAIN}xf")]
    except ValueError as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"xlsx styles: {exc}") from exc
    codes = []
    for fmt_id in ids:
        code = custom.get(fmt_id)
        if code is None:
            code = BUILTIN_FORMATS.get(fmt_id, "General") if fmt_id < _FIRST_CUSTOM_FORMAT else "General"
        codes.append(code)
    return CellFormats(
        codes=tuple(codes),
        dates=frozenset(i for i, code in enumerate(codes) if is_date_format(code)),
        durations=frozenset(i for i, code in enumerate(codes) if is_duration_format(code)),
    )


def _stream(source: IO[bytes], tag: str, what: str) -> Iterator[etree._Element]:
    """Each ``tag`` element of a (possibly huge) part, cleared with what precedes it once used."""
    events = etree.iterparse(
        source, events=("end",), tag=tag, resolve_entities=False, no_network=True, huge_tree=False, load_dtd=False
    )
    try:
        for _, element in events:
            yield element
            element.clear(keep_tail=True)
            parent = element.getparent()
            if parent is not None:
                while element.getprevious() is not None:
                    del parent[0]
    except etree.XMLSyntaxError as exc:
        code = (
            ParseErrorCode.BOMB if "depth" in str(exc).lower() or "nest" in str(exc).lower() else ParseErrorCode.CORRUPT
        )
        raise ParseError(code, f"{what}: {exc}") from exc


def _column(ref: str | None, previous: int) -> int:
    """A cell's 0-based column: from its reference, else the one after the previous cell's
    (a cell without ``r`` is the next cell of its row, 18.3.1.4)."""
    if ref and (m := _CELL_REF.fullmatch(ref)):
        n = 0
        for ch in m.group(1).upper():
            n = n * 26 + ord(ch) - 64
        return n - 1
    return previous + 1


def _row_number(row: etree._Element, previous: int) -> int:
    try:
        return int(float(row.get("r") or ""))
    except (ValueError, OverflowError):
        return previous + 1  # no r (or an unreadable one): the row after the previous one


def _number(text: str, style: int, book: WorkbookPackage) -> Value:
    try:
        number: int | float = float(text) if ("." in text or "e" in text or "E" in text) else int(text)
    except ValueError:
        return text  # a number that is not one is shown as written, not dropped
    if style in book.formats.dates:
        try:
            return excel_serial_to_datetime(number, book.date1904, style in book.formats.durations)
        except (OverflowError, ValueError):
            return "#VALUE!"  # as Excel shows a date format applied to a serial out of range
    return number


def _value(cell: etree._Element, kind: str, style: int, book: WorkbookPackage) -> Value | None:
    """The cell's cached value by its type (18.18.11 ``ST_CellType``)."""
    if kind == "inlineStr":
        item = cell.find(_IS)
        return _string_item(item) if item is not None else None
    text: str | None = cell.findtext(_V)
    if not text:
        return None
    if kind == "n":
        return _number(text, style, book)
    if kind == "s":
        try:
            return book.strings[int(text)]
        except (ValueError, IndexError):
            return None  # an index into nothing: the cell shows nothing
    if kind == "b":
        return text.strip() not in ("0", "false")
    if kind == "d":
        try:
            return dt.datetime.fromisoformat(text.rstrip("Z"))
        except ValueError:
            return text
    return text  # str (a formula's text result) and e (an error such as #N/A)


def sheet_rows(
    zf: zipfile.ZipFile, path: str, book: WorkbookPackage, deadline: Deadline
) -> Iterator[tuple[int, list[tuple[int, Value, str]]]]:
    """``(row number, [(0-based column, value, number format)])`` for each ``row`` element, in
    document order, with only the cells that hold a value (a cell in column XFD is one cell)."""
    formats = book.formats
    row_number = 0
    with zf.open(path) as fh:
        for count, row in enumerate(_stream(fh, _ROW, f"xlsx sheet {path}")):
            if count % 256 == 255:
                deadline.check("xlsx rows")
            row_number = _row_number(row, row_number)
            cells: list[tuple[int, Value, str]] = []
            col = -1
            for cell in row:
                if cell.tag != _C:
                    continue
                col = _column(cell.get("r"), col)
                style_attr = cell.get("s")
                style = int(style_attr) if style_attr and style_attr.isdigit() else 0
                value = _value(cell, cell.get("t") or "n", style, book)
                if value is not None:
                    cells.append((col, value, formats.code(style)))
            yield row_number, cells
