"""JSON and JSON Lines: records with their paths.

A JSON document's records are the items of its largest array of objects (``$.items[3]``), or
the document itself; JSON Lines records are its lines (``line`` position, ``$`` path). Each
record becomes a paragraph of ``key.path: value`` lines, so field names stay searchable.
"""

from __future__ import annotations

import json
from typing import Any

from include.contract import ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits, decode_text
from plugins.parsers.registry import ParseContext, register_parser

__all__ = ["parse_json", "parse_jsonl"]

_MAX_DEPTH = 64


def _flatten(value: Any, prefix: str, out: list[str], depth: int = 0) -> None:
    if depth > _MAX_DEPTH:
        raise ParseError(ParseErrorCode.BOMB, f"json: nesting deeper than {_MAX_DEPTH}")
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out, depth + 1)
    elif isinstance(value, list):
        if all(not isinstance(v, dict | list) for v in value):
            out.append(f"{prefix}: {', '.join(_scalar(v) for v in value)}")
        else:
            for i, v in enumerate(value):
                _flatten(v, f"{prefix}[{i}]", out, depth + 1)
    else:
        out.append(f"{prefix}: {_scalar(value)}" if prefix else _scalar(value))


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
            found = _record_array(v, f"{path}.{k}", depth + 1)
            if found and (best is None or len(found[1]) > len(best[1])):
                best = found
    return best


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise ParseError(ParseErrorCode.BOMB, "json: nesting too deep") from exc
    except ValueError as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"json: {exc}") from exc


@register_parser("json", "1.0", ("application/json", "text/json"), ("json",))
def parse_json(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    text, _ = decode_text(data, ctx.declared_type)
    try:
        doc = _loads(text)
    except ParseError as exc:
        # JSON Lines saved as .json is common: "Extra data" after the first value says so
        if "Extra data" in exc.message and text.lstrip()[:1] in ("{", "["):
            return parse_jsonl(data, ctx)
        raise
    builder = BlockBuilder(limits.max_blocks)
    found = _record_array(doc)
    if found is not None:
        path, records = found
        for i, rec in enumerate(records):
            if i % 1000 == 0:
                deadline.check("json")
            if i >= limits.max_rows:
                raise ParseError(ParseErrorCode.TOO_LARGE, f"json: more than {limits.max_rows} records")
            lines: list[str] = []
            _flatten(rec, "", lines)
            builder.paragraph("\n".join(lines), [Position(path=f"{path}[{i}]")])
        # the rest of the document (envelope fields such as totals and titles) as one block
        if isinstance(doc, dict):
            rest: list[str] = []
            top = path.split(".")[1] if path.count(".") >= 1 else None
            _flatten({k: v for k, v in doc.items() if k != top}, "", rest)
            builder.paragraph("\n".join(rest), [Position(path="$")])
    else:
        lines = []
        _flatten(doc, "", lines)
        builder.paragraph("\n".join(lines), [Position(path="$")])
    if not builder.blocks:
        raise ParseError(ParseErrorCode.EMPTY, "json: no values")
    title = doc.get("title") if isinstance(doc, dict) and isinstance(doc.get("title"), str) else None
    return ParsedDocument(blocks=builder.blocks, title=title, media_type="application/json")


@register_parser(
    "jsonl", "1.0", ("application/x-ndjson", "application/jsonl", "application/x-jsonlines"), ("jsonl", "ndjson")
)
def parse_jsonl(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    text, _ = decode_text(data, ctx.declared_type)
    builder = BlockBuilder(limits.max_blocks)
    bad = 0
    for n, line in enumerate(text.splitlines(), start=1):
        if n % 1000 == 0:
            deadline.check("jsonl")
        if not line.strip():
            continue
        if n > limits.max_rows:
            raise ParseError(ParseErrorCode.TOO_LARGE, f"jsonl: more than {limits.max_rows} lines")
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            bad += 1
            continue
        lines: list[str] = []
        _flatten(rec, "", lines)
        builder.paragraph("\n".join(lines), [Position(line=n, path="$")])
    if not builder.blocks:
        raise ParseError(ParseErrorCode.CORRUPT if bad else ParseErrorCode.EMPTY, "jsonl: no valid records")
    meta = {"invalid_lines": bad} if bad else {}
    return ParsedDocument(blocks=builder.blocks, media_type="application/x-ndjson", metadata=meta)
