"""OpenDocument text content (ODF 1.2/1.3 part 1, chapters 5 and 9) into blocks.

Shared by ODT bodies, text boxes on ODP slides, header/footer content of master pages and
embedded ODF objects: :class:`OdfWalker` turns block-level elements (headings, paragraphs,
lists, tables, sections, frames) into :class:`BlockBuilder` blocks, :func:`inline_text` the
phrasing content of one paragraph into its text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from lxml import etree

from include.contract import BlockKind, Position
from plugins.parsers._common import BlockBuilder, Deadline, clean_text
from plugins.parsers._tabular import CellBudget, _looks_like_header

__all__ = ["NS", "InlineExtras", "OdfWalker", "cell_text", "inline_text", "qname", "repeat_count", "rows_of"]

NS = {
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "draw": "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0",
    "style": "urn:oasis:names:tc:opendocument:xmlns:style:1.0",
    "presentation": "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0",
    "svg": "urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0",
    "xlink": "http://www.w3.org/1999/xlink",
    "dc": "http://purl.org/dc/elements/1.1/",
    "meta": "urn:oasis:names:tc:opendocument:xmlns:meta:1.0",
    "manifest": "urn:oasis:names:tc:opendocument:xmlns:manifest:1.0",
    "fo": "urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0",
}


def qname(prefixed: str) -> str:
    """``"text:p"`` -> ``"{urn:...:text:1.0}p"`` (lxml's Clark notation)."""
    prefix, local = prefixed.split(":", 1)
    return f"{{{NS[prefix]}}}{local}"


_P, _H, _S, _TAB, _BR = qname("text:p"), qname("text:h"), qname("text:s"), qname("text:tab"), qname("text:line-break")
_NOTE, _NOTE_BODY, _NOTE_CLASS = qname("text:note"), qname("text:note-body"), qname("text:note-class")
_LIST, _LIST_ITEM, _LIST_HEADER = qname("text:list"), qname("text:list-item"), qname("text:list-header")
_TABLE, _ROW, _CELL, _COVERED = (
    qname("table:table"),
    qname("table:table-row"),
    qname("table:table-cell"),
    qname("table:covered-table-cell"),
)
_HEADER_ROWS = qname("table:table-header-rows")
_ROW_GROUPS = frozenset(qname(t) for t in ("table:table-rows", "table:table-row-group", "table:table-header-rows"))
_FRAME, _TEXT_BOX, _OBJECT, _OBJECT_OLE, _IMAGE = (
    qname("draw:frame"),
    qname("draw:text-box"),
    qname("draw:object"),
    qname("draw:object-ole"),
    qname("draw:image"),
)
_HREF = qname("xlink:href")
_COLS_REPEATED, _ROWS_REPEATED = qname("table:number-columns-repeated"), qname("table:number-rows-repeated")
_OUTLINE_LEVEL = qname("text:outline-level")
# drawing shapes that may carry text paragraphs directly (ODF 1.2 part 1, 10.3 and 10.5)
_SHAPES = frozenset(
    qname(f"draw:{t}")
    for t in ("rect", "custom-shape", "ellipse", "polygon", "polyline", "path", "line", "connector", "caption", "g")
)
# inline content that is not the paragraph's text: alt text, comments, tracked deletions,
# reference marks' metadata (5.5 change tracking, 14.1 annotations)
_INLINE_SKIP = frozenset(
    qname(t)
    for t in (
        "svg:title",
        "svg:desc",
        "office:annotation",
        "office:annotation-end",
        "text:tracked-changes",
        "text:change",
        "text:change-start",
        "text:change-end",
    )
)
# generated or declarative content: an index body repeats the headings (8.2, 8.3), the
# declarations hold no text (7.4, 7.7), forms are controls (13)
_BLOCK_SKIP = frozenset(
    qname(t)
    for t in (
        "text:table-of-content",
        "text:illustration-index",
        "text:table-index",
        "text:object-index",
        "text:user-index",
        "text:alphabetical-index",
        "text:bibliography",
        "text:tracked-changes",
        "text:sequence-decls",
        "text:variable-decls",
        "text:user-field-decls",
        "text:dde-connection-decls",
        "office:forms",
        "office:annotation",
        "table:table-columns",
        "table:table-column",
        "table:table-column-group",
        "table:table-header-columns",
        "table:named-expressions",
        "table:database-ranges",
        "table:content-validations",
        "table:calculation-settings",
        "presentation:notes",
        "draw:page-thumbnail",
        "svg:title",
        "svg:desc",
    )
)
_MAX_REPEAT = 1 << 20  # a repeat attribute beyond this is charged as this many (still refused by budget)


def repeat_count(el: etree._Element, attr: str) -> int:
    """A ``number-*-repeated`` attribute as a positive int (1 when absent or malformed)."""
    raw = el.get(attr)
    if raw is None:
        return 1
    try:
        return max(1, min(int(raw), _MAX_REPEAT))
    except ValueError:
        return 1


@dataclass(slots=True)
class InlineExtras:
    """What a paragraph carries besides its text: notes (text, class) and anchored frames."""

    notes: list[tuple[str, str]] = field(default_factory=list)
    frames: list[etree._Element] = field(default_factory=list)


def inline_text(el: etree._Element, extras: InlineExtras | None = None) -> str:
    """The text of a paragraph's phrasing content (ODF 1.2 part 1, 6.1): spans, links, fields.

    ``text:s`` and ``text:tab`` stand for whitespace (6.1.3, 6.1.4); notes and frames anchored
    in the paragraph are handed back in ``extras`` to become their own blocks after it.
    """
    parts: list[str] = []
    _inline(el, parts, extras)
    return "".join(parts)


def _inline(el: etree._Element, parts: list[str], extras: InlineExtras | None) -> None:
    if el.text:
        parts.append(el.text)
    for child in el:
        tag = child.tag
        if tag == _S:
            parts.append(" ")
        elif tag == _TAB:
            parts.append("\t")
        elif tag == _BR:
            parts.append("\n")
        elif tag == _NOTE:
            if extras is not None:
                body = child.find(_NOTE_BODY)
                if body is not None:
                    text = " ".join(inline_text(p) for p in body.iter(_P, _H))
                    extras.notes.append((text, child.get(_NOTE_CLASS) or "footnote"))
        elif tag == _FRAME or tag in _SHAPES:
            if extras is not None:
                extras.frames.append(child)
        elif isinstance(tag, str) and tag not in _INLINE_SKIP:
            _inline(child, parts, extras)
        if child.tail:
            parts.append(child.tail)


def rows_of(parent: etree._Element, in_header: bool) -> Iterator[tuple[bool, etree._Element]]:
    """The ``table:table-row`` children of a table, through row groups (9.1.4-9.1.9), not
    those of tables nested in its cells."""
    for child in parent:
        if child.tag == _ROW:
            yield in_header, child
        elif child.tag in _ROW_GROUPS:
            yield from rows_of(child, in_header or child.tag == _HEADER_ROWS)


def _paragraphs(el: etree._Element) -> Iterator[etree._Element]:
    """The paragraphs and headings under ``el`` (lists, sections), not those of comments."""
    for child in el:
        if child.tag in (_P, _H):
            yield child
        elif isinstance(child.tag, str) and child.tag not in _BLOCK_SKIP:
            yield from _paragraphs(child)


def cell_text(cell: etree._Element) -> str:
    """A table cell's text: its paragraphs (and those of lists inside it), one per line."""
    return clean_text("\n".join(inline_text(p) for p in _paragraphs(cell)), keep_newlines=True)


# called for each draw:object / draw:object-ole / draw:image: (element, href, position)
ObjectHandler = Callable[[etree._Element, str, list[Position]], None]


class OdfWalker:
    """Block-level ODF content into blocks, in document order."""

    def __init__(
        self,
        builder: BlockBuilder,
        deadline: Deadline,
        cells: CellBudget,
        on_object: ObjectHandler,
        header_option: bool | None = None,
    ) -> None:
        self.builder = builder
        self.deadline = deadline
        self.cells = cells
        self.on_object = on_object
        self.header_option = header_option
        self._seen = 0

    def walk(self, parent: etree._Element, pos: list[Position], **metadata: Any) -> None:
        for child in parent:
            self.block(child, pos, **metadata)

    def block(self, el: etree._Element, pos: list[Position], **metadata: Any) -> None:
        self._seen += 1
        if self._seen % 512 == 0:
            self.deadline.check("odf content")
        tag = el.tag
        if not isinstance(tag, str) or tag in _BLOCK_SKIP:
            return
        if tag == _H:
            extras = InlineExtras()
            text = inline_text(el, extras)
            level = repeat_count(el, _OUTLINE_LEVEL)  # 1 when absent (ODF 1.2 part 1, 19.844.4)
            if clean_text(text):
                self.builder.heading(text, level, pos, **metadata)
            self._extras(extras, pos, metadata)
        elif tag == _P:
            extras = InlineExtras()
            self.builder.paragraph(inline_text(el, extras), pos, **metadata)
            self._extras(extras, pos, metadata)
        elif tag == _LIST:
            self._list(el, pos, metadata)
        elif tag == _TABLE:
            self.table(el, pos, metadata)
        elif tag == _FRAME or tag in _SHAPES:
            self._frame(el, pos, metadata)
        elif tag in (_OBJECT, _OBJECT_OLE, _IMAGE):
            self.on_object(el, (el.get(_HREF) or "").strip(), pos)
        else:  # sections, text boxes, note bodies, change regions, unknown containers: their text counts
            self.walk(el, pos, **metadata)

    def _extras(self, extras: InlineExtras, pos: list[Position], metadata: dict[str, Any]) -> None:
        for frame in extras.frames:
            self._frame(frame, pos, metadata)
        for text, note_class in extras.notes:
            self.builder.paragraph(text, pos, **metadata, note=note_class)

    def _frame(self, frame: etree._Element, pos: list[Position], metadata: dict[str, Any]) -> None:
        # a frame holds one of a text box, an object, an image or a table (ODP), alternatives of
        # one content (10.4.2): the first object/image wins, its replacement images are skipped
        seen_object = False
        for child in frame:
            if child.tag in (_OBJECT, _OBJECT_OLE, _IMAGE):
                if seen_object:
                    continue
                seen_object = True
            self.block(child, pos, **metadata)

    def _list(self, el: etree._Element, pos: list[Position], metadata: dict[str, Any]) -> None:
        lines: list[str] = []
        extras = InlineExtras()
        self._list_lines(el, 0, lines, extras)
        if lines:
            self.builder.add(BlockKind.LIST, "\n".join(lines), pos, **metadata)
        self._extras(extras, pos, metadata)

    def _list_lines(self, el: etree._Element, depth: int, lines: list[str], extras: InlineExtras) -> None:
        indent = "  " * min(depth, 8)  # as the PPTX parser: nesting shown up to level 8
        for item in el:
            if item.tag not in (_LIST_ITEM, _LIST_HEADER):
                continue
            for child in item:
                if child.tag == _LIST:
                    self._list_lines(child, depth + 1, lines, extras)
                elif child.tag in (_P, _H):
                    text = clean_text(inline_text(child, extras))
                    if text:
                        lines.append(f"{indent}- {text}")
                elif child.tag == _TABLE:
                    lines.extend(f"{indent}  {row}" for row in self._rows_text(child))

    def _rows_text(self, table: etree._Element) -> Iterator[str]:
        for _, cells in self._table_rows(table):
            if any(cells):
                yield "\t".join(cells)

    def _table_rows(self, table: etree._Element) -> Iterator[tuple[bool, list[str]]]:
        """``(in header rows, cells)`` per row; repeats expanded only as far as the cell budget allows."""
        for in_header, row in rows_of(table, False):
            cells = self._row_cells(row)
            times = repeat_count(row, _ROWS_REPEATED)
            if not any(cells):
                yield in_header, []
                continue
            self.cells.charge(len(cells) * (times - 1), "repeated table rows")
            for _ in range(times):
                yield in_header, list(cells)

    def _row_cells(self, row: etree._Element) -> list[str]:
        cells: list[str] = []
        pending_empty = 0
        for cell in row:
            if cell.tag not in (_CELL, _COVERED):
                continue
            times = repeat_count(cell, _COLS_REPEATED)
            text = cell_text(cell) if cell.tag == _CELL else ""
            if not text:
                pending_empty += times  # trailing empty repeats are dropped, never materialised
                continue
            self.cells.charge(pending_empty + times, "table row")
            cells.extend([""] * pending_empty)
            cells.extend([text] * times)
            pending_empty = 0
        return cells

    def table(self, el: etree._Element, pos: list[Position], metadata: dict[str, Any]) -> None:
        self.deadline.check("odf table")
        header: list[str] | None = None
        rows: list[list[str]] = []
        for in_header, cells in self._table_rows(el):
            if in_header and header is None and any(cells):
                header = cells
            elif cells:
                rows.append(cells)
        if header is None and rows:
            first_is_header = self.header_option
            if first_is_header is None:
                first_is_header = len(rows) >= 2 and _looks_like_header(rows[0], rows[1])
            if first_is_header and len(rows) > 1:
                header, rows = rows[0], rows[1:]
        self.builder.table(rows, header, pos, **metadata)
