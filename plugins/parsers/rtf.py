"""RTF parser: a pure-Python RTF 1.9.1 reader (see :mod:`plugins.parsers._rtf_reader`).

Blocks: paragraphs, headings (a paragraph's ``\\outlinelevelN``, or its style named
"heading N" / carrying an outline level in the style sheet), list items (paragraphs with a
``\\listtext`` / ``\\pntext`` marker, or in a ``\\lsN`` list), tables (``\\trowd ... \\cell ... \\row``, first row as
header when the table has more than one), then headers, footers and footnotes, each once, with
``metadata["part"]`` naming where they came from, then the files of embedded objects
(``\\objdata``: Object Packager files, Word/Excel/PowerPoint/PDF objects; ``_rtf_objects``)
parsed through ``_embedded``, identical objects once. ``\\info`` gives the title and author.

Caps: the group depth (``Limits.xml_max_depth``), the output text (``Limits.max_chars``) and
the time budget, checked every few thousand tokens.
"""

from __future__ import annotations

import hashlib
from typing import Any

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode
from plugins.parsers._common import BlockBuilder, Deadline, Limits, clean_text
from plugins.parsers._embedded import EmbeddedFile, embedded_images_wanted, parse_embedded
from plugins.parsers._rtf_objects import object_files
from plugins.parsers._rtf_reader import RtfReader
from plugins.parsers._rtf_syntax import Flow, Para, Table
from plugins.parsers.registry import ParseContext, register_parser
from plugins.parsers.sniff import IMAGE_TYPES, RTF, sniff_binary

__all__ = ["parse_rtf"]


@register_parser("rtf", "1.0", (RTF, "text/rtf", "application/x-rtf", "text/richtext"), ("rtf",))
def parse_rtf(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    reader = RtfReader(data, deadline, limits.xml_max_depth, limits.max_chars, limits.embed_max_total)
    reader.read()
    builder = BlockBuilder(limits.max_blocks, limits.max_chars)
    _add_flow(builder, reader.body, deadline, {})
    seen: set[str] = set()
    for flow in reader.side:
        text = "\n".join(item.text for item in flow.items if isinstance(item, Para))
        if text in seen:  # first/left/right headers often repeat the same text
            continue
        seen.add(text)
        _add_flow(builder, flow, deadline, {"part": flow.kind})
    meta: dict[str, Any] = {key: clean_text("".join(parts)) for key, parts in reader.meta.items()}
    meta = {key: value for key, value in meta.items() if value}
    if reader.objects:
        _add_objects(builder, reader, ctx, meta)
    if not builder.blocks:
        raise ParseError(ParseErrorCode.EMPTY, "no text content", meta)
    title = meta.pop("title", None)
    return ParsedDocument(blocks=builder.blocks, title=title, media_type=RTF, metadata=meta)


def _add_objects(builder: BlockBuilder, reader: RtfReader, ctx: ParseContext, meta: dict[str, Any]) -> None:
    """Embedded objects' files, parsed like any embedded file, after the document's own blocks."""
    files, skipped = object_files(reader.objects)
    if not embedded_images_wanted(ctx.options):  # pictures pasted as packaged files are images too
        files = [f for f in files if (sniff_binary(f.data, f.name) or "") not in IMAGE_TYPES]
    files, repeats = _distinct(files)
    result = parse_embedded(files, ctx.options, room=builder.room)
    builder.extend(result.blocks)  # the embedded text counts against max_chars and max_blocks
    result.skipped.extend(skipped)
    result.repeats = repeats
    result.record(meta)


def _distinct(files: list[EmbeddedFile]) -> tuple[list[EmbeddedFile], dict[str, int]]:
    """Each object's bytes once: a file pasted N times is parsed once, its references counted."""
    first: dict[bytes, EmbeddedFile] = {}
    repeats: dict[str, int] = {}
    for item in files:
        digest = hashlib.sha256(item.data).digest()
        if digest in first:
            name = first[digest].name
            repeats[name] = repeats.get(name, 1) + 1
        else:
            first[digest] = item
    return list(first.values()), repeats


def _add_flow(builder: BlockBuilder, flow: Flow, deadline: Deadline, extra: dict[str, Any]) -> None:
    for index, item in enumerate(flow.items):
        if index % 1024 == 0:
            deadline.check("RTF blocks")
        if isinstance(item, Table):
            _add_table(builder, item, extra)
        elif item.heading_level is not None and not extra:
            builder.heading(item.text, item.heading_level)
        elif item.list_marker is not None:
            text = clean_text(f"{item.list_marker} {item.text}")
            builder.add(BlockKind.LIST, text, marker=item.list_marker, **extra)
        elif item.list_item:  # a list paragraph whose marker only the list table knows
            builder.add(BlockKind.LIST, clean_text(item.text), **extra)
        else:
            builder.paragraph(item.text, **extra)


def _add_table(builder: BlockBuilder, table: Table, extra: dict[str, Any]) -> None:
    rows = [[clean_text(cell, keep_newlines=True) for cell in row] for row in table.rows]
    width = max(len(row) for row in rows)
    rows = [row + [""] * (width - len(row)) for row in rows]
    header = rows[0] if len(rows) > 1 else None
    builder.table(rows[1:] if header else rows, header, **extra)
