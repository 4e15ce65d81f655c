"""Files embedded in DOCX/XLSX/PPTX: packages built in the test (python-docx/openpyxl/python-pptx
files related as Office relates them), real files with OLE objects (Ole10Native packages, PDFs,
legacy documents), the depth cap and a zip bomb inside an otherwise good document."""

from __future__ import annotations

import io

from include.contract import BlockKind
from tests.parsers.conftest import needs_soffice, parse_bytes, realdoc
from tests.parsers.ooxml import DOCX_TYPE, PACKAGE_REL, XLSX_TYPE, add_part, text_docx, with_inflated_sheet

IMAGE_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/image"


def _xlsx(rows: list[list[object]]) -> bytes:
    import openpyxl

    wb = openpyxl.Workbook()
    for row in rows:
        wb.active.append(row)
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def _embed_in_docx(outer: bytes, name: str, data: bytes, content_type: str, rid: str = "rIdEmb1") -> bytes:
    return add_part(outer, "word/document.xml", f"word/embeddings/{name}", data, PACKAGE_REL, content_type, rid)


def test_workbook_inside_docx_follows_the_body():
    inner = _xlsx([["region", "units"], ["north", 12], ["south", 7]])
    data = _embed_in_docx(text_docx("Quarterly summary.", "See the attached sheet."), "Sales.xlsx", inner, XLSX_TYPE)
    doc = parse_bytes(data, "report.docx")
    texts = [b.text for b in doc.blocks]
    assert texts[:3] == ["Quarterly summary.", "See the attached sheet.", "Sales.xlsx (document)"]
    title = doc.blocks[2]
    assert title.kind == BlockKind.HEADING and title.metadata["embedded_from"] == ["word/embeddings/Sales.xlsx"]
    rows = [b for b in doc.blocks if b.kind == BlockKind.TABLE]
    assert [r.rows[0] for r in rows] == [["north", "12"], ["south", "7"]]
    assert rows[0].header == ["region", "units"]
    assert rows[0].heading_path == ["Sales.xlsx (document)", "Sheet"]
    assert rows[0].positions[0].sheet == "Sheet"
    assert doc.metadata["embedded"] == [
        {"name": "word/embeddings/Sales.xlsx", "media_type": XLSX_TYPE, "parser": "xlsx", "blocks": 4}
    ]


def test_nesting_past_embed_max_depth_is_cut_off():
    # level 0 embeds level 1 embeds ... level 5; the default embed_max_depth is 3
    data = text_docx("level 5 text")
    for level in range(4, -1, -1):
        data = _embed_in_docx(text_docx(f"level {level} text"), f"level{level + 1}.docx", data, DOCX_TYPE)
    doc = parse_bytes(data, "level0.docx")
    texts = [b.text for b in doc.blocks if b.kind == BlockKind.PARAGRAPH]
    assert texts == ["level 0 text", "level 1 text", "level 2 text", "level 3 text"]
    deepest = next(b for b in doc.blocks if b.text == "level 3 text")
    assert deepest.heading_path == ["level1.docx (document)", "level2.docx (document)", "level3.docx (document)"]
    # the whole chain of containers, outermost first
    assert deepest.metadata["embedded_from"] == [f"word/embeddings/level{n}.docx" for n in (1, 2, 3)]
    # the cut three levels down is reported by the outer document, with the chain in its name
    [cut] = doc.metadata["embedded_skipped"]
    assert cut["name"].split(" > ") == [f"word/embeddings/level{n}.docx" for n in (1, 2, 3, 4)]
    assert cut["reason"] == "nested deeper than embed_max_depth=3"
    # the cut is recorded where it happens: with no depth allowed, by the outer document
    flat = parse_bytes(data, "level0.docx", embed_max_depth=0)
    assert [b.text for b in flat.blocks] == ["level 0 text"]
    assert flat.metadata["embedded_skipped"] == [
        {"name": "word/embeddings/level1.docx", "reason": "nested deeper than embed_max_depth=0"}
    ]


def test_zip_bomb_embedded_in_a_good_document_fails_alone():
    # a workbook whose sheet inflates 40 MiB from ~40 KB: the nested parse meets the same zip
    # caps as a top-level file; the outer document keeps its own text
    bomb = with_inflated_sheet(_xlsx([["a", "b"]]))
    data = _embed_in_docx(text_docx("Cover letter."), "bomb.xlsx", bomb, XLSX_TYPE)
    doc = parse_bytes(data, "letter.docx")
    assert [b.text for b in doc.blocks] == ["Cover letter."]
    [failed] = doc.metadata["embedded_failed"]
    assert (failed["name"], failed["code"]) == ("word/embeddings/bomb.xlsx", "bomb")


def test_embedded_total_size_cap_skips_the_file():
    data = _embed_in_docx(text_docx("Outer."), "big.xlsx", _xlsx([["x"] * 50] * 50), XLSX_TYPE)
    doc = parse_bytes(data, "o.docx", embed_max_total=1000)
    assert [b.text for b in doc.blocks] == ["Outer."]
    assert doc.metadata["embedded_skipped"][0]["name"] == "word/embeddings/big.xlsx"
    assert "embed_max_total=1000" in doc.metadata["embedded_skipped"][0]["reason"]


def _picture_deck() -> bytes:
    from PIL import Image
    from pptx import Presentation
    from pptx.util import Inches

    png = io.BytesIO()
    Image.new("RGB", (40, 20), "white").save(png, "PNG")
    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[5])
    slide.shapes.title.text = "A picture"
    slide.shapes.add_picture(io.BytesIO(png.getvalue()), Inches(1), Inches(2))
    buf = io.BytesIO()
    prs.save(buf)
    return buf.getvalue()


def test_images_go_to_parse_embedded_only_when_asked():
    deck = _picture_deck()
    plain = parse_bytes(deck, "pic.pptx")
    assert not any(k.startswith("embedded") for k in plain.metadata)
    asked = parse_bytes(deck, "pic.pptx", engines={"embedded_images": "ocr"})
    handled = asked.metadata.get("embedded", []) + asked.metadata.get("embedded_failed", [])
    # a blank image gives no text (typed "empty" from the image parser) or no blocks: either way
    # it was handed on, named by its part
    assert [h["name"] for h in handled] == ["ppt/media/image1.png"]


def test_real_docx_with_ole_packages_pdf_and_docx():
    # 0126_testWORD_EMFAndAttachments.docx (Apache Tika): a PDF (OLE CONTENTS stream), a text
    # file (OLE Ole10Native package) and a DOCX stored as a package part
    doc = parse_bytes(realdoc("docx/0126_testWORD_EMFAndAttachments.docx"), "attachments.docx")
    names = [e["name"] for e in doc.metadata["embedded"]]
    assert names == ["word/embeddings/oleObject2.pdf", "TestText.txt", "word/embeddings/Microsoft_Word_Document.docx"]
    assert [e["parser"] for e in doc.metadata["embedded"]] == ["pdf", "text", "docx"]
    texts = [b.text for b in doc.blocks]
    assert texts[0] == "This is test word document for parser."
    assert "This is test PDF document for parser." in texts
    assert "This is Text File" in texts
    txt = next(b for b in doc.blocks if b.text == "This is Text File")
    assert txt.heading_path == ["TestText.txt (document)"]


@needs_soffice
def test_real_wps_attachments_include_legacy_ole_documents():
    # 0134_testWPSAttachment.docx (Apache Tika): WPS Office embeds XML/PDF/TXT as Ole10Native
    # packages, OOXML files in OLE "Package" streams and .doc/.xls/.ppt as whole OLE files; the
    # body itself has no text, so this file was "empty" before
    doc = parse_bytes(realdoc("docx/0134_testWPSAttachment.docx"), "wps.docx")
    contents = {b.text for b in doc.blocks if b.kind != BlockKind.HEADING or b.metadata.get("embedded_from")}
    for text in ("xml_content", "pdf_content", "txt_content", "docx_content", "doc_content", "xls_content"):
        assert any(text in t for t in contents), text
    assert not doc.metadata.get("embedded_failed")


def test_real_pptx_pdfs_follow_their_slide():
    # 0699_testPPT_EmbeddedPDF.pptx (Apache Tika): two PDFs embedded as OLE objects on slide 1
    doc = parse_bytes(realdoc("pptx/0699_testPPT_EmbeddedPDF.pptx"), "pdfs.pptx")
    headings = [b.text for b in doc.blocks if b.kind == BlockKind.HEADING and b.metadata.get("embedded_from")]
    assert headings[:2] == ["oleObject2.pdf (slide 1)", "oleObject1.pdf (slide 1)"]
    assert any(b.text == "Hello World" for b in doc.blocks)
    assert all(b.heading_path[0] == "Slide 1" for b in doc.blocks[1:])


def test_real_xlsx_embedded_pdf_and_documents_follow_their_sheet():
    # 0872_testExcel_embeddedPDF.xlsx (Apache Tika): an Acrobat OLE object on an empty sheet
    doc = parse_bytes(realdoc("xlsx/0872_testExcel_embeddedPDF.xlsx"), "pdf.xlsx")
    assert doc.metadata["embedded"][0]["parser"] == "pdf"
    assert doc.blocks[0].kind == BlockKind.HEADING
    assert doc.blocks[1].text.endswith("(sheet Sheet1)")
