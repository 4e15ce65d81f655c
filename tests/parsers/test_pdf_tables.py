"""PDF tables: LibreOffice-made pages whose cells are known, real third-party files, outline matching."""

from __future__ import annotations

from pathlib import Path

import pytest

from include.contract import BlockKind
from tests.parsers.conftest import needs_soffice, parse_bytes
from tests.parsers.pdfgen import build_pdf

REAL = Path(__file__).resolve().parents[2].parent / "shared" / "realdocs" / "pdf"

PAGE_HTML = """<html><head><meta charset="utf-8"></head><body>
<h1>Report</h1><p>Intro paragraph before the table with some words.</p>
<table border="1" cellspacing="0" cellpadding="4">
<tr><th>Name</th><th>Age</th><th>City</th></tr>
<tr><td>Alice</td><td>30</td><td>Paris</td></tr>
<tr><td colspan="2">Merged cell spanning two</td><td>Berlin</td></tr>
<tr><td>Bob</td><td>41</td><td>A long city name that wraps over several lines in this narrow column of the table</td></tr>
<tr><td>张三</td><td>25</td><td>北京市海淀区</td></tr>
</table>
<p>Paragraph after the table.</p>
<table>
<tr><td>Product</td><td>Price</td><td>Qty</td></tr>
<tr><td>Apples</td><td>1.20</td><td>10</td></tr>
<tr><td>Pears</td><td>2.50</td><td>7</td></tr>
<tr><td>Plums</td><td>3.10</td><td>12</td></tr>
</table>
<p>End.</p>
</body></html>"""


def _real(name: str) -> bytes:
    path = REAL / name
    if not path.exists():
        pytest.skip(f"../shared/realdocs/pdf/{name} absent (real third-party corpus not on this machine)")
    return path.read_bytes()


@needs_soffice
def test_libreoffice_ruled_and_unruled_tables(lo_convert):
    doc = parse_bytes(
        lo_convert(lo_convert(PAGE_HTML.encode(), "html", "docx:MS Word 2007 XML"), "docx", "pdf"), "tables.pdf"
    )
    kinds = [b.kind for b in doc.blocks]
    tables = [b for b in doc.blocks if b.kind == BlockKind.TABLE]
    assert len(tables) == 2 and doc.metadata["tables"] == 2
    ruled, aligned = tables
    assert ruled.header == ["Name", "Age", "City"]  # the bold th row
    assert ruled.rows[0] == ["Alice", "30", "Paris"]
    assert ruled.rows[1] == ["Merged cell spanning two", "", "Berlin"]  # merged: text in its first slot
    assert ruled.rows[2][2] == "A long city name that wraps over several lines in this narrow column of the table"
    assert ruled.rows[3] == ["张三", "25", "北京市海淀区"]
    assert aligned.header == ["Product", "Price", "Qty"]
    assert aligned.rows == [["Apples", "1.20", "10"], ["Pears", "2.50", "7"], ["Plums", "3.10", "12"]]
    assert ruled.metadata["table_kind"] == "ruled" and aligned.metadata["table_kind"] == "aligned"
    # reading order: intro, table, paragraph, table, end; table text is not repeated in paragraphs
    texts = [b.text for b in doc.blocks]
    assert texts.index("Paragraph after the table.") == kinds.index(BlockKind.TABLE) + 1
    assert texts[-1] == "End."
    paragraphs = " ".join(b.text for b in doc.blocks if b.kind != BlockKind.TABLE)
    for cell in ("Alice", "Berlin", "Apples", "北京市海淀区"):
        assert cell not in paragraphs
    x0, top, x1, bottom = ruled.positions[0].bbox
    assert ruled.positions[0].page == 1 and 50 < x0 < x1 <= 596 and 80 < top < bottom < 330


def test_two_text_columns_are_not_a_table():
    _real_doc = parse_bytes(_real("0546_multicolumn.pdf"), "multicolumn.pdf")
    assert not [b for b in _real_doc.blocks if b.kind == BlockKind.TABLE]


def test_real_ruled_tables_with_spanning_and_unruled_rows():
    doc = parse_bytes(_real("0488_spanning_cells.pdf"), "spanning_cells.pdf")  # camelot's test file
    table = next(b for b in doc.blocks if b.kind == BlockKind.TABLE)
    rows = [*([table.header] if table.header else []), *table.rows]
    assert ["Server closets", "1,505", "1,580", "1,643", "1,673", "1,689"] in rows
    paper = parse_bytes(_real("0539_naacl06-shinyama.pdf"), "naacl.pdf")  # pdfminer's: rules between columns only
    first = next(b for b in paper.blocks if b.kind == BlockKind.TABLE)
    assert first.header == ["Article", "dump", "be-hit"]
    assert first.rows[:2] == [["2005-09-23", "Katrina", "New Orleans"], ["2005-10-02", "Longwang", "Taiwan"]]


def test_outline_entries_not_on_their_page_are_dropped():
    lines = [(72, 100, 11, "Introduction"), (72, 130, 11, "Body text of the only page.")]
    outline = [("Introduction", 0)] + [(f"Bookmark {i} nowhere in the text", 0) for i in range(50)]
    doc = parse_bytes(build_pdf([lines], outline=outline), "bookmarks.pdf")
    heads = [b.text for b in doc.blocks if b.kind == BlockKind.HEADING]
    assert heads == ["Introduction"]
    assert doc.blocks[-1].heading_path == ["Introduction"]


# --------------------------------------------------------------------------- per-character boxes only for table candidates

_PROSE = [
    "Shift work and family life were studied over two years in a",
    "sample of nurses; this paragraph is running text set in one",
    "column, with nothing that lines up into columns of a table.",
    "The last line is short.",
]
_TABLE = [("Product", "Price", "Qty"), ("Apples", "1.20", "10"), ("Pears", "2.50", "17"), ("Plums", "3.10", "12")]


def _prose_page(top: float) -> list[tuple[float, float, float, str]]:
    return [(72, top + 16 * i, 11, line) for i, line in enumerate(_PROSE)]


def _table_page() -> list[tuple[float, float, float, str]]:
    return [
        (x, 300 + 18 * r, 11, cell) for r, row in enumerate(_TABLE) for x, cell in zip((72, 220, 360), row, strict=True)
    ]


@pytest.fixture
def char_box_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts pages read through every character's box (``page_chars``), in this process."""
    from plugins.parsers import _pdf_page

    calls: list[int] = []
    real = _pdf_page.page_chars

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_pdf_page, "page_chars", counting)
    return calls


def _blocks(doc) -> list[tuple[str, str, object]]:  # type: ignore[no-untyped-def]
    return [(b.kind.value, b.text, [p.bbox for p in b.positions]) for b in doc.blocks]


def test_page_without_table_candidates_skips_character_boxes(char_box_reads, monkeypatch):
    from plugins.parsers import _pdf_page

    data = build_pdf([_prose_page(100), _prose_page(120)])
    cheap = parse_bytes(data, "prose.pdf", isolate=False)
    assert char_box_reads == []  # neither page read a character's box
    # the same pages forced through every character's box: the same blocks, boxes included
    monkeypatch.setattr(_pdf_page, "_has_candidates", lambda *args: True)
    full = parse_bytes(data, "prose.pdf", isolate=False)
    assert len(char_box_reads) == 2
    assert _blocks(cheap) == _blocks(full) and len(cheap.blocks) >= 2
    assert "tables" not in cheap.metadata


def test_table_page_still_finds_its_table(char_box_reads):
    doc = parse_bytes(build_pdf([_prose_page(100), _table_page()]), "mixed.pdf", isolate=False)
    assert len(char_box_reads) == 1  # the table page only
    tables = [b for b in doc.blocks if b.kind == BlockKind.TABLE]
    assert len(tables) == 1 and tables[0].positions[0].page == 2
    assert tables[0].header == list(_TABLE[0])
    assert tables[0].rows == [list(row) for row in _TABLE[1:]]


def test_real_ruled_table_page_reads_character_boxes(char_box_reads):
    doc = parse_bytes(_real("0488_spanning_cells.pdf"), "spanning_cells.pdf", isolate=False)
    assert char_box_reads and doc.metadata["tables"] >= 1
