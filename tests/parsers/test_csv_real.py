"""CSV cases met in real files (../shared/realdocs): a space after each delimiter."""

from __future__ import annotations

from pathlib import Path

import pytest

from include.contract import BlockKind, RawDocument
from plugins.parsers import parse_document

REALDOCS = Path(__file__).resolve().parents[2].parent / "shared" / "realdocs"


def _rows(data: bytes, name: str = "t.csv") -> list[list[str]]:
    doc = parse_document(RawDocument("k", data, name))
    return [b.rows[0] for b in doc.blocks if b.kind == BlockKind.TABLE and b.rows]


def test_quoted_field_after_a_space_keeps_its_commas_and_newline() -> None:
    data = b'"Albatross", 2.99, "On a stick!"\n"Crunchy Frog", 1.49, "If we took the bones out, it would\nnot be"\n'
    assert _rows(data) == [
        ["Albatross", "2.99", "On a stick!"],
        ["Crunchy Frog", "1.49", "If we took the bones out, it would\nnot be"],
    ]


def test_without_spaces_a_quote_inside_a_field_stays_literal() -> None:
    data = b'name,size\nbox,12"\nlid,3"\n'
    assert _rows(data)[-2:] == [["box", '12"'], ["lid", '3"']]


def test_docutils_csv_table_from_the_real_corpus() -> None:
    path = REALDOCS / "csv" / "0010_3533-rst-csv-tables.csv"
    if not path.exists():
        pytest.skip(f"no real-document corpus at {REALDOCS}")
    rows = _rows(path.read_bytes(), path.name)
    assert rows[1] == ["Crunchy Frog", "1.49", "If we took the bones out, it wouldn't be\ncrunchy, now would it?"]
