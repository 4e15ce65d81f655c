"""JSON, JSON Lines and concatenated JSON: records with their paths.

A JSON document's records are the items of its largest array of objects (``$.items[3]``), or
the document itself. A stream of JSON values -- one per line (JSON Lines), back to back
(``{"a":1}{"b":2}``, what loggers and ``jq -c`` without newlines write), or separated by RFC 7464
record separators -- has one record per value (``line`` position of the value's start, ``$``
path). Each record becomes a paragraph of ``key.path: value`` lines, so field names stay
searchable. A value that does not decode is counted (``invalid_lines``) and reading resumes at
the next line; a truncated tail is such a value. A ``.json`` that is a Jupyter notebook goes to
the notebook parser (servers label notebooks ``application/json``).

Key paths are text the parse builds: each ``key.path: value`` line is counted against
``max_chars`` as it is built (:class:`RecordBudget`), before the string exists, and a record's
``$.items[3]`` position is charged too, so a hostile file ends in ``too_large`` after building
at most the document's character cap. A key longer than ``MAX_KEY_CHARS`` is cut to that many
characters and ``…`` wherever it is a path step: a 1 MiB key over 20,000 leaves would otherwise
be copied into every leaf's line (20 GB; it ran a parse out of 4 GB in 2.6 s). The key's text
is a name, not prose; its first 256 characters still find it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from include.contract import ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits, decode_text
from plugins.parsers.registry import ParseContext, get_parser, register_parser

__all__ = [
    "MAX_KEY_CHARS",
    "NOTEBOOK",
    "RecordBudget",
    "flatten",
    "is_notebook",
    "iter_json_values",
    "parse_json",
    "parse_jsonl",
    "path_key",
]

NOTEBOOK = "application/x-ipynb+json"

_MAX_DEPTH = 64
MAX_KEY_CHARS = 256

Charge = Callable[[int], None]


def path_key(key: Any) -> str:
    """``key`` as a path step: its text, cut to ``MAX_KEY_CHARS`` characters and ``…``."""
    text = str(key)
    return text if len(text) <= MAX_KEY_CHARS else f"{text[:MAX_KEY_CHARS]}…"


class RecordBudget:
    """Counts a record's lines as :func:`flatten` builds them, against what the document has left.

    The lines become one block, which the builder charges when it is added; charging them here
    as well would count the document twice, so this checks room (raising the builder's own
    ``too_large``) and starts again at each block."""

    def __init__(self, builder: BlockBuilder, max_chars: int) -> None:
        self.builder = builder
        self.max_chars = max_chars
        self.pending = 0

    def __call__(self, chars: int) -> None:
        self.pending += chars
        if self.builder.chars + self.pending > self.max_chars:
            self.builder.charge(self.pending)  # raises: over the cap

    def paragraph(self, lines: list[str], path: str | None = None, line: int | None = None, **metadata: Any) -> None:
        """Add ``lines`` as one block; its position's path is charged (it is built text too)."""
        if path is not None:
            self.builder.charge(len(path))
        self.builder.paragraph("\n".join(lines), [Position(line=line, path=path)], **metadata)
        self.pending = 0


def flatten(value: Any, prefix: str, out: list[str], charge: Charge, depth: int = 0) -> None:
    """Append ``key.path: value`` lines for ``value`` to ``out``, each charged before it is built."""
    if depth > _MAX_DEPTH:
        raise ParseError(ParseErrorCode.BOMB, f"json: nesting deeper than {_MAX_DEPTH}")
    if isinstance(value, dict):
        for k, v in value.items():
            key = path_key(k)
            flatten(v, f"{prefix}.{key}" if prefix else key, out, charge, depth + 1)
    elif isinstance(value, list):
        if all(not isinstance(v, dict | list) for v in value):
            out.append(_line(prefix, [_scalar(v) for v in value], charge))
        else:
            for i, v in enumerate(value):
                flatten(v, f"{prefix}[{i}]", out, charge, depth + 1)
    elif prefix:
        out.append(_line(prefix, [_scalar(value)], charge))
    else:
        scalar = _scalar(value)
        charge(len(scalar))
        out.append(scalar)


def _line(prefix: str, values: Sequence[str], charge: Charge) -> str:
    charge(len(prefix) + sum(len(v) + 2 for v in values))  # "prefix: a, b"
    return f"{prefix}: {', '.join(values)}"


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _record_array(doc: Any, path: str = "$", depth: int = 0) -> tuple[str, list[Any]] | None:
    """The largest array of objects in ``doc`` (breadth-first, shallow first), with its path."""
    if depth > 4:
        return None
    best: tuple[str, list[Any]] | None = None
    if isinstance(doc, list) and doc and sum(isinstance(x, dict) for x in doc) >= len(doc) * 0.8:
        return path, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            found = _record_array(v, f"{path}.{path_key(k)}", depth + 1)
            if found and (best is None or len(found[1]) > len(best[1])):
                best = found
    return best


def _holds(value: Any, records: list[Any], depth: int = 0) -> bool:
    """Whether ``records`` is ``value`` or sits in its objects (as deep as :func:`_record_array` looks)."""
    if value is records:
        return True
    return depth < 4 and isinstance(value, dict) and any(_holds(v, records, depth + 1) for v in value.values())


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise ParseError(ParseErrorCode.BOMB, "json: nesting too deep") from exc
    except ValueError as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"json: {exc}") from exc


def is_notebook(doc: Any) -> bool:
    """A Jupyter notebook: "nbformat" and its cells (v4 "cells", v3 "worksheets") at the top."""
    return isinstance(doc, dict) and "nbformat" in doc and ("cells" in doc or "worksheets" in doc)


# a notebook as the sniffer knows one: a notebook key first, "nbformat" at one end (Jupyter
# writes it last)
_NOTEBOOK_OPENING = re.compile(rb'\s*\{\s*"(?:cells|worksheets|metadata|nbformat)"\s*:')


def _looks_like_notebook(data: bytes) -> bool:
    head = data[:4096].removeprefix(b"\xef\xbb\xbf")
    return bool(_NOTEBOOK_OPENING.match(head)) and b'"nbformat"' in head + data[-4096:]


@register_parser("json", "1.0", ("application/json", "text/json"), ("json",))
def parse_json(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    notebook = get_parser(NOTEBOOK) if _looks_like_notebook(data) else None
    if notebook is not None:
        # before json.loads: the notebook parser reads lazily what json.loads would build whole
        try:
            return notebook.fn(data, ctx)
        except ParseError as exc:
            if exc.code != ParseErrorCode.CORRUPT:
                raise  # a notebook, too big or hostile; a corrupt one is read again as JSON
    deadline = Deadline(limits.time_budget_s)
    text, _ = decode_text(data, ctx.declared_type)
    try:
        doc = _loads(text)
    except ParseError as exc:
        # JSON Lines or concatenated JSON saved as .json is common: "Extra data" after the first
        # value says so; a leading record separator is an RFC 7464 JSON text sequence
        opening = text.lstrip(" \t\r\n\ufeff")[:1]
        if ("Extra data" in exc.message and opening in ("{", "[")) or opening == "\x1e":
            return parse_jsonl(data, ctx)
        raise
    notebook = get_parser(NOTEBOOK) if is_notebook(doc) else None
    if notebook is not None:
        return notebook.fn(data, ctx)
    builder = BlockBuilder(limits.max_blocks, limits.max_chars)
    budget = RecordBudget(builder, limits.max_chars)
    found = _record_array(doc)
    if found is not None:
        path, records = found
        for i, rec in enumerate(records):
            if i % 1000 == 0:
                deadline.check("json")
            if i >= limits.max_rows:
                raise ParseError(ParseErrorCode.TOO_LARGE, f"json: more than {limits.max_rows} records")
            lines: list[str] = []
            flatten(rec, "", lines, budget)
            budget.paragraph(lines, f"{path}[{i}]")
        # the rest of the document (envelope fields such as totals and titles) as one block
        if isinstance(doc, dict):
            rest: list[str] = []
            top = next((k for k, v in doc.items() if _holds(v, records)), None)
            flatten({k: v for k, v in doc.items() if k != top}, "", rest, budget)
            budget.paragraph(rest, "$")
    else:
        lines = []
        flatten(doc, "", lines, budget)
        budget.paragraph(lines, "$")
    if not builder.blocks:
        raise ParseError(ParseErrorCode.EMPTY, "json: no values")
    title = doc.get("title") if isinstance(doc, dict) and isinstance(doc.get("title"), str) else None
    return ParsedDocument(blocks=builder.blocks, title=title, media_type="application/json")


# between the values of a stream: whitespace, RFC 7464 record separators, and commas (array
# items pasted without their brackets)
_GAP = re.compile(r"[ \t\r\n\x1e,]*")
_DECODER = json.JSONDecoder()


def iter_json_values(text: str, invalid: list[int], deadline: Deadline) -> Iterator[tuple[int, Any]]:
    """``(line, value)`` for each JSON value of a stream; the line of each undecodable one goes to ``invalid``.

    ``raw_decode`` reads one value and says where it ended, so values need no separator. After
    a value that does not decode, reading resumes at the next line: JSON Lines recover there,
    and a back-to-back stream has nothing better to resume at.
    """
    pos, line, counted = 0, 1, 0
    end = len(text)
    for attempt in range(1, end + 2):  # every attempt consumes at least one character
        if attempt % 1000 == 0:
            deadline.check("json stream")
        gap = _GAP.match(text, pos)
        pos = gap.end() if gap else pos
        if pos >= end:
            return
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError):
            invalid.append(line)
            newline = text.find("\n", pos)
            if newline < 0:
                return
            pos = newline + 1
            continue
        yield line, value
    return


@register_parser(
    "jsonl",
    "1.1",
    ("application/x-ndjson", "application/jsonl", "application/x-jsonlines", "application/json-seq"),
    ("jsonl", "ndjson"),
)
def parse_jsonl(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    text, _ = decode_text(data, ctx.declared_type)
    builder = BlockBuilder(limits.max_blocks, limits.max_chars)
    budget = RecordBudget(builder, limits.max_chars)
    invalid: list[int] = []
    for n, (line, rec) in enumerate(iter_json_values(text, invalid, deadline), start=1):
        if n > limits.max_rows:
            raise ParseError(ParseErrorCode.TOO_LARGE, f"jsonl: more than {limits.max_rows} records")
        lines: list[str] = []
        flatten(rec, "", lines, budget)
        budget.paragraph(lines, "$", line)
    if not builder.blocks:
        code = ParseErrorCode.CORRUPT if invalid else ParseErrorCode.EMPTY
        raise ParseError(code, "jsonl: no valid records")
    meta: dict[str, Any] = {"invalid_lines": len(invalid), "first_invalid_line": invalid[0]} if invalid else {}
    return ParsedDocument(blocks=builder.blocks, media_type="application/x-ndjson", metadata=meta)
