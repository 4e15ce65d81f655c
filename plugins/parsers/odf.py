"""OpenDocument (ODF 1.2/1.3): text (ODT), spreadsheets (ODS), presentations (ODP), flat XML.

A package (ODF 1.2 part 3) is a zip whose ``content.xml`` holds the body, ``styles.xml`` the
master pages (headers, footers) and ``meta.xml`` the title and author; a flat XML document
(``.fodt``/``.fods``/``.fodp``, part 1, 3.1.2) is one ``office:document`` holding all three.

* ODT: headings (``text:h`` with its outline level), paragraphs, lists, tables (header rows as
  the header), notes (after their paragraph, ``metadata.note``), sections, text boxes in frames;
  then the text of the master pages' headers and footers (``metadata.page_region``). Generated
  indexes (a table of contents) are skipped: they repeat the headings.
* ODS: every visible sheet (hidden ones with option ``include_hidden_sheets``) as a heading and
  one table block per non-empty row, as the XLSX parser does; see :mod:`._odf_sheet`.
* ODP (and ODG drawings): one heading per slide (its title frame, else its name), then its
  frames in reading order (top to bottom, left to right), tables, and the speaker notes.
* Embedded objects: an ODF subdocument (``Object 1/content.xml``: a chart's data table, a
  spreadsheet in a slide) is read in place under a heading naming it; an embedded file (an OLE
  object, with option ``engines: {embedded_images: ocr}`` also images) goes through
  :func:`._embedded.parse_embedded`. A member that several objects reference is read and
  parsed at its first reference; the rest are counted (``metadata["embedded_repeats"]``).

A password-protected package (``manifest:encryption-data`` for ``content.xml``, part 3, 4.8)
raises ``ParseError(encrypted)``.
"""

from __future__ import annotations

import posixpath
import zipfile
from dataclasses import dataclass, field
from typing import Any

from lxml import etree

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, EmbedUsage, Limits, clean_text, parse_xml
from plugins.parsers._embedded import EmbeddedFile, cap_reason, embedded_images_wanted, parse_embedded
from plugins.parsers._odf_sheet import hidden_table_styles, sheet_rows
from plugins.parsers._odf_slides import slide_blocks
from plugins.parsers._odf_text import OdfWalker, qname
from plugins.parsers._ooxml import check_zip
from plugins.parsers._tabular import CellBudget, emit_rows, header_option
from plugins.parsers.registry import ParseContext, register_parser
from plugins.parsers.sniff import ODP, ODS, ODT

__all__ = ["parse_odf", "parse_odf_flat"]

FODT = "application/vnd.oasis.opendocument.text-flat-xml"
FODS = "application/vnd.oasis.opendocument.spreadsheet-flat-xml"
FODP = "application/vnd.oasis.opendocument.presentation-flat-xml"

_BODY, _META, _AUTO_STYLES, _MASTER_STYLES = (
    qname("office:body"),
    qname("office:meta"),
    qname("office:automatic-styles"),
    qname("office:master-styles"),
)
_TEXT, _SPREADSHEET, _PRESENTATION, _DRAWING, _CHART = (
    qname("office:text"),
    qname("office:spreadsheet"),
    qname("office:presentation"),
    qname("office:drawing"),
    qname("office:chart"),
)
_TABLE, _TABLE_NAME, _TABLE_STYLE = qname("table:table"), qname("table:name"), qname("table:style-name")
_MASTER_PAGE = qname("style:master-page")
# the page regions of a master page (ODF 1.2 part 1, 16.9-16.12), in the order a reader meets them
_REGIONS = tuple(
    (qname(f"style:{t}"), t) for t in ("header", "header-first", "header-left", "footer", "footer-first", "footer-left")
)
_DISPLAY = qname("style:display")
_MEDIA_BY_BODY = {_TEXT: ODT, _SPREADSHEET: ODS, _PRESENTATION: ODP, _DRAWING: ODP}
_MANIFEST_ENTRY, _ENCRYPTION_DATA, _FULL_PATH = (
    qname("manifest:file-entry"),
    qname("manifest:encryption-data"),
    qname("manifest:full-path"),
)


@dataclass(slots=True)
class _Package:
    """The parts of one ODF document (or of an embedded ODF object): parsed roots and raw members."""

    content: etree._Element
    styles: etree._Element | None
    meta: etree._Element | None
    zf: zipfile.ZipFile | None = None
    base: str = ""  # the object's folder inside the package ("Object 1/"), "" for the document


@dataclass(slots=True)
class _Reader:
    """One parse: its caps, its output and the embedded files found on the way."""

    ctx: ParseContext
    limits: Limits
    deadline: Deadline
    builder: BlockBuilder
    cells: CellBudget
    xml_left: int
    embedded: list[EmbeddedFile] = field(default_factory=list)
    embedded_bytes: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)  # embedded files left unread
    references: dict[str, int] = field(default_factory=dict)  # member -> objects pointing at it
    objects_read: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


def _read_member(reader: _Reader, zf: zipfile.ZipFile, name: str, required: bool) -> etree._Element | None:
    try:
        info = zf.getinfo(name)
    except KeyError:
        if required:
            raise ParseError(ParseErrorCode.CORRUPT, f"odf: no {name} in the package") from None
        return None
    # the XML parts of one document (objects included) count together against xml_max_total
    reader.xml_left -= info.file_size
    if reader.xml_left < 0:
        raise ParseError(ParseErrorCode.BOMB, f"odf: XML parts exceed xml_max_total at {name}")
    try:
        raw = zf.read(info)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"odf: cannot read {name}: {exc}") from exc
    return parse_xml(raw, f"odf {name}")


def _refuse_encrypted(zf: zipfile.ZipFile) -> None:
    try:
        manifest = zf.read("META-INF/manifest.xml")
    except (KeyError, zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError):
        return  # optional for reading (part 3, 3.2); a damaged one says nothing about encryption
    try:
        root = parse_xml(manifest, "odf manifest")
    except ParseError:
        return
    for entry in root.iter(_MANIFEST_ENTRY):
        if entry.find(_ENCRYPTION_DATA) is not None and (entry.get(_FULL_PATH) or "").endswith("content.xml"):
            raise ParseError(ParseErrorCode.ENCRYPTED, "odf: the document is password-protected")


def _open_package(reader: _Reader, zf: zipfile.ZipFile, base: str) -> _Package:
    content = _read_member(reader, zf, f"{base}content.xml", required=True)
    assert content is not None
    styles = _read_member(reader, zf, f"{base}styles.xml", required=False)
    meta = _read_member(reader, zf, f"{base}meta.xml", required=False)
    return _Package(content, styles, meta, zf, base)


def _body(pkg: _Package) -> etree._Element:
    body = pkg.content.find(_BODY)
    if body is None or len(body) == 0:
        raise ParseError(ParseErrorCode.CORRUPT, "odf: content.xml has no office:body")
    for child in body:
        if isinstance(child.tag, str):
            return child
    raise ParseError(ParseErrorCode.CORRUPT, "odf: empty office:body")


# --------------------------------------------------------------------------- objects


def _on_object(reader: _Reader, pkg: _Package) -> Any:
    """The walker's handler for ``draw:object`` / ``draw:object-ole`` / ``draw:image``."""

    def handle(el: etree._Element, href: str, pos: list[Position]) -> None:
        if pkg.zf is None or not href or "://" in href:
            return  # flat XML carries objects inline (read by the walker) or links outside
        name = posixpath.normpath(posixpath.join(pkg.base, href.removeprefix("./"))).lstrip("/")
        if el.tag == qname("draw:image") and not embedded_images_wanted(reader.ctx.options):
            return
        if name in reader.references:  # read and parsed at its first reference
            reader.references[name] += 1
            return
        reader.references[name] = 1
        if el.tag == qname("draw:object") and f"{name}/content.xml" in pkg.zf.NameToInfo:
            _read_object(reader, pkg.zf, name, pos)
            return
        _add_file(reader, pkg.zf, name, f"slide {pos[0].slide}" if pos and pos[0].slide else "")

    return handle


def _add_file(reader: _Reader, zf: zipfile.ZipFile, name: str, where: str) -> None:
    """Member ``name`` as an embedded file, unless the document's allowance has no room for it."""
    try:
        info = zf.getinfo(name)
        reason = cap_reason(reader.ctx.options, info.file_size, EmbedUsage(len(reader.embedded), reader.embedded_bytes))
        if reason:
            reader.skipped.append({"name": name, "reason": reason})
            return
        data = zf.read(info)
    except (KeyError, zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError):
        reader.meta.setdefault("missing_parts", []).append(name)
        return
    reader.embedded_bytes += len(data)
    reader.embedded.append(EmbeddedFile(name, data, where=where))


def _read_object(reader: _Reader, zf: zipfile.ZipFile, name: str, pos: list[Position]) -> None:
    """An embedded ODF object (``Object 1/``) read in place, one level deep only."""
    if reader.objects_read >= reader.limits.embed_max_files:
        return
    reader.objects_read += 1
    label = name.rsplit("/", 1)[-1]
    obj = _open_package(reader, zf, f"{name}/")
    reader.builder.heading(label, len(reader.builder.heading_path) + 1, pos, embedded_object=name)
    body = _body(obj)
    # objects inside an object are not followed: a chart in a chart is no real document's need
    walker = OdfWalker(reader.builder, reader.deadline, reader.cells, lambda *_: None, _header_opt(reader))
    if body.tag == _SPREADSHEET:
        _sheets(reader, obj, body)
    elif body.tag in (_PRESENTATION, _DRAWING):
        slide_blocks(body, walker, reader.deadline, reader.limits)
    else:  # text, chart (its data is a table:table, part 1, 11.1), formula
        walker.walk(body, pos, embedded_object=name)


# --------------------------------------------------------------------------- kinds


def _header_opt(reader: _Reader) -> bool | None:
    return header_option(reader.ctx.options.get("first_row_as_header", "auto"))


def _page_regions(reader: _Reader, pkg: _Package, walker: OdfWalker) -> None:
    """Headers and footers of the master pages in use (a region with ``style:display="false"`` is off)."""
    masters = pkg.styles.find(_MASTER_STYLES) if pkg.styles is not None else None
    if masters is None:
        return
    seen: set[str] = set()
    for page in masters.iter(_MASTER_PAGE):
        for tag, region in _REGIONS:
            el = page.find(tag)
            if el is None or el.get(_DISPLAY) == "false":
                continue
            mark = len(reader.builder.blocks)
            walker.walk(el, [], page_region=region)
            # the same footer on every master page is one block, not one per page style
            kept = []
            for block in reader.builder.blocks[mark:]:
                if block.text not in seen:
                    seen.add(block.text)
                    kept.append(block)
            del reader.builder.blocks[mark:]
            reader.builder.blocks.extend(kept)


def _sheets(reader: _Reader, pkg: _Package, body: etree._Element) -> None:
    include_hidden = bool(reader.ctx.options.get("include_hidden_sheets", False))
    hidden = hidden_table_styles(pkg.content.find(_AUTO_STYLES))
    names: list[str] = reader.meta.setdefault("sheets", [])
    skipped: list[str] = []
    for table in body.iter(_TABLE):
        if table.getparent() is not body:
            continue  # tables inside shapes or cells are not sheets
        name = table.get(_TABLE_NAME) or f"Sheet{len(names) + len(skipped) + 1}"
        if table.get(_TABLE_STYLE) in hidden and not include_hidden:
            skipped.append(name)
            continue
        mark = len(reader.builder.blocks)
        reader.builder.heading(name, len(reader.builder.heading_path) + 1, [Position(sheet=name)])
        emit_rows(
            reader.builder,
            sheet_rows(table, reader.cells, reader.deadline),
            sheet=name,
            first_row_as_header=_header_opt(reader),
            limits=reader.limits,
            deadline=reader.deadline,
            cells_budget=reader.cells,
        )
        if len(reader.builder.blocks) == mark + 1:  # an empty sheet: drop its lone heading
            reader.builder.blocks.pop()
        else:
            names.append(name)
    if skipped:
        reader.meta.setdefault("hidden_sheets_skipped", []).extend(skipped)


def _document(reader: _Reader, pkg: _Package) -> str:
    """Read the document's body into the builder; returns its media type."""
    body = _body(pkg)
    walker = OdfWalker(reader.builder, reader.deadline, reader.cells, _on_object(reader, pkg), _header_opt(reader))
    if body.tag == _SPREADSHEET:
        _sheets(reader, pkg, body)
    elif body.tag in (_PRESENTATION, _DRAWING):
        masters = pkg.styles.find(_MASTER_STYLES) if pkg.styles is not None else None
        reader.meta["slides"] = slide_blocks(body, walker, reader.deadline, reader.limits, masters)
    elif body.tag == _TEXT:
        walker.walk(body, [])
        _page_regions(reader, pkg, walker)
    else:
        walker.walk(body, [])
    return _MEDIA_BY_BODY.get(body.tag, reader.ctx.media_type or ODT)


def _metadata(meta_root: etree._Element | None) -> dict[str, str]:
    """Title, author, language, description from ``office:meta`` (part 1, 4.3)."""
    out: dict[str, str] = {}
    if meta_root is None:
        return out
    meta_el = meta_root if meta_root.tag == _META else meta_root.find(_META)
    if meta_el is None:
        return out
    for key, tag in (
        ("title", "dc:title"),
        ("author", "dc:creator"),
        ("author", "meta:initial-creator"),
        ("language", "dc:language"),
        ("description", "dc:description"),
    ):
        el = meta_el.find(qname(tag))
        if el is not None and key not in out and (text := clean_text("".join(el.itertext()))):
            out[key] = text
    return out


def _finish(reader: _Reader, pkg: _Package, media_type: str) -> ParsedDocument:
    result = parse_embedded(reader.embedded, reader.ctx.options, room=reader.builder.room)
    reader.builder.extend(result.blocks)  # the embedded text counts against max_chars and max_blocks
    result.skipped[:0] = reader.skipped
    result.repeats = {name: count for name, count in reader.references.items() if count > 1}
    result.record(reader.meta)
    if not any(b.kind != BlockKind.HEADING or b.metadata.get("slide_title") for b in reader.builder.blocks):
        raise ParseError(ParseErrorCode.EMPTY, "odf: no text")
    doc_meta = _metadata(pkg.meta)
    meta: dict[str, Any] = {k: v for k, v in doc_meta.items() if k != "title"}
    meta.update(reader.meta)
    return ParsedDocument(
        blocks=reader.builder.blocks, title=doc_meta.get("title"), media_type=media_type, metadata=meta
    )


def _new_reader(data: bytes, ctx: ParseContext) -> _Reader:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    return _Reader(
        ctx,
        limits,
        Deadline(limits.time_budget_s),
        BlockBuilder(limits.max_blocks, limits.max_chars),
        CellBudget(limits.max_cells),
        limits.xml_max_total,
    )


@register_parser("odf", "1.0", (ODT, ODS, ODP), ("odt", "ods", "odp", "ott", "ots", "otp", "odg"))
def parse_odf(data: bytes, ctx: ParseContext) -> ParsedDocument:
    reader = _new_reader(data, ctx)
    zf = check_zip(data, reader.limits, "odf")
    _refuse_encrypted(zf)
    pkg = _open_package(reader, zf, "")
    return _finish(reader, pkg, _document(reader, pkg))


@register_parser("odf-flat", "1.0", (FODT,), ("fodt",))
@register_parser("odf-flat", "1.0", (FODS,), ("fods",))
@register_parser("odf-flat", "1.0", (FODP,), ("fodp", "fodg"))
def parse_odf_flat(data: bytes, ctx: ParseContext) -> ParsedDocument:
    """A flat XML document: the one ``office:document`` is content, styles and meta at once."""
    reader = _new_reader(data, ctx)
    if len(data) > reader.limits.xml_max_total:
        raise ParseError(ParseErrorCode.TOO_LARGE, f"odf: flat XML of {len(data)} bytes exceeds xml_max_total")
    root = parse_xml(data, "odf flat XML")
    if root.find(_BODY) is None:
        raise ParseError(ParseErrorCode.UNSUPPORTED, "odf: not an OpenDocument flat XML file (no office:body)")
    pkg = _Package(root, root, root)
    return _finish(reader, pkg, _document(reader, pkg))
