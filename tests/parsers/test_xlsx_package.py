"""The SpreadsheetML reader on hand-written packages: every cell type, the 1904 date system,
cells and rows without references, and the damage real generators leave behind."""

from __future__ import annotations

import datetime as dt
import io
import zipfile

import pytest

from include.contract import BlockKind, ParseError, ParseErrorCode
from plugins.parsers._numfmt import excel_serial_to_datetime, is_date_format, is_duration_format
from tests.parsers.conftest import parse_bytes

_NS = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
_R_NS = 'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_STYLES = (
    f"<styleSheet {_NS}><numFmts><numFmt numFmtId='164' formatCode='yyyy-mm-dd'/>"
    "<numFmt numFmtId='165' formatCode='[h]:mm:ss'/></numFmts>"
    "<cellXfs><xf numFmtId='0'/><xf numFmtId='164'/><xf numFmtId='165'/><xf numFmtId='10'/>"
    "<xf numFmtId='200'/></cellXfs></styleSheet>"
)
_STRINGS = (
    f"<sst {_NS}><si><t>plain</t></si>"
    "<si><r><rPr><b/></rPr><t>rich </t></r><r><t>text</t></r><rPh><t>reading</t></rPh></si>"
    "<si><t>under_x005F_x000D_score</t></si></sst>"
)


def _package(
    sheet_data: str,
    *,
    date1904: bool = False,
    sheets: str = "<sheet name='Data' sheetId='1' r:id='rId1'/>",
    core: str | None = None,
    dimension: str = "A1",
) -> bytes:
    properties = "<workbookPr date1904='1'/>" if date1904 else "<workbookPr/>"
    workbook = f"<workbook {_NS} {_R_NS}>{properties}<sheets>{sheets}</sheets></workbook>"
    rels = (
        "<Relationships xmlns='http://schemas.openxmlformats.org/package/2006/relationships'>"
        f"<Relationship Id='rId1' Type='{_REL}/worksheet' Target='worksheets/sheet1.xml'/>"
        f"<Relationship Id='rId8' Type='{_REL}/worksheet' Target='worksheets/missing.xml'/>"
        f"<Relationship Id='rId2' Type='{_REL}/sharedStrings' Target='sharedStrings.xml'/>"
        f"<Relationship Id='rId3' Type='{_REL}/styles' Target='styles.xml'/></Relationships>"
    )
    main = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"
    types = (
        "<Types xmlns='http://schemas.openxmlformats.org/package/2006/content-types'>"
        "<Default Extension='xml' ContentType='application/xml'/>"
        f"<Override PartName='/xl/workbook.xml' ContentType='{main}'/></Types>"
    )
    sheet = f"<worksheet {_NS}><dimension ref='{dimension}'/><sheetData>{sheet_data}</sheetData></worksheet>"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("[Content_Types].xml", types)
        zf.writestr("xl/workbook.xml", workbook)
        zf.writestr("xl/_rels/workbook.xml.rels", rels)
        zf.writestr("xl/styles.xml", _STYLES)
        zf.writestr("xl/sharedStrings.xml", _STRINGS)
        zf.writestr("xl/worksheets/sheet1.xml", sheet)
        if core is not None:
            zf.writestr("docProps/core.xml", core)
    return buf.getvalue()


def _rows(data: bytes, **options: object) -> list[list[str]]:
    doc = parse_bytes(data, "book.xlsx", first_row_as_header=False, **options)
    return [b.rows[0] for b in doc.blocks if b.kind == BlockKind.TABLE]


def test_every_cell_type_as_a_spreadsheet_shows_it():
    data = _package(
        "<row r='1'><c r='A1' t='s'><v>0</v></c><c r='B1' t='s'><v>1</v></c><c r='C1' t='s'><v>2</v></c></row>"
        "<row r='2'><c r='A2' t='inlineStr'><is><t>inline</t></is></c><c r='B2' t='b'><v>1</v></c>"
        "<c r='C2' t='b'><v>0</v></c><c r='D2' t='e'><v>#N/A</v></c><c r='E2' t='str'><f>A1</f><v>cached</v></c></row>"
        "<row r='3'><c r='A3' s='1'><v>45360</v></c><c r='B3' s='2'><v>1.5</v></c><c r='C3' s='3'><v>0.125</v></c>"
        "<c r='D3'><v>1e3</v></c><c r='E3' t='d'><v>2024-03-09T10:30:00Z</v></c><c r='F3' s='99'><v>7</v></c>"
        "<c r='G3' s='4'><v>8</v></c></row>"
    )
    assert _rows(data) == [
        ["plain", "rich text", "under_x000D_score"],
        ["inline", "TRUE", "FALSE", "#N/A", "cached"],
        # a style index past cellXfs and a custom id without its numFmt are General
        ["2024-03-09", "36:00:00", "12.50%", "1000", "2024-03-09 10:30:00", "7", "8"],
    ]


def test_cells_and_rows_without_references_take_the_next_place():
    data = _package(
        "<row><c t='s'><v>0</v></c><c><v>2</v></c></row><row><c r='C2'><v>3</v></c><c><v>4</v></c></row>"
        "<row r='5.0'><c><v>5</v></c></row>"
    )
    doc = parse_bytes(data, "book.xlsx", first_row_as_header=False)
    tables = [b for b in doc.blocks if b.kind == BlockKind.TABLE]
    assert [(t.positions[0].row, t.rows[0]) for t in tables] == [
        (1, ["plain", "2"]),
        (2, ["", "", "3", "4"]),
        (5, ["5"]),
    ]


def test_1904_dates_and_the_1900_leap_day():
    data = _package("<row r='1'><c r='A1' s='1'><v>0</v></c><c r='B1' s='1'><v>45361</v></c></row>", date1904=True)
    assert _rows(data) == [["1904-01-01", "2028-03-11"]]  # 1,462 days after the 1900 system
    assert excel_serial_to_datetime(60) == dt.datetime(1900, 2, 28)  # Lotus's phantom 29th
    assert excel_serial_to_datetime(61) == dt.datetime(1900, 3, 1)
    assert excel_serial_to_datetime(1) == dt.datetime(1900, 1, 1)
    assert excel_serial_to_datetime(0.5) == dt.time(12, 0)


def test_date_and_duration_formats_are_told_apart():
    assert is_date_format("yyyy-mm-dd") and is_date_format("[$-409]h:mm AM/PM;@")
    assert not is_date_format('0.00" days"') and not is_date_format("[Red]0.00") and not is_date_format("General")
    assert is_duration_format("[h]:mm:ss") and not is_duration_format("h:mm:ss")


def test_damaged_values_are_shown_or_skipped_never_raised():
    data = _package(
        "<row r='1'><c r='A1'><v>12abc</v></c><c r='B1' t='s'><v>99</v></c><c r='C1' s='1'><v>1e308</v></c>"
        "<c r='D1' t='d'><v>not a date</v></c><c r='E1'><v></v></c><c r='F1' t='s'><v>0</v></c></row>"
    )
    assert _rows(data) == [["12abc", "", "#VALUE!", "not a date", "", "plain"]]


def test_core_properties_and_no_invented_author():
    core = (
        "<cp:coreProperties xmlns:cp='http://schemas.openxmlformats.org/package/2006/metadata/core-properties' "
        "xmlns:dc='http://purl.org/dc/elements/1.1/'><dc:creator>Ann Lee</dc:creator><dc:title>Q3</dc:title>"
        "</cp:coreProperties>"
    )
    row = "<row r='1'><c r='A1' t='s'><v>0</v></c></row>"
    doc = parse_bytes(_package(row, core=core), "book.xlsx")
    assert (doc.title, doc.metadata["author"]) == ("Q3", "Ann Lee")
    empty = "<cp:coreProperties xmlns:cp='http://schemas.openxmlformats.org/package/2006/metadata/core-properties'/>"
    for package in (_package(row, core=empty), _package(row)):
        doc = parse_bytes(package, "book.xlsx")
        assert doc.title is None and "author" not in doc.metadata


def test_sheets_pointing_at_nothing_are_left_out_and_states_kept():
    sheets = (
        "<sheet name='Gone' sheetId='2' r:id='rId8'/><sheet name='Data' sheetId='1' r:id='rId1'/>"
        "<sheet name='NoRel' sheetId='3' r:id='rId404'/>"
    )
    doc = parse_bytes(_package("<row r='1'><c r='A1' t='s'><v>0</v></c></row>", sheets=sheets), "book.xlsx")
    assert doc.metadata["sheets"] == ["Data"]
    hidden = "<sheet name='Data' sheetId='1' state='veryHidden' r:id='rId1'/>"
    with pytest.raises(ParseError) as err:
        parse_bytes(_package("<row r='1'><c r='A1' t='s'><v>0</v></c></row>", sheets=hidden), "book.xlsx")
    assert err.value.code == ParseErrorCode.EMPTY


def test_leading_empty_columns_found_only_where_the_dimension_says_so():
    rows = "<row r='1'><c r='C1'><v>1</v></c></row>"
    assert _rows(_package(rows, dimension="C1")) == [["1"]]
    assert _rows(_package(rows, dimension="A1:C1")) == [["", "", "1"]]  # trust the dimension, as Excel writes it


def test_a_damaged_workbook_part_is_a_typed_error():
    data = _package("<row r='1'><c r='A1'><v>1</v></c></row>")
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(buf, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, b"<workbook><sheets>" if info.filename == "xl/workbook.xml" else src.read(info))
    with pytest.raises(ParseError) as err:
        parse_bytes(buf.getvalue(), "book.xlsx")
    assert err.value.code == ParseErrorCode.CORRUPT
