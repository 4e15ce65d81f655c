"""PDF attachments, engines (text / auto / ocr) and files pdfium refuses."""

from __future__ import annotations

import pypdfium2 as pdfium
import pytest

from include.contract import BlockKind, ParseError, ParseErrorCode
from plugins.parsers._ocr import ocr_available
from tests.parsers.conftest import parse_bytes
from tests.parsers.pdfgen import build_pdf
from tests.parsers.test_pdf_tables import _real


def _with_attachments(files: dict[str, bytes]) -> bytes:
    import io

    pdf = pdfium.PdfDocument(build_pdf([[(72, 100, 11, "The outer document own text.")]]))
    for name, data in files.items():
        pdf.new_attachment(name).set_data(data)
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()


@pytest.mark.parametrize("isolate", [True, False], ids=["isolated-child", "in-process"])
def test_attachments_are_parsed_after_the_pages(isolate: bool):
    inner = build_pdf([[(72, 100, 11, "Text of the attached PDF.")]])
    data = _with_attachments({"notes.csv": b"name,qty\napples,3\npears,5\n", "inner.pdf": inner})
    doc = parse_bytes(data, "outer.pdf", isolate=isolate)
    assert doc.blocks[0].text == "The outer document own text."
    assert "Text of the attached PDF." in doc.text and "apples" in doc.text
    attached = [b for b in doc.blocks if b.metadata.get("embedded_from")]
    assert {b.metadata["embedded_from"][0] for b in attached} == {"notes.csv", "inner.pdf"}
    assert any(b.kind == BlockKind.HEADING and b.text == "inner.pdf (attachment)" for b in attached)
    assert sorted(e["name"] for e in doc.metadata["embedded"]) == ["inner.pdf", "notes.csv"]


def test_broken_attachment_is_listed_not_fatal():
    doc = parse_bytes(_with_attachments({"bad.pdf": b"%PDF-1.4 garbage"}), "outer.pdf")
    assert doc.text == "The outer document own text."
    assert doc.metadata["embedded_failed"][0]["name"] == "bad.pdf"


def test_real_pdf_with_attachment():
    doc = parse_bytes(_real("0493_with-attachment.pdf"), "with-attachment.pdf")
    assert doc.metadata.get("embedded") or doc.metadata.get("embedded_failed")


def test_engine_text_never_ocrs():
    data = build_pdf([[], [(72, 100, 11, "A page with a real text layer on it.")]], image_pages={0})
    doc = parse_bytes(data, "scan.pdf", engines={"pdf": "text"})
    assert doc.engine == "text" and doc.metadata["needs_ocr"] is True and doc.metadata["ocr_pages"] == [1]
    assert "ocr_used" not in doc.metadata


def test_unknown_engine_refused():
    with pytest.raises(ParseError) as err:
        parse_bytes(build_pdf([[(72, 100, 11, "x" * 30)]]), "a.pdf", engines={"pdf": "magic"})
    assert err.value.code == ParseErrorCode.UNSUPPORTED


_OCR_MISSING = ocr_available("chi_sim+eng")  # None when tesseract and both models are installed


@pytest.mark.skipif(_OCR_MISSING is not None, reason=f"OCR unavailable: {_OCR_MISSING}")
def test_auto_engine_ocrs_image_only_pages():
    # markitdown's OCR test file: three scanned pages without a text layer
    doc = parse_bytes(_real("0554_MEDRPT-2024-PAT-3847_medical_report_scan.pdf"), "scan.pdf")
    assert doc.engine == "auto"
    if doc.metadata.get("ocr_unavailable"):
        pytest.skip(f"OCR unavailable here: {doc.metadata['ocr_unavailable']}")
    assert doc.metadata["ocr_used"] is True and doc.metadata["ocr_pages"] == [1, 2, 3]
    assert "needs_ocr" not in doc.metadata and "SEATTLE GENERAL HOSPITAL" in doc.text
    assert doc.metadata["ocr_engine"].startswith("tesseract")
    assert all(b.metadata.get("ocr") for b in doc.blocks)


@pytest.mark.skipif(_OCR_MISSING is not None, reason=f"OCR unavailable: {_OCR_MISSING}")
def test_ocr_engine_replaces_the_text_layer():
    data = build_pdf([[(72, 100, 24, "OCR REPLACES THIS TEXT LAYER")]])
    doc = parse_bytes(data, "a.pdf", engines={"pdf": "ocr"})
    if doc.metadata.get("ocr_unavailable"):
        pytest.skip(f"OCR unavailable here: {doc.metadata['ocr_unavailable']}")
    assert doc.metadata["ocr_pages"] == [1] and all(b.metadata.get("ocr") for b in doc.blocks)
    assert "REPLACES" in doc.text.upper()


def test_encrypted_needing_a_password_stays_encrypted():
    # pypdf's R6 (AES-256) sample: its user password is "password", not empty; both readers agree
    for name in ("0532_crazyones-encrypted-256.pdf", "0589_r4-user-password.pdf"):
        with pytest.raises(ParseError) as err:
            parse_bytes(_real(name), name)
        assert err.value.code == ParseErrorCode.ENCRYPTED
    doc = parse_bytes(_real("0532_crazyones-encrypted-256.pdf"), "r6.pdf", pdf_password="password")
    assert "crazy" in doc.text.lower()


def test_damaged_file_pdfium_refuses_gets_a_typed_answer():
    data = build_pdf([[(72, 100, 11, "Some text on a page of a damaged file.")]])
    damaged = data.replace(b"/Type /Catalog", b"/Type /Catalo\x00")[:-40]
    try:
        doc = parse_bytes(damaged, "damaged.pdf")
    except ParseError as err:
        assert err.code in set(ParseErrorCode)
    else:
        assert doc.text
