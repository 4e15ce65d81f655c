"""Jupyter notebooks (``.ipynb``, nbformat 4 and 3): cells in order, each with its path.

* markdown cells go through the Markdown parser (headings, lists, tables, fences as they are in
  a ``.md``); their headings carry on across cells, so a code cell sits under the heading of
  the markdown cell above it;
* code cells are CODE blocks with the notebook's language (``metadata.kernelspec.language``,
  else ``metadata.language_info.name``; v3: the cell's ``language``), indentation kept;
* outputs are text blocks (``metadata.output_type``): stream text, the ``text/plain`` (else
  ``text/markdown``, else ``text/html`` stripped of its tags and scripts) of results and
  displays, and ``ename: evalue`` of errors (tracebacks are ANSI-coloured frames of the kernel,
  not content). Images and scripts are skipped, and so is a ``<Figure ...>``/``<... at 0x..>``
  repr that only names the object;
* raw cells are paragraphs.

Positions are paths into the JSON: ``cells[3]``, outputs ``cells[3].outputs[0]`` (v3:
``worksheets[0].cells[3]``). Format: nbformat's JSON schema (nbformat.v4.schema.json, and v3's).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits, clean_text, decode_text
from plugins.parsers.jsonl import NOTEBOOK, is_notebook
from plugins.parsers.registry import ParseContext, get_parser, register_parser
from plugins.parsers.text import keep_lines

__all__ = ["parse_notebook"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_REPR = re.compile(r"<[^<>\n]+>")
_OUTPUT_LINES = 200  # an output longer than this is cut into blocks of this many lines


@dataclass(slots=True)
class _Cell:
    path: str
    kind: str  # markdown | code | raw | heading (v3)
    source: str
    language: str | None = None
    level: int = 1
    # (index in the cell's outputs, output_type, text) of the outputs that have text
    outputs: list[tuple[int, str, str]] = field(default_factory=list)


def _joined(value: Any) -> str:
    """nbformat's multiline strings: a string or a list of lines.

    Lines keep their newline from nbformat 3 on; nbformat 2 wrote them without, and nbformat's
    own reader (``v2.rwbase._join_lines``) tells the two apart by the first line.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        lines = [v for v in value if isinstance(v, str)]
        return "".join(lines) if lines and lines[0].endswith(("\n", "\r")) else "\n".join(lines)
    return ""


def _html_text(fragment: str) -> str:
    from lxml import html as lxml_html  # only for outputs that are HTML alone

    try:
        el = lxml_html.fragment_fromstring(fragment, create_parent="div")
    except Exception:  # markup lxml cannot read at all: the text between the tags
        return re.sub(r"<[^>]+>", " ", fragment)
    for bad in el.xpath(".//script|.//style"):
        bad.drop_tree()
    # spaced, then folded: a DataFrame's cells must not run together
    return clean_text(" ".join(el.itertext()), keep_newlines=True)


def _bundle_text(bundle: dict[str, Any]) -> str:
    """The text of a MIME bundle (v4 ``data``; v3 keys without the type: ``text``, ``html``, ``png``)."""
    plain = _joined(bundle.get("text/plain", bundle.get("text")))
    richer = any(
        k not in ("text/plain", "text", "metadata", "output_type", "execution_count", "prompt_number") for k in bundle
    )
    # a Python repr such as "<Figure size 640x480 with 1 Axes>" or "<IPython...HTML at 0x11>"
    # names the object, not its content: dropped when a richer form comes with it
    is_repr = bool(_REPR.fullmatch(plain.strip())) and (richer or " at 0x" in plain)
    if plain and not is_repr:
        return plain
    markdown = _joined(bundle.get("text/markdown", bundle.get("markdown")))
    if markdown:
        return markdown
    html = _joined(bundle.get("text/html", bundle.get("html")))
    return _html_text(html) if html else ""


def _output(out: Any) -> tuple[str, str] | None:
    if not isinstance(out, dict):
        return None
    kind = str(out.get("output_type", ""))
    if kind == "stream":
        text = _joined(out.get("text"))
    elif kind in ("error", "pyerr"):
        text = f"{out.get('ename', '')}: {out.get('evalue', '')}"
    elif isinstance(out.get("data"), dict):  # v4 execute_result / display_data
        text = _bundle_text(out["data"])
    else:  # v3 pyout / display_data keep the bundle in the output itself
        text = _bundle_text(out)
    text = _ANSI.sub("", text)
    return (kind, text) if text.strip() else None


def _cells(doc: dict[str, Any], language: str | None) -> Iterator[_Cell]:
    if isinstance(doc.get("cells"), list):  # v4
        sheets: list[tuple[str, list[Any]]] = [("", doc["cells"])]
    else:  # v3: cells live in worksheets
        sheets = [
            (f"worksheets[{w}].", ws["cells"])
            for w, ws in enumerate(doc.get("worksheets") or [])
            if isinstance(ws, dict) and isinstance(ws.get("cells"), list)
        ]
    for prefix, cells in sheets:
        for i, cell in enumerate(cells):
            if not isinstance(cell, dict):
                continue
            kind = str(cell.get("cell_type", ""))
            source = _joined(cell.get("source", cell.get("input")))
            lang = cell.get("language") if isinstance(cell.get("language"), str) else language
            raw = cell.get("outputs")
            raw_outputs: list[Any] = raw if kind == "code" and isinstance(raw, list) else []
            outputs = [(j, *o) for j, out in enumerate(raw_outputs) if (o := _output(out))]
            level = int(cell["level"]) if isinstance(cell.get("level"), int) else 1
            yield _Cell(f"{prefix}cells[{i}]", kind, source, lang, level, outputs)


def _language(meta: Any) -> str | None:
    if not isinstance(meta, dict):
        return None
    for key, field_name in (("kernelspec", "language"), ("language_info", "name")):
        section = meta.get(key)
        if isinstance(section, dict) and isinstance(section.get(field_name), str) and section[field_name]:
            return str(section[field_name]).lower()
    return None


def _markdown(cell: _Cell, builder: BlockBuilder, ctx: ParseContext) -> None:
    """Parse the cell as Markdown and re-add its blocks here, so headings nest across cells."""
    spec = get_parser("text/markdown")
    if spec is None:  # never: the Markdown parser is built in
        raise ParseError(ParseErrorCode.UNSUPPORTED, "notebook: no Markdown parser registered")
    try:
        parsed = spec.fn(cell.source.encode("utf-8"), ParseContext(file_name="cell.md", options=ctx.options))
    except ParseError as exc:
        if exc.code == ParseErrorCode.EMPTY:  # an empty cell, or one with only a comment
            return
        raise
    where = [Position(path=cell.path)]
    for block in parsed.blocks:
        if block.kind == BlockKind.HEADING:
            builder.heading(block.text, block.level or 1, where)
        else:
            builder.add(block.kind, block.text, where, block.rows, block.header, block.level, **block.metadata)


def _render(cell: _Cell, builder: BlockBuilder, ctx: ParseContext) -> None:
    where = [Position(path=cell.path)]
    if cell.kind == "markdown":
        _markdown(cell, builder, ctx)
    elif cell.kind == "heading":  # v3 heading cells
        builder.heading(cell.source, cell.level, where)
    elif cell.kind == "code":
        extra: dict[str, Any] = {"language": cell.language} if cell.language else {}
        builder.add(BlockKind.CODE, keep_lines(cell.source.splitlines()), where, **extra)
        for j, output_type, text in cell.outputs:
            lines = text.splitlines()
            for start in range(0, len(lines), _OUTPUT_LINES):
                piece = keep_lines(lines[start : start + _OUTPUT_LINES])
                builder.add(
                    BlockKind.PARAGRAPH, piece, [Position(path=f"{cell.path}.outputs[{j}]")], output_type=output_type
                )
    elif cell.kind == "raw":
        builder.add(BlockKind.PARAGRAPH, keep_lines(cell.source.splitlines()), where)


def _load(data: bytes, ctx: ParseContext) -> dict[str, Any]:
    text, _ = decode_text(data, ctx.declared_type)
    try:
        doc = json.loads(text)
    except RecursionError as exc:
        raise ParseError(ParseErrorCode.BOMB, "notebook: JSON nesting too deep") from exc
    except ValueError as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"notebook: {exc}") from exc
    if not is_notebook(doc):
        raise ParseError(ParseErrorCode.CORRUPT, "notebook: JSON without nbformat and cells")
    return dict(doc)


@register_parser("notebook", "1.0", (NOTEBOOK,), ("ipynb",))
def parse_notebook(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    doc = _load(data, ctx)
    meta: dict[str, Any] = doc["metadata"] if isinstance(doc.get("metadata"), dict) else {}
    language = _language(meta)
    builder = BlockBuilder(limits.max_blocks, limits.max_chars)
    count = 0
    for cell in _cells(doc, language):
        deadline.check("notebook")
        _render(cell, builder, ctx)
        count += 1
    if not builder.blocks:
        raise ParseError(ParseErrorCode.EMPTY, "notebook: no text in any cell")
    title = meta.get("title") if isinstance(meta.get("title"), str) else None
    if not title:
        title = next((b.text for b in builder.blocks if b.kind == BlockKind.HEADING), None)
    info: dict[str, Any] = {"nbformat": doc.get("nbformat"), "cells": count}
    if language:
        info["language"] = language
    return ParsedDocument(blocks=builder.blocks, title=title, media_type=NOTEBOOK, metadata=info)
