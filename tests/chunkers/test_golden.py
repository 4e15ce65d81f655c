"""Golden tests: real DOCX, PDF and XLSX files, parsed by the project's parsers, then chunked.

The files are built in the test (python-docx, openpyxl, and the parsers' hand-written PDF
builder), parsed with ``plugins.parsers.parse_document``, chunked with the ``token`` and
``heading`` chunkers, and compared with ``tests/chunkers/golden/*.json``. A parser change that
moves chunk boundaries shows up here; regenerate deliberately with
``TRIBUTARY_UPDATE_GOLDEN=1 pytest tests/chunkers/test_golden.py`` and review the diff.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from include.contract import Chunk, RawDocument
from plugins.chunkers import chunk_document
from plugins.chunkers.tokenizer import count_tokens
from plugins.parsers import parse_document

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("TRIBUTARY_UPDATE_GOLDEN") == "1"


def _docx() -> bytes:
    from docx import Document

    d = Document()
    d.add_heading("Tributary 用户手册", level=1)
    d.add_paragraph("Tributary 把网页、飞书和语雀的知识增量同步到搜索索引。" * 3)
    d.add_heading("安装 Installation", level=2)
    d.add_paragraph("Install the package with pip, then run the scheduler. " * 6)
    d.add_paragraph("安装完成后，运行 tributary sync 命令；首次同步会抓取全部文档！")
    d.add_heading("配置 Configuration", level=2)
    table = d.add_table(rows=1, cols=3)
    for cell, text in zip(table.rows[0].cells, ["Option", "Default", "含义"], strict=True):
        cell.text = text
    for i in range(14):
        row = table.add_row().cells
        row[0].text, row[1].text, row[2].text = f"option_{i}", str(i * 8), f"第{i}个选项的说明"
    d.add_paragraph("The table above lists every option.")
    d.add_heading("FAQ", level=1)
    d.add_paragraph("Why incremental? Because re-indexing everything is slow; 增量同步只处理变化的文档。")
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


def _pdf() -> bytes:
    from tests.parsers.pdfgen import build_pdf

    lines = [
        "Chunking turns parsed documents into retrievable pieces.",
        "Every chunk stays within the embedding model's token limit.",
        "A sentence longer than the limit is split at token boundaries!",
        "Positions of every contributing block travel with the chunk.",
    ]
    pages = []
    for p in range(3):
        items = [(72.0, 60.0, 16.0, f"Page {p + 1} heading")]
        items += [(72.0, 100.0 + 18 * i, 11.0, f"{line} ({p}.{i})") for i, line in enumerate(lines * 3)]
        pages.append(items)
    return build_pdf(pages)


def _xlsx() -> bytes:
    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    ws.title = "Staff"
    ws.append(["Name", "Born", "城市"])
    for i in range(23):
        ws.append([f"Person {i}", 1900 + i, ["伦敦", "上海", "Paris"][i % 3]])
    other = wb.create_sheet("Notes")
    other.append(["Key", "Value"])
    other.append(["a", "alpha"])
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


FILES = {"manual.docx": _docx, "paper.pdf": _pdf, "staff.xlsx": _xlsx}
CASES = [
    (name, chunker, opts)
    for name in FILES
    for chunker, opts in [("token", {"chunk_token_num": 64}), ("heading", {"chunk_token_num": 96, "overlap_tokens": 8})]
]


def _snapshot(chunks: list[Chunk]) -> list[dict]:
    return [
        {
            "kind": c.kind,
            "heading_path": c.heading_path,
            "token_count": c.token_count,
            "positions": [p.to_dict() for p in c.positions],
            "text": c.text,
        }
        for c in chunks
    ]


@pytest.mark.parametrize(("name", "chunker", "opts"), CASES, ids=[f"{n}-{c}" for n, c, _ in CASES])
def test_golden(name: str, chunker: str, opts: dict) -> None:
    doc = parse_document(RawDocument(name, FILES[name](), name))
    chunks = chunk_document(doc, "golden", chunker, opts)
    limit = opts["chunk_token_num"]
    assert chunks
    for c in chunks:
        assert c.token_count == count_tokens(c.text) <= limit
    got = _snapshot(chunks)
    path = GOLDEN / f"{name}.{chunker}.json"
    if UPDATE:
        path.write_text(json.dumps(got, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    expected = json.loads(path.read_text(encoding="utf-8"))
    assert got == expected


def test_docx_structure() -> None:
    doc = parse_document(RawDocument("m.docx", _docx(), "m.docx"))
    chunks = chunk_document(doc, "g", "heading", {})
    tables = [c for c in chunks if c.kind == "table"]
    assert [c.text.count("\nOption: ") for c in tables] == [10, 4]  # 14 rows, 10 per chunk
    for c in tables:
        assert c.text.startswith("Tributary 用户手册 > 配置 Configuration\nOption | Default | 含义\n")
        assert c.heading_path == ["Tributary 用户手册", "配置 Configuration"]
    assert "Option: option_13; Default: 104; 含义: 第13个选项的说明" in tables[1].text
    faq = chunks[-1]
    assert faq.text.startswith("FAQ\nWhy incremental?")  # a new top-level section, folded heading


def test_xlsx_rows_keep_their_sheet_rows() -> None:
    doc = parse_document(RawDocument("s.xlsx", _xlsx(), "s.xlsx"))
    chunks = chunk_document(doc, "g", "token", {})
    staff = [c for c in chunks if c.kind == "table" and "Person" in c.text]
    sizes = [len(c.positions) for c in staff]
    assert sum(sizes) == 23 and all(n <= 10 for n in sizes)
    assert [p.row for c in staff for p in c.positions] == list(range(2, 25))
    assert staff[0].positions[0].sheet == "Staff" and staff[0].positions[0].row == 2
    assert all(c.text.startswith("Name | Born | 城市\n") for c in staff)
    assert staff[-1].text.endswith("Name: Person 22; Born: 1922; 城市: 上海")


def test_pdf_pages_travel_with_chunks() -> None:
    doc = parse_document(RawDocument("p.pdf", _pdf(), "p.pdf"))
    chunks = chunk_document(doc, "g", "token", {"chunk_token_num": 64})
    pages = [sorted({p.page for p in c.positions}) for c in chunks]
    assert pages[0][0] == 1 and pages[-1][-1] == 3
    assert all(p.bbox is not None for c in chunks for p in c.positions)
