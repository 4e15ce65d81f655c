"""Strict OOXML (ISO/IEC 29500 Strict) DOCX/XLSX/PPTX: real Strict files and Strict copies of
python-docx/openpyxl/python-pptx documents, plus a small fuzz of the Strict rewriting path."""

from __future__ import annotations

import contextlib
import io
import zipfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from include.contract import BlockKind, ParseError
from tests.parsers.conftest import parse_bytes, realdoc
from tests.parsers.ooxml import strictify, with_inflated_sheet


def _docx_bytes() -> bytes:
    import docx

    d = docx.Document()
    d.add_heading("Strict heading", 1)
    d.add_paragraph("Body paragraph in a strict package.")
    t = d.add_table(rows=2, cols=2)
    for r, row in enumerate([["Name", "Value"], ["alpha", "1"]]):
        for c, text in enumerate(row):
            t.cell(r, c).text = text
    d.sections[0].header.paragraphs[0].text = "Strict page header"
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


def _xlsx_bytes() -> bytes:
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Data"
    ws.append(["city", "share"])
    ws.append(["Oslo", 0.025])
    ws["B2"].number_format = "0%"
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def _pptx_bytes() -> bytes:
    from pptx import Presentation

    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "Strict slide"
    slide.placeholders[1].text_frame.text = "A point on a strict slide"
    buf = io.BytesIO()
    prs.save(buf)
    return buf.getvalue()


def test_real_strict_docx_files():
    # 0117_7691.docx (Apache Tika) and 0157_strict-format.docx (python-docx issue files): Word's
    # Strict saves; were "KeyError: no relationship of type .../officeDocument"
    assert [b.text for b in parse_bytes(realdoc("docx/0117_7691.docx"), "7691.docx").blocks] == ["Some text"]
    assert [b.text for b in parse_bytes(realdoc("docx/0157_strict-format.docx"), "s.docx").blocks] == ["Test"]


def test_real_strict_xlsx_file():
    # 0875_testEXCEL.strict.xlsx (Apache Tika): three sheets; was reported empty
    doc = parse_bytes(realdoc("xlsx/0875_testEXCEL.strict.xlsx"), "strict.xlsx")
    assert doc.metadata["sheets"] == ["First Sheet", "Sheet Number 2"]  # Sheet3 is empty
    rows = [b.rows[0] for b in doc.blocks if b.kind == BlockKind.TABLE]
    assert ["2nd row", "2nd row 2nd column"] in rows
    assert ["1", "10", "2", "13"] in rows  # cached formula value of =SUM
    assert any(b.text == "Test spreadsheet" for b in doc.blocks)


def test_strict_copy_of_python_docx_document_reads_like_the_original():
    original = _docx_bytes()
    strict = strictify(original)
    assert b"purl.oclc.org/ooxml/wordprocessingml/main" in zipfile.ZipFile(io.BytesIO(strict)).read("word/document.xml")
    want = [(b.kind, b.text, b.metadata.get("part")) for b in parse_bytes(original, "t.docx").blocks]
    got = [(b.kind, b.text, b.metadata.get("part")) for b in parse_bytes(strict, "s.docx").blocks]
    assert got == want
    assert (BlockKind.PARAGRAPH, "Strict page header", "header") in got


def test_strict_copy_of_openpyxl_workbook():
    doc = parse_bytes(strictify(_xlsx_bytes()), "s.xlsx")
    table = next(b for b in doc.blocks if b.kind == BlockKind.TABLE)
    assert table.header == ["city", "share"]
    assert table.rows == [["Oslo", "3%"]]  # Excel's half-away-from-zero percent


def test_strict_copy_of_python_pptx_presentation():
    doc = parse_bytes(strictify(_pptx_bytes()), "s.pptx")
    assert [(b.kind, b.text) for b in doc.blocks] == [
        (BlockKind.HEADING, "Strict slide"),
        (BlockKind.PARAGRAPH, "A point on a strict slide"),
    ]
    assert doc.blocks[1].positions[0].slide == 1


def test_transitional_package_is_not_copied():
    from plugins.parsers._common import Deadline, Limits
    from plugins.parsers._ooxml_strict import to_transitional

    data = _docx_bytes()
    zf = zipfile.ZipFile(io.BytesIO(data))
    assert to_transitional(data, zf, Limits(), Deadline(10), "docx") == (data, zf)


def test_strict_package_still_meets_the_zip_caps():
    # the Strict copy is made after the package's caps are checked: a Strict workbook whose
    # sheet expands past the ratio cap is refused before any copy
    bomb = with_inflated_sheet(strictify(_xlsx_bytes()))
    with pytest.raises(ParseError) as err:
        parse_bytes(bomb, "bomb.xlsx")
    assert err.value.code.value == "bomb"


_SEEDS = [strictify(_docx_bytes()), strictify(_xlsx_bytes()), strictify(_pptx_bytes())]
_NAMES = ["s.docx", "s.xlsx", "s.pptx"]


def _mutate_entry(seed: bytes, index: int, pos: int, junk: bytes) -> bytes:
    """The seed with one XML entry damaged at ``pos`` (the archive rebuilt, so the XML breaks)."""
    src = zipfile.ZipFile(io.BytesIO(seed))
    infos = [i for i in src.infolist() if i.filename.endswith((".xml", ".rels"))]
    victim = infos[index % len(infos)].filename
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = src.read(info)
            if info.filename == victim:
                cut = pos % max(len(body), 1)
                body = body[:cut] + junk + body[cut + len(junk) :]
            dst.writestr(info.filename, body)
    return out.getvalue()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.integers(0, 2),
    index=st.integers(0, 50),
    pos=st.integers(0, 1 << 16),
    junk=st.binary(min_size=1, max_size=12),
)
def test_fuzz_strict_packages_raise_only_parse_errors(which: int, index: int, pos: int, junk: bytes):
    data = _mutate_entry(_SEEDS[which], index, pos, junk)
    with contextlib.suppress(ParseError):  # the property: nothing but a typed ParseError
        parse_bytes(data, _NAMES[which], time_budget_s=5.0)
