"""Table chunks: header: value rows, N rows per chunk, header in every chunk, rows split only if needed."""

from __future__ import annotations

from include.contract import Block, BlockKind, ParsedDocument, Position
from plugins.chunkers import chunk_document
from plugins.chunkers.table import render_row
from plugins.chunkers.tokenizer import count_tokens


def _table(n: int, header: list[str] | None = None) -> Block:
    rows = [[f"name{i}", str(1800 + i), f"城市{i}"] for i in range(n)]
    return Block(
        BlockKind.TABLE,
        "\n".join("\t".join(r) for r in rows),
        rows=rows,
        header=header,
        positions=[Position(page=1, bbox=(0.0, float(i), 100.0, float(i + 1))) for i in range(n)],
    )


def test_render_row() -> None:
    assert render_row(["Name", "Born", ""], ["Ada", "1815", "London"]) == "Name: Ada; Born: 1815; London"
    assert render_row(["Name", "Born"], ["Ada", ""]) == "Name: Ada"  # empty cells say nothing
    assert render_row(None, ["Ada", "1815"]) == "Ada | 1815"
    assert render_row(["Note"], ["two\nlines  here"]) == "Note: two lines here"


def test_ten_rows_per_chunk_with_header_repeated() -> None:
    doc = ParsedDocument([_table(25, ["Name", "Born", "City"])])
    chunks = chunk_document(doc, "d", "token", {})
    assert [c.kind for c in chunks] == ["table"] * 3
    rows = [c.text.count("\n") for c in chunks]  # header line + rows
    # At most 10 rows a chunk; where a chunk ends inside its window (5-10 rows) follows content.
    assert sum(rows) == 25 and all(5 <= n <= 10 for n in rows)
    for c in chunks:
        assert c.text.startswith("Name | Born | City\nName: name")
        assert c.metadata["prefix_chars"] == len("Name | Born | City\n")
    assert chunks[0].text.splitlines()[1] == "Name: name0; Born: 1800; City: 城市0"
    # Row positions travel with their rows.
    assert [[p.bbox[1] for p in c.positions] for c in chunks] == [
        [float(i) for i in range(sum(rows[:k]), sum(rows[: k + 1]))] for k in range(3)
    ]


def test_rows_per_chunk_option_and_token_limit() -> None:
    doc = ParsedDocument([_table(12, ["Name", "Born", "City"])])
    rows = [c.text.count("\n") for c in chunk_document(doc, "d", "token", {"table_rows_per_chunk": 4})]
    assert sum(rows) == 12 and max(rows) == 4 and len(rows) >= 3
    # 40 tokens hold the header line and only a few rows: as many as fit.
    small = chunk_document(doc, "d", "token", {"chunk_token_num": 40})
    assert all(c.token_count <= 40 for c in small)
    assert sum(c.text.count("Name: ") for c in small) == 12
    assert max(c.text.count("Name: ") for c in small) < 10


def test_a_row_is_split_only_when_it_alone_is_over_the_limit() -> None:
    long_cell = "很长的单元格内容" * 30
    rows = [["a", "b"], ["x", long_cell], ["c", "d"]]
    doc = ParsedDocument([Block(BlockKind.TABLE, "", rows=rows, header=["K", "V"])])
    chunks = chunk_document(doc, "d", "token", {"chunk_token_num": 64})
    assert all(c.token_count <= 64 for c in chunks)
    assert all(c.text.startswith("K | V\n") for c in chunks)
    bodies = [c.text[c.metadata["prefix_chars"] :] for c in chunks]
    assert bodies[0] == "K: a; V: b"  # the short row is not glued to a piece of the long one
    assert bodies[-1] == "K: c; V: d"
    assert "".join(bodies[1:-1]) == f"K: x; V: {long_cell}"


def test_tables_are_never_glued_to_prose() -> None:
    doc = ParsedDocument(
        [
            Block(BlockKind.PARAGRAPH, "Before the table."),
            _table(2, ["Name", "Born", "City"]),
            Block(BlockKind.PARAGRAPH, "After the table."),
        ]
    )
    chunks = chunk_document(doc, "d", "token", {})
    assert [(c.kind, c.text) for c in chunks] == [
        ("text", "Before the table."),
        ("table", "Name | Born | City\nName: name0; Born: 1800; City: 城市0\nName: name1; Born: 1801; City: 城市1"),
        ("text", "After the table."),
    ]


def test_spreadsheet_rows_are_one_table() -> None:
    # Spreadsheet parsers emit the header as a paragraph, then one TABLE block per row.
    header = ["Name", "Born"]
    blocks = [Block(BlockKind.PARAGRAPH, "Name\tBorn", metadata={"role": "header"})]
    blocks += [
        Block(
            BlockKind.TABLE,
            f"p{i}\t{i}",
            rows=[[f"p{i}", str(i)]],
            header=header,
            positions=[Position(sheet="S", row=i + 2)],
        )
        for i in range(13)
    ]
    chunks = chunk_document(ParsedDocument(blocks), "d", "token", {})
    assert {c.kind for c in chunks} == {"table"} and len(chunks) == 2
    assert chunks[0].text.splitlines()[:2] == ["Name | Born", "Name: p0; Born: 0"]
    assert [p.row for c in chunks for p in c.positions] == list(range(2, 15))
    assert all(c.text.startswith("Name | Born\n") and c.text.count("\n") <= 10 for c in chunks)


def test_table_without_header() -> None:
    doc = ParsedDocument([Block(BlockKind.TABLE, "", rows=[["a", "b"], ["c", "d"]], header=None)])
    (chunk,) = chunk_document(doc, "d", "token", {})
    assert chunk.text == "a | b\nc | d"
    assert chunk.token_count == count_tokens(chunk.text)
