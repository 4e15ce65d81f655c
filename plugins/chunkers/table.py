"""Table chunks: rows as ``header: value`` pairs, N rows per chunk, the header in every chunk.

Parsers deliver a table either as one TABLE block with all its ``rows`` (HTML, DOCX, PDF) or as
one TABLE block per row sharing a ``header`` (spreadsheets, CSV); both arrive here as a list of
rows with one position list per row. A row is split (at ``"; "`` between pairs, then at token
ends) only when it alone does not fit the limit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import zip_longest

from include.contract import Block, Position
from plugins.chunkers.options import ChunkOptions
from plugins.chunkers.pack import ChunkSink, Prefix, pack_run
from plugins.chunkers.tokenizer import count_tokens

__all__ = ["TableRows", "chunk_table", "render_row"]

_ROW_DELIMITERS = "`; `"
_SPACES = re.compile(r"\s+")


@dataclass(slots=True)
class TableRows:
    """One logical table: its header, its data rows and where each row came from."""

    header: list[str] | None
    rows: list[list[str]] = field(default_factory=list)
    positions: list[list[Position]] = field(default_factory=list)
    heading_path: list[str] = field(default_factory=list)

    @classmethod
    def from_block(cls, block: Block, heading_path: list[str]) -> TableRows:
        header = [_cell(h) for h in block.header] if block.header else None
        rows = [list(r) for r in (block.rows or [])]
        if header and rows and [_cell(c) for c in rows[0]] == header:
            rows = rows[1:]  # some parsers repeat the header as the first row
        if block.rows is None:  # a table the parser could only give as text
            rows = [[line] for line in block.text.splitlines() if line.strip()]
        positions = (
            [[p] for p in block.positions] if len(block.positions) == len(rows) else [list(block.positions)] * len(rows)
        )
        return cls(header, rows, positions, heading_path)

    def extend(self, block: Block) -> None:
        more = TableRows.from_block(block, self.heading_path)
        self.rows.extend(more.rows)
        self.positions.extend(more.positions)


def _cell(value: object) -> str:
    """One line per row: newlines and runs of spaces inside a cell become one space."""
    return _SPACES.sub(" ", str(value or "")).strip()


def render_row(header: Sequence[str] | None, row: Sequence[str]) -> str:
    """``"name: Ada; born: 1815"``; without a header the cells joined by ``" | "``."""
    cells = [_cell(c) for c in row]
    if not header:
        return " | ".join(cells)
    pairs = []
    for name, value in zip_longest(header, cells, fillvalue=""):
        if not value:
            continue  # an empty cell says nothing; skipping it keeps rows short
        pairs.append(f"{name}: {value}" if name else value)
    return "; ".join(pairs)


def chunk_table(table: TableRows, opts: ChunkOptions, sink: ChunkSink, path_prefix: str = "") -> None:
    """Chunk one table into ``sink``. ``path_prefix`` is the heading line (heading mode) or empty."""
    texts: list[str] = []
    positions: list[list[Position]] = []
    for row, pos in zip(table.rows, table.positions, strict=True):
        text = render_row(table.header, row)
        if text.strip():
            texts.append(text)
            positions.append(pos)
    header_line = ""
    if opts.table_header_line and table.header and any(table.header):
        header_line = " | ".join(table.header) + "\n"
    prefix_text = path_prefix + header_line
    if prefix_text and count_tokens(prefix_text) > opts.prefix_limit:
        # A very wide header would starve the rows; the pairs still carry every column name.
        prefix_text = path_prefix if count_tokens(path_prefix) <= opts.prefix_limit else ""
    if not texts:
        if not header_line:
            return
        # A header without data rows is still content a search may want.
        texts, positions, prefix_text = [header_line.rstrip("\n")], [[]], path_prefix
    prefix = Prefix(prefix_text, count_tokens(prefix_text), list(table.heading_path))
    pack_run(
        texts,
        positions,
        lambda _unit, _at_start: prefix,
        sink,
        limit=opts.chunk_token_num,
        overlap=0,
        delimiters=_ROW_DELIMITERS,
        kind="table",
        max_units=opts.table_rows_per_chunk,
        isolate_split=True,
    )
