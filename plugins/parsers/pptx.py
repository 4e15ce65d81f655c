"""PPTX (python-pptx): per slide, the title as a heading, then text frames, tables, charts and
the speaker notes, in reading order (top-to-bottom, left-to-right), each positioned by slide
number, then the files embedded on the slide (:mod:`._ooxml_embedded`).

Charts become tables of their cached data (:mod:`._ooxml_charts`); Strict OOXML packages are
read through a Transitional copy (:mod:`._ooxml_strict`).
"""

from __future__ import annotations

import io
import zipfile
from typing import Any

from lxml import etree

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits, clean_text
from plugins.parsers._ooxml import charge_xml_parts, check_zip, repair_relationships, xml_error
from plugins.parsers._ooxml_charts import add_chart_block
from plugins.parsers._ooxml_embedded import PackageEmbeds
from plugins.parsers._ooxml_strict import to_transitional
from plugins.parsers._tabular import _looks_like_header
from plugins.parsers.registry import ParseContext, register_parser
from plugins.parsers.sniff import PPTX

__all__ = ["parse_pptx"]

# ECMA-376 Part 1, 21.1.2.2.7 (a:pPr lvl): paragraph levels are 0..8
_MAX_LEVEL = 8


def _shapes_in_order(shapes: Any) -> list[Any]:
    def key(shape: Any) -> tuple[int, int]:
        return (shape.top if shape.top is not None else 0, shape.left if shape.left is not None else 0)

    return sorted(shapes, key=key)


def _level(para: Any) -> int:
    """The paragraph's indent level clamped to 0..8 (a lossless normalisation of the text).

    python-pptx returns ``lvl`` unvalidated: ``lvl="1000000000"`` was two billion spaces.
    """
    try:
        return max(0, min(int(para.level), _MAX_LEVEL))
    except (ValueError, TypeError):  # not a number at all: python-pptx's int() refuses it
        return 0


def _frame_blocks(frame: Any, builder: BlockBuilder, pos: list[Position]) -> None:
    lines: list[str] = []
    bulleted = False
    for para in frame.paragraphs:
        text = clean_text("".join(run.text for run in para.runs) or para.text)
        if not text:
            continue
        level = _level(para)
        if level:
            bulleted = True
        lines.append(f"{'  ' * level}{text}")
    if not lines:
        return
    if bulleted or (len(lines) > 1 and all(len(line) < 200 for line in lines)):
        builder.add(
            BlockKind.LIST,
            "\n".join(
                f"- {line.lstrip()}"
                if not line.startswith(" ")
                else f"{line[: len(line) - len(line.lstrip())]}- {line.lstrip()}"
                for line in lines
            ),
            pos,
        )
    else:
        builder.paragraph("\n".join(lines), pos)


def _shape(shape: Any, builder: BlockBuilder, pos: list[Position], title_id: int | None, deadline: Deadline) -> None:
    if title_id is not None and shape.shape_id == title_id:
        return
    if shape.shape_type is not None and int(shape.shape_type) == 6:  # MSO_SHAPE_TYPE.GROUP
        for child in _shapes_in_order(shape.shapes):
            _shape(child, builder, pos, title_id, deadline)
        return
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = [[clean_text(cell.text) for cell in row.cells] for row in shape.table.rows]
        rows = [r for r in rows if any(r)]
        if not rows:
            return
        first_is_header = shape.table.first_row or (len(rows) >= 2 and _looks_like_header(rows[0], rows[1]))
        header, body = (rows[0], rows[1:]) if first_is_header and len(rows) > 1 else (None, rows)
        builder.table(body, header, pos)
        return
    if getattr(shape, "has_chart", False) and shape.has_chart:
        add_chart_block(builder, shape.chart_part._element, deadline, pos)
        return
    if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        _frame_blocks(shape.text_frame, builder, pos)


@register_parser("pptx", "1.1", (PPTX,), ("pptx", "ppsx", "pptm"))
def parse_pptx(data: bytes, ctx: ParseContext) -> ParsedDocument:
    from pptx import Presentation  # python-pptx is heavy; loaded by the first .pptx only

    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    zf = check_zip(data, limits, "pptx")
    # python-pptx parses every XML part (slides, layouts, masters, notes) when it opens the file
    charge_xml_parts(zf, limits, "pptx")
    data, zf = to_transitional(data, zf, limits, deadline, "pptx")
    data = repair_relationships(data, zf)
    try:
        prs = Presentation(io.BytesIO(data))
    except etree.XMLSyntaxError as exc:
        raise xml_error(exc, "pptx") from exc
    except (KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"pptx: {type(exc).__name__}: {exc}") from exc
    builder = BlockBuilder(limits.max_blocks, limits.max_chars)
    embeds = PackageEmbeds(zf, limits, deadline, ctx.options)
    n = 0
    for n, slide in enumerate(prs.slides, start=1):
        if n > limits.max_pages:
            raise ParseError(ParseErrorCode.TOO_LARGE, f"pptx: more than {limits.max_pages} slides")
        deadline.check(f"slide {n}")
        pos = [Position(slide=n)]
        title_shape = slide.shapes.title
        title = (
            clean_text(title_shape.text_frame.text) if title_shape is not None and title_shape.has_text_frame else ""
        )
        builder.heading(title or f"Slide {n}", 1, pos, slide_title=bool(title))
        for shape in _shapes_in_order(slide.shapes):
            _shape(shape, builder, pos, title_shape.shape_id if title_shape is not None else None, deadline)
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            if notes is not None and notes.text.strip():
                builder.add(BlockKind.PARAGRAPH, clean_text(notes.text, keep_newlines=True), pos, notes=True)
        # files embedded on the slide follow its own blocks, under its heading
        embeds.add_to(builder, embeds.files_of(str(slide.part.partname), f"slide {n}"))
    if not any(b.kind != BlockKind.HEADING or b.metadata.get("slide_title") for b in builder.blocks):
        raise ParseError(ParseErrorCode.EMPTY, "pptx: no text on any slide")
    props = prs.core_properties
    meta: dict[str, Any] = {"slides": n}
    embeds.record(meta)
    if props.author:
        meta["author"] = props.author
    return ParsedDocument(blocks=builder.blocks, title=props.title or None, media_type=PPTX, metadata=meta)
