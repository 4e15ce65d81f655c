"""PDF table detection is linear, runs under the tables' share of the budget, and keeps the text.

Issue 33 point 3: a 300 x 300 ruled grid (3 KB) or one line of 400k characters (1 KB) timed out
and lost the whole document (``_group_cells`` copied a corner set per cell, ``_pieces`` an index
list per character, ``_cells`` scanned a crossing's whole column and row).
"""

from __future__ import annotations

import pypdfium2 as pdfium
import pytest

from include.contract import BlockKind
from plugins.parsers import _pdf_grid, _pdf_tables
from plugins.parsers._pdf_layout import lines_of, page_chars
from tests.parsers.conftest import parse_bytes
from tests.parsers.pdfgen import build_grid_pdf, build_long_line_pdf


def _text(doc) -> str:
    return " ".join(b.text for b in doc.blocks if b.kind != BlockKind.TABLE)


def test_300_by_300_grid_keeps_its_text_within_the_default_budget():
    doc = parse_bytes(build_grid_pdf(300, 300, text="Words beside a huge grid."), "grid.pdf", isolate=False)
    assert "Words beside a huge grid." in _text(doc)


def test_400k_character_line_parses_with_its_text():
    doc = parse_bytes(build_long_line_pdf(400_000), "line.pdf", isolate=False)
    assert sum(len(b.text) for b in doc.blocks) >= 390_000


def test_grid_under_a_tiny_budget_keeps_the_text_and_records_the_skip(monkeypatch):
    # the tables' share of the budget is nil: detection is cut, the text is not
    monkeypatch.setattr("plugins.parsers.pdf._TABLE_TIME_SHARE", 0.0)
    doc = parse_bytes(build_grid_pdf(120, 120, text="Kept text."), "grid.pdf", isolate=False, time_budget_s=20)
    assert "Kept text." in _text(doc)
    assert doc.metadata["tables_skipped"] == [{"page": 1, "reason": "time budget"}]
    assert doc.metadata["tables_skipped_pages"] == 1


def test_grid_past_the_rule_cap_records_the_skip():
    n = _pdf_grid._MAX_RULES + 5
    doc = parse_bytes(build_grid_pdf(2, n, cell=4.0, text="Beside rules."), "rules.pdf", isolate=False)
    assert "Beside rules." in _text(doc)
    assert doc.metadata["tables_skipped"][0]["reason"].startswith("more than")


def _chars_lines(data: bytes):
    pdf = pdfium.PdfDocument(data)
    page = pdf[0]
    chars = page_chars(page.get_textpage(), page.get_size()[1], 500_000)
    return chars, lines_of(chars)


def test_pieces_time_grows_linearly_with_the_line():
    """Cutting a line into pieces: 4x the characters takes ~4x the time (it took ~16x, a copy
    per character); the factor allowed is loose, and the best of three runs is compared."""
    import time

    best = []
    for n in (50_000, 200_000):
        chars, lines = _chars_lines(build_long_line_pdf(n))
        runs = []
        for _ in range(3):
            started = time.perf_counter()
            pieces = _pdf_tables._pieces(lines[0], chars)
            runs.append(time.perf_counter() - started)
        assert sum(len(idx) for _, _, idx in pieces) == n - n // 3  # every character but the spaces
        best.append(min(runs))
    assert best[1] < 9 * best[0]


@pytest.mark.parametrize("n", [40])
def test_group_cells_matches_the_grid_and_grows_linearly(n):
    cells = [(float(c), float(r), float(c + 1), float(r + 1)) for r in range(n) for c in range(n)]
    calls = []
    real_root = _pdf_grid._root

    def counting_root(parent, g):
        calls.append(g)
        return real_root(parent, g)

    _pdf_grid._root = counting_root
    try:
        groups = _pdf_grid._group_cells(cells)
        small = len(calls)
        calls.clear()
        cells2 = [(float(c), float(r), float(c + 1), float(r + 1)) for r in range(2 * n) for c in range(n)]
        _pdf_grid._group_cells(cells2)
    finally:
        _pdf_grid._root = real_root
    assert len(groups) == 1 and len(groups[0]) == n * n
    assert len(calls) <= 2.5 * small
