"""DOCX parser on LibreOffice-written files, python-docx's own test documents and hand-built XML."""

from __future__ import annotations

import io

import pytest

from include.contract import BlockKind
from tests.parsers.conftest import FIXTURES, needs_soffice, parse_bytes, realdoc
from tests.parsers.ooxml import build_docx, p

SOURCE_HTML = """<html><head><title>Operations handbook</title></head><body>
<h1>Operations handbook</h1>
<p>This handbook describes the <a href="https://example.com/runbook">runbook</a> for the sync platform.</p>
<h2>Deployment</h2>
<ol><li>Build the image</li><li>Run migrations<ol><li>Check the schema</li></ol></li><li>Restart workers</li></ol>
<h3>Environments</h3>
<table border="1"><thead><tr><th>Environment</th><th>Region</th><th>Replicas</th></tr></thead>
<tbody><tr><td>staging</td><td>eu-west</td><td>2</td></tr><tr><td>production</td><td>us-east</td><td>6</td></tr></tbody></table>
<h2>Monitoring</h2>
<ul><li>Latency dashboards</li><li>Error budgets</li></ul>
<p>Closing paragraph about on-call rotations.</p>
</body></html>"""


@needs_soffice
def test_libreoffice_docx_structure(lo_convert):
    data = lo_convert(SOURCE_HTML.encode(), "html", "docx:MS Word 2007 XML")
    doc = parse_bytes(data, "handbook.docx")
    assert doc.parser == "docx"
    heads = [(b.text, b.level) for b in doc.blocks if b.kind == BlockKind.HEADING]
    assert heads == [("Operations handbook", 1), ("Deployment", 2), ("Environments", 3), ("Monitoring", 2)]
    intro = doc.blocks[1]
    assert intro.text.startswith("This handbook describes the runbook")
    assert intro.metadata["links"] == [{"text": "runbook", "target": "https://example.com/runbook"}]
    lists = [b for b in doc.blocks if b.kind == BlockKind.LIST]
    assert lists[0].text.splitlines() == [
        "1. Build the image",
        "2. Run migrations",
        "  1. Check the schema",
        "3. Restart workers",
    ]
    assert lists[0].heading_path == ["Operations handbook", "Deployment"]
    assert lists[1].text.splitlines() == ["- Latency dashboards", "- Error budgets"]
    table = next(b for b in doc.blocks if b.kind == BlockKind.TABLE)
    assert table.header == ["Environment", "Region", "Replicas"]
    assert table.rows == [["staging", "eu-west", "2"], ["production", "us-east", "6"]]
    assert table.heading_path == ["Operations handbook", "Deployment", "Environments"]
    assert doc.blocks[-1].text == "Closing paragraph about on-call rotations."


def test_python_docx_fixtures():
    doc = parse_bytes((FIXTURES / "test.docx").read_bytes(), "test.docx")
    assert [(b.kind, b.text) for b in doc.blocks] == [
        (BlockKind.HEADING, "python-docx was here!"),
        (BlockKind.PARAGRAPH, "python-docx was here too!"),
    ]
    assert doc.metadata["author"] == "Cisco Employee"

    links = parse_bytes((FIXTURES / "par-hyperlinks.docx").read_bytes(), "h.docx")
    assert links.blocks[2].metadata["links"] == [
        {"text": "the first one", "target": "http://google.com/"},
        {"text": "second one", "target": "http://python.org/"},
        {"text": "third", "target": "http://yahoo.com/"},
    ]

    # a table nested in a cell keeps its text, in order, inside that cell
    nested = parse_bytes((FIXTURES / "blk-paras-and-tables.docx").read_bytes(), "n.docx")
    body = [b for b in nested.blocks if "part" not in b.metadata]
    assert [b.kind for b in body] == [BlockKind.PARAGRAPH, BlockKind.TABLE, BlockKind.PARAGRAPH]
    assert body[1].text == "Text before\nTable\nBetween\nText after"
    # its page header and footer are tables too, before and after the body
    assert (nested.blocks[0].metadata["part"], nested.blocks[0].rows) == ("header", [["Left-side", "Right-side"]])
    assert (nested.blocks[-1].metadata["part"], nested.blocks[-1].rows) == ("footer", [["Copyright", "Page-number"]])

    # merged cells: horizontal spans leave the spanned column empty, vertical merges repeat the value
    merged = parse_bytes((FIXTURES / "tbl-cell-access.docx").read_bytes(), "m.docx")
    tables = [b for b in merged.blocks if b.kind == BlockKind.TABLE]
    assert tables[2].header is None  # numeric first row: not a header
    assert tables[2].rows == [["1", "2", "3"], ["4", "5", "6"], ["7", "5", "9"]]
    assert "\n4\t\t9" in tables[3].text

    styles = parse_bytes((FIXTURES / "par-known-styles.docx").read_bytes(), "s.docx")
    assert [(b.kind, b.level) for b in styles.blocks if b.text == "Heading 1"] == [(BlockKind.HEADING, 1)]

    numbered = parse_bytes((FIXTURES / "num-having-numbering-part.docx").read_bytes(), "l.docx")
    assert numbered.blocks[0].kind == BlockKind.LIST
    assert numbered.blocks[0].text == "1. Paragraph having List Number style."

    images = parse_bytes((FIXTURES / "having-images.docx").read_bytes(), "i.docx")
    assert images.metadata["images"][0]["name"] == "python.bmp"
    assert images.metadata["images"][0]["target"].startswith("media/")
    assert "[image: python.bmp]" in images.text

    inner = parse_bytes((FIXTURES / "blk-inner-content.docx").read_bytes(), "b.docx")
    assert [b.text.strip() for b in inner.blocks] == ["P1", "T2", "P3"]


def test_headings_by_outline_level_and_inherited_style():
    body = (
        p("Outline heading", ppr='<w:outlineLvl w:val="2"/>')
        + p("Styled heading one", "Heading1")
        + p("Custom inherits heading two", "MyHeading")
        + p("Body text under it")
        + p("Body text level", ppr='<w:outlineLvl w:val="9"/>')
    )
    doc = parse_bytes(build_docx(body), "h.docx")
    assert [(b.kind.value, b.level, b.text) for b in doc.blocks] == [
        ("heading", 3, "Outline heading"),
        ("heading", 1, "Styled heading one"),
        ("heading", 2, "Custom inherits heading two"),
        ("paragraph", None, "Body text under it"),
        ("paragraph", None, "Body text level"),
    ]
    assert doc.blocks[3].heading_path == ["Styled heading one", "Custom inherits heading two"]
    assert doc.title == "Hand Built"
    assert doc.metadata["author"] == "Test Author"
    assert doc.metadata["created"].startswith("2024-05-01")


def test_numbering_formats_and_style_numbering():
    num = '<w:numPr><w:ilvl w:val="{l}"/><w:numId w:val="{n}"/></w:numPr>'
    body = (
        p("alpha", ppr=num.format(l=0, n=2))
        + p("beta", ppr=num.format(l=0, n=2))
        + p("beta sub", ppr=num.format(l=1, n=2))
        + p("gamma", ppr=num.format(l=0, n=2))
        + p("between")
        + p("dot", ppr=num.format(l=0, n=1))
        + p("circle", ppr=num.format(l=1, n=1))
        + p("from style", "ListNumber")
    )
    doc = parse_bytes(build_docx(body), "n.docx")
    assert doc.blocks[0].text.splitlines() == ["1. alpha", "2. beta", "  2.a) beta sub", "3. gamma"]
    assert doc.blocks[1].text == "between"
    assert doc.blocks[2].text.splitlines() == ["- dot", "  - circle"]
    assert doc.blocks[3].text == "4. from style"


def test_tracked_changes_text_boxes_content_controls_links_images():
    body = (
        '<w:p><w:r><w:t xml:space="preserve">Kept </w:t></w:r>'
        '<w:ins w:id="1" w:author="a"><w:r><w:t xml:space="preserve">inserted </w:t></w:r></w:ins>'
        '<w:del w:id="2" w:author="a"><w:r><w:delText>deleted </w:delText></w:r></w:del>'
        "<w:r><w:t>end.</w:t></w:r></w:p>"
        '<w:sdt><w:sdtPr><w:alias w:val="Field"/></w:sdtPr><w:sdtContent>'
        + p("Inside a content control")
        + "</w:sdtContent></w:sdt>"
        '<w:p><w:r><w:t xml:space="preserve">See </w:t></w:r><w:hyperlink r:id="rIdL"><w:r><w:t>the spec</w:t></w:r></w:hyperlink>'
        '<w:r><w:t xml:space="preserve"> and </w:t></w:r><w:hyperlink w:anchor="intro"><w:r><w:t>intro</w:t></w:r></w:hyperlink></w:p>'
        '<w:p><w:r><mc:AlternateContent><mc:Choice Requires="wps"><w:drawing><wp:anchor><wp:docPr id="5" name="Text Box 5"/>'
        "<a:graphic><a:graphicData><wps:wsp><wps:txbx><w:txbxContent>"
        + p("Text in a box")
        + "</w:txbxContent></wps:txbx></wps:wsp></a:graphicData></a:graphic></wp:anchor></w:drawing></mc:Choice>"
        "<mc:Fallback><w:pict><v:shape><v:textbox><w:txbxContent>"
        + p("Text in a box")
        + "</w:txbxContent></v:textbox></v:shape></w:pict></mc:Fallback></mc:AlternateContent></w:r>"
        "<w:r><w:t>Host paragraph</w:t></w:r></w:p>"
        '<w:p><w:r><w:drawing><wp:inline><wp:docPr id="7" name="Picture 7" descr="Architecture diagram"/>'
        '<a:graphic><a:graphicData><pic:pic><pic:nvPicPr><pic:cNvPr id="0" name="arch.png"/></pic:nvPicPr>'
        '<pic:blipFill><a:blip r:embed="rIdImg"/></pic:blipFill></pic:pic></a:graphicData></a:graphic></wp:inline></w:drawing></w:r></w:p>'
    )
    rels = '<Relationship Id="rIdImg" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/image" Target="media/arch.png"/>'
    doc = parse_bytes(build_docx(body, rels, {"word/media/arch.png": b"\x89PNG\r\n\x1a\n"}), "t.docx")
    texts = [b.text for b in doc.blocks]
    assert texts[0] == "Kept inserted end."
    assert "deleted" not in doc.text
    assert texts[1] == "Inside a content control"
    assert texts[2] == "See the spec and intro"
    assert doc.blocks[2].metadata["links"] == [
        {"text": "the spec", "target": "https://example.org/spec"},
        {"text": "intro", "target": "#intro"},
    ]
    # the box's text follows its host paragraph, once (mc:Fallback is not read twice)
    assert texts[3:5] == ["Host paragraph", "Text in a box"]
    assert doc.text.count("Text in a box") == 1
    assert texts[5] == "[image: Architecture diagram]"
    assert doc.metadata["images"] == [{"alt": "Architecture diagram", "name": "arch.png", "target": "media/arch.png"}]


@pytest.mark.parametrize("target", ["NULL", "../NULL"])
def test_null_relationship_is_repaired(target: str):
    rels = f'<Relationship Id="rIdBad" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/image" Target="{target}"/>'
    doc = parse_bytes(build_docx(p("Survives a broken relationship"), rels), "null.docx")
    assert doc.text == "Survives a broken relationship"


def test_table_header_flag_spans_and_vertical_merge():
    def tc(text: str, props: str = "") -> str:
        return f"<w:tc><w:tcPr>{props}</w:tcPr>{p(text)}</w:tc>"

    tbl = (
        "<w:tbl>"
        "<w:tr><w:trPr><w:tblHeader/></w:trPr>" + tc("Team") + tc("Q1") + tc("Q2") + "</w:tr>"
        "<w:tr>" + tc("Search", '<w:vMerge w:val="restart"/>') + tc("10") + tc("12") + "</w:tr>"
        "<w:tr>" + tc("", "<w:vMerge/>") + tc("11") + tc("13") + "</w:tr>"
        "<w:tr>" + tc("Total", '<w:gridSpan w:val="2"/>') + tc("25") + "</w:tr>"
        "</w:tbl>"
    )
    doc = parse_bytes(build_docx(tbl), "t.docx")
    table = doc.blocks[0]
    assert table.header == ["Team", "Q1", "Q2"]
    assert table.rows == [["Search", "10", "12"], ["Search", "11", "13"], ["Total", "", "25"]]


def _saved(document) -> bytes:
    buf = io.BytesIO()
    document.save(buf)
    return buf.getvalue()


def test_headers_and_footers_once_per_distinct_part():
    import docx

    d = docx.Document()
    d.add_paragraph("Body of section one.")
    d.sections[0].header.paragraphs[0].text = "Quarterly report header"
    d.sections[0].footer.paragraphs[0].text = "Confidential footer"
    d.sections[0].different_first_page_header_footer = True
    d.sections[0].first_page_header.paragraphs[0].text = "Title page header"
    for n in (2, 3):  # later sections repeat (link to) the first one's header and footer
        d.add_section()
        d.add_paragraph(f"Body of section {n}.")
    doc = parse_bytes(_saved(d), "sections.docx")
    furniture = [(b.metadata["part"], b.text) for b in doc.blocks if "part" in b.metadata]
    assert sorted(furniture) == [
        ("footer", "Confidential footer"),
        ("header", "Quarterly report header"),
        ("header", "Title page header"),
    ]
    parts = [b.metadata.get("part", "body") for b in doc.blocks]
    assert parts == ["header", "header", "body", "body", "body", "footer"]  # header, body, footer order
    assert all(b.heading_path == [] for b in doc.blocks if "part" in b.metadata)


def test_document_with_text_only_in_its_header_is_not_empty():
    import docx

    d = docx.Document()
    d.sections[0].header.paragraphs[0].text = "Only the letterhead has text"
    doc = parse_bytes(_saved(d), "letterhead.docx")
    assert [(b.text, b.metadata["part"]) for b in doc.blocks] == [("Only the letterhead has text", "header")]


def test_comments_are_extracted_with_their_author():
    import docx

    d = docx.Document()
    para = d.add_paragraph("Reviewed paragraph.")
    d.add_comment(para.runs, text="Please cite the source.", author="Ana Reviewer")
    doc = parse_bytes(_saved(d), "commented.docx")
    comment = next(b for b in doc.blocks if b.metadata.get("note") == "comment")
    assert (comment.text, comment.metadata["author"]) == ("Please cite the source.", "Ana Reviewer")


def test_real_header_footer_and_comment_files():
    # 0129_docx-hdrftr.docx (docx2python): header and footer with paragraphs and tables
    doc = parse_bytes(realdoc("docx/0129_docx-hdrftr.docx"), "hdrftr.docx")
    headers = [b.text for b in doc.blocks if b.metadata.get("part") == "header"]
    footers = [b.text for b in doc.blocks if b.metadata.get("part") == "footer"]
    assert headers == ["First header para", "Table cell1\tTable cell2", "Last header para"]
    assert footers[0] == "para1" and footers[-1] == "para2"
    assert [b.text for b in doc.blocks if "part" not in b.metadata] == ["Main document"]
    # 0179_has_pict.docx (python-docx): the body has no text, its (unreferenced) header has
    pict = parse_bytes(realdoc("docx/0179_has_pict.docx"), "pict.docx")
    assert any("BOEHRINGER INGELHEIM" in b.text for b in pict.blocks if b.metadata.get("part") == "header")
    # 0170_comments.docx (mammoth): two comments by one author
    comments = parse_bytes(realdoc("docx/0170_comments.docx"), "comments.docx")
    noted = [(b.text, b.metadata.get("author")) for b in comments.blocks if b.metadata.get("note") == "comment"]
    assert noted == [("A tachyon walks into a bar.", "Michael Williamson"), ("Fin.", "Michael Williamson")]
