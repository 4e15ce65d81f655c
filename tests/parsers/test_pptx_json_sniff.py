"""PPTX, JSON / JSON Lines, and routing by content (sniffing)."""

from __future__ import annotations

import io
import json

import pytest
from pptx import Presentation
from pptx.util import Inches

from include.contract import BlockKind, ParseError, ParseErrorCode
from plugins.parsers import sniff_media_type
from plugins.parsers.sniff import DOCX, PPTX, XLSX
from tests.parsers.conftest import FIXTURES, needs_soffice, parse_bytes
from tests.parsers.pdfgen import build_pdf


def _deck() -> bytes:
    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "Quarterly review"
    body = slide.placeholders[1].text_frame
    body.text = "Revenue grew"
    sub = body.add_paragraph()
    sub.text = "Costs fell"
    sub.level = 1
    slide.notes_slide.notes_text_frame.text = "Mention the hiring plan"
    second = prs.slides.add_slide(prs.slide_layouts[5])
    second.shapes.title.text = "Numbers"
    box = second.shapes.add_textbox(Inches(1), Inches(5), Inches(4), Inches(1))
    box.text_frame.text = "Footnote below the table"
    table = second.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(4), Inches(1.5)).table
    for r, row in enumerate([["Region", "Sales"], ["North", "10"], ["South", "20"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    buf = io.BytesIO()
    prs.save(buf)
    return buf.getvalue()


@needs_soffice
def test_pptx_written_by_libreoffice(lo_convert):
    data = lo_convert(_deck(), "pptx", "pptx")
    doc = parse_bytes(data, "deck.pptx")
    assert doc.parser == "pptx"
    got = [(b.kind, b.text, b.positions[0].slide) for b in doc.blocks]
    assert got[0] == (BlockKind.HEADING, "Quarterly review", 1)
    assert got[1] == (BlockKind.LIST, "- Revenue grew\n  - Costs fell", 1)
    assert got[2] == (BlockKind.PARAGRAPH, "Mention the hiring plan", 1)
    assert doc.blocks[2].metadata["notes"] is True
    assert got[3] == (BlockKind.HEADING, "Numbers", 2)
    table = doc.blocks[4]
    assert table.kind == BlockKind.TABLE and table.header == ["Region", "Sales"]
    assert table.rows == [["North", "10"], ["South", "20"]]
    assert table.heading_path == ["Numbers"]
    assert doc.blocks[5].text == "Footnote below the table"  # below the table on the slide: after it


def test_json_records_with_paths():
    payload = {
        "title": "Catalog",
        "total": 2,
        "data": {
            "items": [
                {"id": 1, "name": "Pen", "tags": ["office", "blue"], "dims": {"w": 1}},
                {"id": 2, "name": "Ink", "tags": [], "dims": {"w": 2}},
            ]
        },
    }
    doc = parse_bytes(json.dumps(payload).encode(), "catalog.json")
    assert doc.title == "Catalog"
    assert doc.blocks[0].text == "id: 1\nname: Pen\ntags: office, blue\ndims.w: 1"
    assert [b.positions[0].path for b in doc.blocks] == ["$.data.items[0]", "$.data.items[1]", "$"]
    assert doc.blocks[2].text == "title: Catalog\ntotal: 2"


def test_jsonl_lines_and_bad_lines():
    data = b'{"a": 1, "b": {"c": "x"}}\n\nnot json\n{"a": 2}\n'
    doc = parse_bytes(data, "events.jsonl")
    assert [(b.text, b.positions[0].line) for b in doc.blocks] == [("a: 1\nb.c: x", 1), ("a: 2", 4)]
    assert doc.metadata["invalid_lines"] == 1


def test_deep_json_is_a_bomb():
    with pytest.raises(ParseError) as err:
        parse_bytes(b"[" * 100_000 + b"]" * 100_000, "deep.json")
    assert err.value.code == ParseErrorCode.BOMB


@pytest.mark.parametrize(
    ("data", "name", "declared", "expected"),
    [
        (b"<!DOCTYPE html><html><body><p>x</p></body></html>", "", None, "text/html"),
        (b"<html><body>x</body></html>", "page", "application/octet-stream", "text/html"),
        (b'{"a": [1, 2]}', "data", None, "application/json"),
        (b'{"a": 1}\n{"a": 2}\n', "events", None, "application/x-ndjson"),
        (b"# Title\n\nSome text with a [link](http://x).\n\n- item\n- item\n", "readme", None, "text/markdown"),
        (b"a,b,c\n1,2,3\n4,5,6\n", "export", None, "text/csv"),
        (b"a\tb\n1\t2\n3\t4\n", "export", None, "text/tab-separated-values"),
        (b"Just some words.\nAnother line.", "notes", None, "text/plain"),
        (b"# Title\n\ntext", "notes.md", "text/plain", "text/markdown"),  # servers label .md text/plain
        (b"<p>kept as text</p>", "file.txt", None, "text/plain"),  # a text name wins for text content
    ],
)
def test_sniff_text_kinds(data: bytes, name: str, declared: str | None, expected: str):
    assert sniff_media_type(data, name, declared) == expected


def test_sniff_binary_kinds_ignore_wrong_names():
    docx_bytes = (FIXTURES / "test.docx").read_bytes()
    assert sniff_media_type(docx_bytes, "report.pdf", "application/pdf") == DOCX
    assert sniff_media_type(build_pdf([[(72, 100, 11, "x")]]), "slides.pptx", PPTX) == "application/pdf"
    # an HTML error page saved under an office name is not sent to the office parser
    assert sniff_media_type(b"<html><body>Not found</body></html>", "sheet.xlsx", XLSX) == "text/html"
    assert sniff_media_type(b"\x7fELF\x02\x01\x01\x00binary", "sheet.xlsx") == "application/octet-stream"
    # an image is an image whatever its name (the image parser OCRs it)
    assert sniff_media_type(b"\x89PNG\r\n\x1a\n\x00\x00binary", "sheet.xlsx") == "image/png"


def test_wrong_extension_parses_by_content():
    doc = parse_bytes((FIXTURES / "test.docx").read_bytes(), "misnamed.pdf")
    assert doc.parser == "docx"
    pdf = parse_bytes(build_pdf([[(72, 100, 11, "Real PDF text")]]), "misnamed.docx")
    assert pdf.parser == "pdf" and pdf.text == "Real PDF text"
    with pytest.raises(ParseError) as err:
        parse_bytes(b"\x7fELF\x02\x01\x01\x00\x00binary", "program.docx")
    assert err.value.code == ParseErrorCode.UNSUPPORTED


@needs_soffice
def test_legacy_doc_and_xls_converted(lo_convert):
    from tests.parsers.test_docx import SOURCE_HTML

    doc_bytes = lo_convert(SOURCE_HTML.encode(), "html", "doc:MS Word 97")
    # an OLE .doc named .docx is routed by content to the legacy converter
    doc = parse_bytes(doc_bytes, "really-old.docx")
    assert doc.parser == "legacy-office"
    assert doc.metadata["converted_from"] == "application/msword"
    assert [b.text for b in doc.blocks if b.kind == BlockKind.HEADING][:2] == ["Operations handbook", "Deployment"]
    xls = lo_convert(b"Name,Qty\npear,2\nplum,5\n", "csv", "xls:MS Excel 97")
    sheet = parse_bytes(xls, "old.xls")
    assert [b.rows[0] for b in sheet.blocks if b.kind == BlockKind.TABLE] == [["pear", "2"], ["plum", "5"]]


def test_legacy_without_soffice_is_a_clear_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 512 + "WordDocument".encode("utf-16-le") + b"\x00" * 512
    with pytest.raises(ParseError) as err:
        parse_bytes(ole, "old.doc")
    assert err.value.code == ParseErrorCode.UNSUPPORTED
    assert "legacy format" in err.value.message


def test_encrypted_ooxml_container():
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 512 + "EncryptedPackage".encode("utf-16-le") + b"\x00" * 64
    with pytest.raises(ParseError) as err:
        parse_bytes(ole, "locked.docx")
    assert err.value.code == ParseErrorCode.ENCRYPTED


def test_json_lines_saved_as_json():
    doc = parse_bytes(b'{"a": 1}\n{"a": 2}\n', "events.json")
    assert [b.positions[0].line for b in doc.blocks] == [1, 2]
