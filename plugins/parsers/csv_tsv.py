"""CSV / TSV (RFC 4180 via :mod:`csv`): dialect sniffing, quoted newlines, header detection.

Same block shape as spreadsheets: one table block per non-empty record, positioned by the line
the record starts on.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode
from plugins.parsers._common import BlockBuilder, Deadline, Limits, decode_text
from plugins.parsers._tabular import CellBudget, emit_rows, header_option
from plugins.parsers.registry import ParseContext, register_parser

__all__ = ["parse_csv"]

csv.field_size_limit(16 * 1024 * 1024)


def _dialect(sample: str, tsv: bool) -> type[csv.Dialect] | csv.Dialect:
    if tsv:
        return csv.excel_tab
    try:
        sniffed = csv.Sniffer().sniff(sample, delimiters=",\t;|")
    except csv.Error:
        return csv.excel

    # Only the delimiter and the space after it are sniffed: RFC 4180 quotes with '"', and the
    # sniffer mistakes values like 'aifc' for single-quoted fields, eating their quotes. A space
    # after each delimiter (`"Albatross", 2.99, "On a stick!"`, as docutils' csv-table writes)
    # must be skipped, or the quoted field after it is read as text and split at its commas.
    class _Dialect(csv.excel):
        delimiter = sniffed.delimiter
        skipinitialspace = sniffed.skipinitialspace

    return _Dialect


def _records(text: str, dialect: type[csv.Dialect] | csv.Dialect) -> Iterator[tuple[int, list[str]]]:
    reader = csv.reader(io.StringIO(text, newline=""), dialect)
    start = 1
    for row in reader:
        yield start, [c.strip() for c in row]
        start = reader.line_num + 1


@register_parser("csv", "1.0", ("text/csv", "text/tab-separated-values", "application/csv"), ("csv", "tsv", "tab"))
def parse_csv(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    text, encoding = decode_text(data, ctx.declared_type)
    tsv = ctx.media_type == "text/tab-separated-values" or ctx.file_name.lower().endswith((".tsv", ".tab"))
    dialect = _dialect(text[:65536], tsv)
    builder = BlockBuilder(limits.max_blocks)
    try:
        rows = emit_rows(
            builder,
            _records(text, dialect),
            sheet=None,
            first_row_as_header=header_option(ctx.options.get("first_row_as_header", "auto")),
            limits=limits,
            deadline=deadline,
            line_positions=True,
            # short records are padded to the header's width: a header of a million commas
            # would otherwise turn each one-character record into a million cells
            cells_budget=CellBudget(limits.max_cells),
        )
    except csv.Error as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"csv: {exc}") from exc
    if not any(b.kind == BlockKind.TABLE for b in builder.blocks):
        raise ParseError(ParseErrorCode.EMPTY, "no records")
    meta = {"encoding": encoding, "delimiter": dialect.delimiter, "rows": rows}
    return ParsedDocument(
        blocks=builder.blocks, media_type="text/tab-separated-values" if tsv else "text/csv", metadata=meta
    )
