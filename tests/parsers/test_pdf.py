"""PDF parser: LibreOffice-exported files and hand-built PDFs for furniture, outline, OCR, errors."""

from __future__ import annotations

import io

import docx
import pytest

from include.contract import BlockKind, ParseError, ParseErrorCode
from tests.parsers.conftest import needs_soffice, parse_bytes
from tests.parsers.pdfgen import build_pdf
from tests.parsers.test_docx import SOURCE_HTML


@needs_soffice
def test_libreoffice_pdf_text_positions_and_outline(lo_convert):
    data = lo_convert(lo_convert(SOURCE_HTML.encode(), "html", "docx:MS Word 2007 XML"), "docx", "pdf")
    doc = parse_bytes(data, "handbook.pdf")
    assert doc.parser == "pdf"
    assert doc.metadata["pages"] == 1
    for phrase in ("Operations handbook", "Run migrations", "production", "Closing paragraph about on-call rotations."):
        assert phrase in doc.text
    # LibreOffice exports headings as bookmarks: they come back as headings with levels
    heads = [(b.text, b.level) for b in doc.blocks if b.kind == BlockKind.HEADING]
    assert ("Deployment", heads[[h[0] for h in heads].index("Deployment")][1]) in heads
    levels = dict(heads)
    assert levels["Environments"] == levels["Deployment"] + 1
    assert levels["Monitoring"] == levels["Deployment"]
    for block in doc.blocks:
        pos = block.positions[0]
        assert pos.page == 1
        if pos.bbox:
            x0, top, x1, bottom = pos.bbox
            assert 0 <= x0 < x1 <= 596 and 0 <= top < bottom <= 842
    closing = next(b for b in doc.blocks if b.text.startswith("Closing paragraph"))
    deployment = next(b for b in doc.blocks if b.text == "Deployment")
    assert closing.positions[0].bbox[1] > deployment.positions[0].bbox[1]  # reading order top-down


@needs_soffice
def test_libreoffice_pdf_repeated_header_footer_removed(lo_convert):
    document = docx.Document()
    section = document.sections[0]
    section.header.paragraphs[0].text = "ACME Confidential Handbook"
    section.footer.paragraphs[0].text = "Internal distribution only"
    for i in range(4):
        document.add_heading(f"Chapter {i + 1}", 1)
        document.add_paragraph(f"Body of chapter {i + 1} explains a distinct topic number {i + 1}.")
        if i < 3:
            document.add_page_break()
    buf = io.BytesIO()
    document.save(buf)
    pdf = lo_convert(buf.getvalue(), "docx", "pdf")
    doc = parse_bytes(pdf, "chapters.pdf")
    assert doc.metadata["pages"] == 4
    assert "ACME Confidential Handbook" not in doc.text
    assert "Internal distribution only" not in doc.text
    assert doc.metadata["furniture_lines_removed"] == 8
    bodies = [b for b in doc.blocks if b.text.startswith("Body of chapter")]
    assert [b.positions[0].page for b in bodies] == [1, 2, 3, 4]
    assert [b.heading_path for b in bodies] == [[f"Chapter {i}"] for i in range(1, 5)]


def _page(i: int) -> list[tuple[float, float, float, str]]:
    return [
        (72, 40, 9, "Quarterly Report 2024"),
        (72, 100, 18, f"Section {i + 1}"),
        (72, 130, 11, f"First line of section {i + 1} body."),
        (72, 144, 11, "Second line of the same paragraph."),
        (72, 200, 11, "Another paragraph after a gap."),
        (260, 812, 9, f"Page {i + 1} of 4"),
    ]


def test_hand_built_pdf_furniture_outline_and_paragraphs():
    data = build_pdf([_page(i) for i in range(4)], outline=[("Section 1", 0), ("Section 3", 2)])
    doc = parse_bytes(data, "report.pdf")
    assert "Quarterly Report" not in doc.text and "Page 1 of 4" not in doc.text
    heads = [(b.text, b.level, b.positions[0].page) for b in doc.blocks if b.kind == BlockKind.HEADING]
    assert heads == [("Section 1", 1, 1), ("Section 3", 1, 3)]
    first = doc.blocks[1]
    assert first.text == "First line of section 1 body.\nSecond line of the same paragraph."
    x0, top, _x1, bottom = first.positions[0].bbox
    # the box covers every glyph of the paragraph, descenders ("p" of "paragraph") included
    assert 70 < x0 < 75 and 118 < top < 124 and 140 < bottom < 148


def test_scanned_page_flagged_needs_ocr():
    data = build_pdf([[], [(72, 100, 11, "A page with a real text layer on it.")]], image_pages={0})
    doc = parse_bytes(data, "scan.pdf", engines={"pdf": "text"})  # the text engine lists, never OCRs
    assert doc.metadata["needs_ocr"] is True
    assert doc.metadata["ocr_pages"] == [1]
    assert doc.text == "A page with a real text layer on it."


@pytest.mark.parametrize("isolate", [True, False], ids=["isolated-child", "in-process"])
def test_fully_scanned_pdf_is_an_error_not_garbage(isolate: bool):
    with pytest.raises(ParseError) as err:
        parse_bytes(build_pdf([[], []], image_pages={0, 1}), "scan.pdf", isolate=isolate, engines={"pdf": "text"})
    assert err.value.code == ParseErrorCode.EMPTY
    assert "OCR" in err.value.message
    # the warning a partly scanned PDF has in its metadata, carried by the error (and through
    # the isolated child's pipe)
    assert err.value.details == {"needs_ocr": True, "ocr_pages": [1, 2]}


def test_scanned_pages_listed_are_capped():
    with pytest.raises(ParseError) as err:
        parse_bytes(build_pdf([[]] * 205, image_pages=set(range(205))), "scan.pdf", engines={"pdf": "text"})
    assert "on 205 page(s)" in err.value.message
    assert err.value.details["ocr_pages"] == list(range(1, 201))


def test_parse_error_details_round_trip():
    import pickle

    plain = ParseError("empty", "pdf: no text")
    assert plain.details == {} and ParseError.from_dict(plain.to_dict()).details == {}
    err = ParseError(
        ParseErrorCode.EMPTY, "scan", {"needs_ocr": True, "ocr_pages": (1, 2), "when": ParseErrorCode.EMPTY}
    )
    assert err.details == {"needs_ocr": True, "ocr_pages": [1, 2], "when": "empty"}  # plain JSON
    for copy in (ParseError.from_dict(err.to_dict()), pickle.loads(pickle.dumps(err))):
        assert (copy.code, copy.message, copy.details) == (err.code, err.message, err.details)


def test_zero_page_pdf():
    with pytest.raises(ParseError) as err:
        parse_bytes(build_pdf([]), "empty.pdf")
    assert err.value.code == ParseErrorCode.EMPTY


@needs_soffice
def test_encrypted_pdf(lo_convert):
    src = lo_convert(SOURCE_HTML.encode(), "html", "docx:MS Word 2007 XML")
    options = (
        'pdf:writer_pdf_Export:{"EncryptFile":{"type":"boolean","value":"true"},'
        '"DocumentOpenPassword":{"type":"string","value":"s3cret"}}'
    )
    data = lo_convert(src, "docx", options)
    with pytest.raises(ParseError) as err:
        parse_bytes(data, "locked.pdf")
    assert err.value.code == ParseErrorCode.ENCRYPTED
    # with the password supplied as an option it opens
    doc = parse_bytes(data, "locked.pdf", pdf_password="s3cret")
    assert "Operations handbook" in doc.text


@needs_soffice
def test_encrypted_pdf_with_empty_user_password_opens(lo_convert):
    # permissions-only encryption (owner password, empty user password) is common and readable
    src = lo_convert(SOURCE_HTML.encode(), "html", "docx:MS Word 2007 XML")
    options = (
        'pdf:writer_pdf_Export:{"EncryptFile":{"type":"boolean","value":"true"},'
        '"RestrictPermissions":{"type":"boolean","value":"true"},'
        '"PermissionPassword":{"type":"string","value":"owner"},"Changes":{"type":"long","value":"0"}}'
    )
    data = lo_convert(src, "docx", options)
    assert b"/Encrypt" in data
    doc = parse_bytes(data, "restricted.pdf")
    assert "Operations handbook" in doc.text


def test_page_cap():
    with pytest.raises(ParseError) as err:
        parse_bytes(build_pdf([_page(i) for i in range(4)]), "big.pdf", max_pages=3)
    assert err.value.code == ParseErrorCode.TOO_LARGE


def test_in_process_mode_gives_the_same_result():
    data = build_pdf([_page(i) for i in range(4)])
    isolated = parse_bytes(data, "a.pdf")
    inline = parse_bytes(data, "a.pdf", isolate=False)
    assert isolated.to_dict() == inline.to_dict()
