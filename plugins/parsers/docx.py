"""DOCX: python-docx opens the package; the body is walked as XML to keep what it lacks.

Body order (paragraphs and tables interleaved, content controls and custom XML unwrapped);
headings by outline level or (inherited) heading style; numbered and bulleted lists with their
markers; tables with rows and a header row (``w:tblHeader`` or auto-detected), merged cells
filled, nested tables kept as text in their cell; hyperlinks (text kept, targets in block
metadata); images as ``[image: alt text]`` references; text boxes after their paragraph;
tracked changes with insertions kept and deletions dropped; footnotes and endnotes at the end;
title/author/dates from core properties. Relationships pointing at missing parts (``NULL``) are
repaired before python-docx sees the file.

Sizes the file controls are bounded per document: list levels are clamped to OOXML's 0..8 and
numbering starts to Word's 32767 (see :mod:`._docx_styles`), all XML parts python-docx will
parse count together against ``xml_max_total``, and table cells (vertical-merge copies
included) and the output text against ``max_chars``.
"""

from __future__ import annotations

import contextlib
import io
import zipfile
from collections.abc import Iterator
from typing import Any

from lxml import etree

from include.contract import Block, BlockKind, ParsedDocument, ParseError, ParseErrorCode
from plugins.parsers._common import BlockBuilder, Deadline, Limits, clean_text, parse_xml
from plugins.parsers._docx_styles import Numbering, Styles, W, clamp_ilvl, wval
from plugins.parsers._ooxml import charge_xml_parts, check_zip, repair_relationships, xml_error
from plugins.parsers._ooxml_charts import C_NS, add_chart_block
from plugins.parsers._ooxml_embedded import PackageEmbeds
from plugins.parsers._ooxml_strict import to_transitional
from plugins.parsers._tabular import _looks_like_header, header_option
from plugins.parsers.registry import ParseContext, register_parser
from plugins.parsers.sniff import DOCX

__all__ = ["parse_docx"]

_W = f"{{{W}}}"
_R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
_WP = "{http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing}"
_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_PIC = "{http://schemas.openxmlformats.org/drawingml/2006/picture}"
_SKIP = frozenset(
    {
        "pPr",
        "rPr",
        "del",
        "moveFrom",
        "delText",
        "instrText",
        "sectPr",
        "tblPr",
        "trPr",
        "tcPr",
        "fldData",
        "commentReference",
        "footnoteReference",
        "endnoteReference",
        "annotationRef",
    }
)


def _local(el: etree._Element) -> str:
    tag = el.tag
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


class _Walker:
    def __init__(
        self,
        part: Any,
        styles: Styles,
        numbering: Numbering,
        builder: BlockBuilder,
        deadline: Deadline,
        header_mode: bool | None,
        max_chars: int,
    ) -> None:
        self.use_part(part)
        self.styles = styles
        self.numbering = numbering
        self.b = builder
        self.deadline = deadline
        self.header_mode = header_mode
        self._list: list[str] = []
        self._list_ordered = False
        self._list_num: str | None = None
        self._count = 0
        # table cell text, copies made by vertical merges included: they are joined into one
        # string per cell or table before a block exists to count them
        self._cell_chars = 0
        self._max_chars = max_chars
        self.images: list[dict[str, str]] = []
        self._charts: list[str] = []  # r:ids of charts met in the current paragraph or table

    def use_part(self, part: Any) -> None:
        """Walk the story of ``part`` (the body, a header ...): r:ids resolve against its relationships."""
        self.part = part
        self.rels = {rid: (rel.target_ref, rel.is_external) for rid, rel in part.rels.items()}

    def flush_charts(self) -> None:
        """The charts of the element just walked, as tables after it."""
        for rid in self._charts:
            rel = self.part.rels.get(rid)
            if rel is not None and not rel.is_external:
                root = parse_xml(rel.target_part.blob, "docx chart")
                add_chart_block(self.b, root, self.deadline)
        self._charts = []

    # ------------------------------------------------------------------ body
    def body(self, container: etree._Element) -> None:
        for child in container:
            self._count += 1
            if self._count % 500 == 0:
                self.deadline.check("docx")
            tag = _local(child)
            if tag == "p":
                self.paragraph(child)
            elif tag == "tbl":
                self.flush_list()
                self.table(child)
            elif tag == "sdt":
                content = child.find(f"{_W}sdtContent")
                if content is not None:
                    self.body(content)
            elif tag in ("customXml", "ins", "smartTag", "moveTo", "AlternateContent", "Choice"):
                self.body(_choice(child) if tag == "AlternateContent" else child)
            if self._charts:
                self.flush_list()
                self.flush_charts()
        self.flush_list()

    def flush_list(self) -> None:
        if self._list:
            self.b.add(BlockKind.LIST, "\n".join(self._list), ordered=self._list_ordered)
            self._list = []

    def paragraph(self, p: etree._Element) -> None:
        ppr = p.find(f"{_W}pPr")
        style = wval(ppr, "pStyle") or self.styles.default_paragraph
        parts: list[str] = []
        boxes: list[etree._Element] = []
        links: list[dict[str, str]] = []
        self.inline(p, parts, boxes, links)
        text = clean_text("".join(parts), keep_newlines=True)
        level = self.styles.heading_level(style, wval(ppr, "outlineLvl"))
        numpr = ppr.find(f"{_W}numPr") if ppr is not None else None
        num_id, ilvl = (wval(numpr, "numId"), wval(numpr, "ilvl")) if numpr is not None else (None, None)
        if num_id is None:
            num_id, style_ilvl = self.styles.numbering(style)
            ilvl = ilvl if ilvl is not None else (str(style_ilvl) if style_ilvl is not None else None)
        extra: dict[str, Any] = {"links": links} if links else {}
        if text and level is not None:
            self.flush_list()
            self.b.heading(text, level, **extra)
        elif text and num_id not in (None, "0"):
            depth = clamp_ilvl(ilvl) or 0
            marker, ordered = self.numbering.marker(num_id, depth)
            if self._list and num_id != self._list_num and depth == 0:
                self.flush_list()  # a different list starts
            if not self._list:
                self._list_ordered = ordered
                self._list_num = num_id
            self._list.append(f"{'  ' * depth}{marker} {text}")
        elif text:
            self.flush_list()
            self.b.paragraph(text, **extra)
        for box in boxes:
            self.body(box)

    # ------------------------------------------------------------------ inline content
    def inline(
        self, el: etree._Element, out: list[str], boxes: list[etree._Element], links: list[dict[str, str]]
    ) -> None:
        for child in el:
            tag = _local(child)
            if not tag or tag in _SKIP:
                continue
            if tag == "t":
                out.append(child.text or "")
            elif tag == "tab":
                out.append("\t")
            elif tag in ("br", "cr"):
                out.append("\n")
            elif tag == "noBreakHyphen":
                out.append("-")
            elif tag == "sym":
                ch = child.get(f"{_W}char")
                if ch:
                    with contextlib.suppress(ValueError):
                        out.append(chr(int(ch, 16)))
            elif tag == "hyperlink":
                start = len(out)
                self.inline(child, out, boxes, links)
                rid = child.get(f"{_R}id")
                target = self.rels.get(rid, ("", True))[0] if rid else ""
                if not target and child.get(f"{_W}anchor"):
                    target = "#" + child.get(f"{_W}anchor", "")
                label = clean_text("".join(out[start:]))
                if target and label:
                    links.append({"text": label, "target": target})
            elif tag in ("drawing", "pict", "object"):
                self.drawing(child, out, boxes)
            elif tag == "AlternateContent":
                choice = _choice(child)
                if choice is not None:
                    self.inline(choice, out, boxes, links)
            elif tag == "txbxContent":
                boxes.append(child)
            else:  # r, ins, smartTag, sdt, sdtContent, fldSimple, customXml, oMath, m:r ...
                self.inline(child, out, boxes, links)

    def drawing(self, el: etree._Element, out: list[str], boxes: list[etree._Element]) -> None:
        boxes.extend(el.iter(f"{_W}txbxContent"))
        self._charts.extend(c.get(f"{_R}id") or "" for c in el.iter(f"{{{C_NS}}}chart"))
        for doc_pr in el.iter(f"{_WP}docPr"):
            blip = next(el.iter(f"{_A}blip"), None)
            if blip is None:
                continue  # a shape or text box, not a picture
            alt = clean_text(doc_pr.get("descr") or doc_pr.get("title") or "")
            pic_name = next((c.get("name") for c in el.iter(f"{_PIC}cNvPr") if c.get("name")), None)
            target = self.rels.get(blip.get(f"{_R}embed") or "", ("", False))[0]
            self.images.append({"alt": alt, "name": pic_name or doc_pr.get("name") or "", "target": target})
            out.append(f" [image: {alt or pic_name or doc_pr.get('name') or 'picture'}] ")

    # ------------------------------------------------------------------ tables
    def table(self, tbl: etree._Element) -> None:
        rows, header_row = self._table_rows(tbl)
        if not rows:
            return
        header = None
        if (
            header_row
            or (self.header_mode is True)
            or (self.header_mode is None and len(rows) >= 2 and _looks_like_header(rows[0], rows[1]))
        ):
            header = rows[0]
            rows = rows[1:]
        self.b.table(rows, header)

    def _table_rows(self, tbl: etree._Element) -> tuple[list[list[str]], bool]:
        rows: list[list[str]] = []
        header_row = False
        above: dict[int, str] = {}
        for i, tr in enumerate(_children(tbl, "tr")):
            trpr = tr.find(f"{_W}trPr")
            if i == 0 and trpr is not None and trpr.find(f"{_W}tblHeader") is not None:
                val = wval(trpr, "tblHeader")
                header_row = val not in ("0", "false")
            cells: list[str] = []
            for tc in _children(tr, "tc"):
                tcpr = tc.find(f"{_W}tcPr")
                span = wval(tcpr, "gridSpan")
                span_n = int(span) if span and span.isdigit() else 1
                vmerge = tcpr.find(f"{_W}vMerge") if tcpr is not None else None
                col = len(cells)
                if vmerge is not None and vmerge.get(f"{_W}val") in (None, "continue"):
                    text = above.get(col, "")
                else:
                    text = self._cell_text(tc)
                self._charge_cell(text)
                cells.append(text)
                cells.extend([""] * (min(span_n, 64) - 1))
                above[col] = text
            if any(c for c in cells):
                rows.append(cells)
        return rows, header_row

    def _charge_cell(self, text: str) -> None:
        self._cell_chars += len(text)
        if self._cell_chars > self._max_chars:
            raise ParseError(
                ParseErrorCode.TOO_LARGE, f"docx: table cells exceed {self._max_chars} characters (merged cells copied)"
            )
        self._count += 1
        if self._count % 500 == 0:
            self.deadline.check("docx table")

    def _cell_text(self, tc: etree._Element) -> str:
        lines: list[str] = []
        for child in _flatten(tc):
            tag = _local(child)
            if tag == "p":
                parts: list[str] = []
                boxes: list[etree._Element] = []
                self.inline(child, parts, boxes, [])
                text = clean_text("".join(parts))
                if text:
                    lines.append(text)
            elif tag == "tbl":  # nested table: its rows as text inside the cell
                nested, _ = self._table_rows(child)
                lines.extend(" | ".join(c for c in row if c) for row in nested)
        return "\n".join(lines)


def _choice(alt: etree._Element) -> etree._Element | None:
    """mc:AlternateContent: the first mc:Choice (mc:Fallback duplicates it for old readers)."""
    choice = alt.find(f"{_MC}Choice")
    return choice if choice is not None else alt.find(f"{_MC}Fallback")


def _children(el: etree._Element, name: str) -> Iterator[etree._Element]:
    """Direct children named ``name``, looking through content controls / custom XML wrappers."""
    for child in el:
        tag = _local(child)
        if tag == name:
            yield child
        elif tag in ("sdt", "customXml", "sdtContent", "ins"):
            inner = child.find(f"{_W}sdtContent") if tag == "sdt" else child
            if inner is not None:
                yield from _children(inner, name)


def _flatten(tc: etree._Element) -> Iterator[etree._Element]:
    for child in tc:
        tag = _local(child)
        if tag in ("p", "tbl"):
            yield child
        elif tag in ("sdt", "customXml", "sdtContent", "ins"):
            inner = child.find(f"{_W}sdtContent") if tag == "sdt" else child
            if inner is not None:
                yield from _flatten(inner)


def _part_xml(document: Any, reltype_suffix: str) -> etree._Element | None:
    for rel in document.part.rels.values():
        if rel.is_external or not rel.reltype.endswith(reltype_suffix):
            continue
        part = rel.target_part
        element = getattr(part, "element", None)
        if element is not None:
            return element
        return parse_xml(part.blob, reltype_suffix)
    return None


def _notes(root: etree._Element | None, walker: _Walker, kind: str) -> None:
    """Footnotes, endnotes or comments (``w:comment``, ECMA-376 Part 1, 17.13.4.2) as paragraphs."""
    if root is None:
        return
    for note in root:
        if note.get(f"{_W}type") in ("separator", "continuationSeparator", "continuationNotice"):
            continue
        extra = {"author": note.get(f"{_W}author")} if kind == "comment" and note.get(f"{_W}author") else {}
        for p in note.iter(f"{_W}p"):
            parts: list[str] = []
            walker.inline(p, parts, [], [])
            walker.b.paragraph("".join(parts), note=kind, **extra)


def _header_footer_parts(document: Any) -> list[tuple[str, Any]]:
    """``(kind, part)`` of each distinct header and footer, in the order sections refer to them.

    Every section names its headers and footers (``w:headerReference``/``w:footerReference``,
    ECMA-376 Part 1, 17.10.5); a section that repeats its predecessor's refers to the same part,
    so each part is read once however many sections show it.
    """
    seen: set[str] = set()
    out: list[tuple[str, Any]] = []
    refs = [
        (kind, ref.get(f"{_R}id") or "")
        for sect in document.element.body.iter(f"{_W}sectPr")
        for ref in sect
        if (kind := {"headerReference": "header", "footerReference": "footer"}.get(_local(ref)))
    ]
    # then the headers and footers no section names (a body without w:sectPr): Word shows none,
    # but their text is the document's, and other readers (Tika) report it
    refs += [(rel.reltype.rsplit("/", 1)[-1], rid) for rid, rel in document.part.rels.items()]
    for kind, rid in refs:
        rel = document.part.rels.get(rid)
        if kind not in ("header", "footer") or rel is None or rel.is_external:
            continue
        part = rel.target_part
        if str(part.partname) not in seen and getattr(part, "element", None) is not None:
            seen.add(str(part.partname))
            out.append((kind, part))
    return out


def _page_furniture(document: Any, walker: _Walker, main: BlockBuilder, limits: Limits) -> dict[str, list[Block]]:
    """Header and footer blocks (``metadata["part"]``), each distinct text once, by kind.

    Walked with a builder of their own, so they sit under no heading of the body; their text
    counts against the document's ``max_chars``.
    """
    out: dict[str, list[Block]] = {"header": [], "footer": []}
    texts: set[tuple[str, str]] = set()
    body_part, body_builder = walker.part, walker.b
    try:
        for kind, part in _header_footer_parts(document):
            walker.b = BlockBuilder(limits.max_blocks, limits.max_chars)
            walker.use_part(part)
            walker.body(part.element)
            for block in walker.b.blocks:
                if (kind, block.text) in texts:  # a first-page header like the default one
                    continue
                texts.add((kind, block.text))
                main.charge(len(block.text))
                block.metadata["part"] = kind
                out[kind].append(block)
    finally:
        walker.b = body_builder
        walker.use_part(body_part)
    return out


def _open(data: bytes, limits: Limits, deadline: Deadline) -> tuple[Any, zipfile.ZipFile]:
    import docx  # python-docx is heavy (lxml object classes); loaded by the first .docx only

    zf = check_zip(data, limits, "docx")
    if "word/document.xml" not in zf.namelist():
        raise ParseError(ParseErrorCode.CORRUPT, "docx: no word/document.xml main part")
    # python-docx parses every XML part of the package (headers and footers too) when it opens it
    charge_xml_parts(zf, limits, "docx")
    data, zf = to_transitional(data, zf, limits, deadline, "docx")
    data = repair_relationships(data, zf)
    try:
        return docx.Document(io.BytesIO(data)), zf
    except etree.XMLSyntaxError as exc:
        raise xml_error(exc, "docx") from exc
    except (KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"docx: {type(exc).__name__}: {exc}") from exc


def _metadata(document: Any, walker: _Walker) -> dict[str, Any]:
    props = document.core_properties
    meta: dict[str, Any] = {}
    for key in ("author", "subject", "keywords", "category", "last_modified_by", "language"):
        value = getattr(props, key, None)
        if value:
            meta[key] = value
    for key in ("created", "modified"):
        value = getattr(props, key, None)
        if value:
            meta[key] = value.isoformat()
    if walker.images:
        meta["images"] = walker.images
    return meta


@register_parser("docx", "1.1", (DOCX,), ("docx", "docm", "dotx"))
def parse_docx(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    document, zf = _open(data, limits, deadline)
    styles = Styles(_part_xml(document, "/styles"))
    numbering = Numbering(_part_xml(document, "/numbering"))
    builder = BlockBuilder(limits.max_blocks, limits.max_chars)
    header_mode = header_option(ctx.options.get("first_row_as_header", "auto"))
    walker = _Walker(document.part, styles, numbering, builder, deadline, header_mode, limits.max_chars)
    walker.body(document.element.body)
    # files embedded in the body follow it, before the notes (ECMA-376 places them in no page)
    embeds = PackageEmbeds(zf, limits, deadline, ctx.options)
    embeds.add_to(builder, embeds.files_of("word/document.xml", "document"))
    _notes(_part_xml(document, "/footnotes"), walker, "footnote")
    _notes(_part_xml(document, "/endnotes"), walker, "endnote")
    _notes(_part_xml(document, "/comments"), walker, "comment")
    furniture = _page_furniture(document, walker, builder, limits)
    # reading order: the page header, the body, the page footer
    blocks = [*furniture["header"], *builder.blocks, *furniture["footer"]]
    if not blocks:
        raise ParseError(ParseErrorCode.EMPTY, "no text content")
    meta = _metadata(document, walker)
    embeds.record(meta)
    title = document.core_properties.title or next((b.text for b in blocks if b.kind == BlockKind.HEADING), None)
    return ParsedDocument(blocks=blocks, title=title, media_type=DOCX, metadata=meta)
