"""PDF (pypdfium2): text per page with line and block boxes, tables, cleaned of page furniture.

* text in pdfium's reading order, lines grouped into paragraphs by vertical gaps and font-size
  changes; each block has its page number and box ``(x0, top, x1, bottom)`` in points from the
  page's top-left corner (``_pdf_layout``);
* tables, ruled (path objects) or aligned text, become table blocks with rows, header and box
  at their place in reading order; their text is kept out of the paragraphs (``_pdf_tables``);
* header and footer lines that repeat on most pages (digits ignored, so "Page 3 of 9" matches
  "Page 4 of 9") are removed;
* the outline (bookmarks) marks headings, with levels, for entries whose title is in the text of
  the page they point at (others are dropped: a file whose 1,372 bookmarks all point at one page
  must not get 1,367 headings of text that is not there); without one, clearly larger short
  lines become headings by size rank;
* engines (``engines: {pdf: auto|text|ocr}``): ``text`` never OCRs, listing pages that are images
  with (almost) no text in ``metadata["ocr_pages"]`` (the first 200) with ``needs_ocr`` set;
  ``auto`` (the default) OCRs those pages (``_pdf_ocr``), ``ocr`` every page instead of its
  text layer; when OCR cannot run, ``needs_ocr`` stays and ``ocr_unavailable`` says why. A
  document with no text at all is ``ParseError(empty)``, with the same keys in its ``details``;
* file attachments (ISO 32000-1 7.11.4, the EmbeddedFiles name tree) are parsed through
  ``_embedded`` and their blocks follow the pages';
* encrypted files open when the password is empty (or given as option ``pdf_password``);
  a file pdfium refuses (a damaged stream, a password need with no password given) goes to
  ``_pdf_fallback`` (pypdf), which opens it or raises the typed error.

Before pdfium opens the file, its zlib streams (images aside) are inflated and counted against
``pdf_max_inflated``: a Flate bomb is ``ParseError(bomb)`` at the cost of one MiB of memory,
instead of gigabytes inside pdfium (where the isolated child's memory cap is the backstop).

pdfium is not thread-safe: calls are serialised by a process-wide lock, and the registry runs
this parser in a forked child by default (``isolate``) so a hang in pdfium is killed at the
time budget; parallelism comes from processes.
"""

from __future__ import annotations

import os
import re
import statistics
import threading
import zlib
from dataclasses import dataclass, field
from typing import Any

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits, clean_text
from plugins.parsers._embedded import EmbeddedFile, parse_embedded
from plugins.parsers._pdf_fallback import read_with_pypdf
from plugins.parsers._pdf_layout import Line, furniture, norm, paragraphs
from plugins.parsers._pdf_ocr import ocr_pdf_pages
from plugins.parsers._pdf_page import read_page
from plugins.parsers._pdf_tables import Table
from plugins.parsers.registry import ParseContext, register_parser

__all__ = ["parse_pdf"]

_LOCK = threading.Lock()


def _reset_lock() -> None:
    # a fork taken while another thread held the lock must not inherit it held
    global _LOCK
    _LOCK = threading.Lock()


os.register_at_fork(after_in_child=_reset_lock)

_MAX_PAGE_CHARS = 500_000  # characters read from one page: a text layer bigger is a bomb's
_TABLE_TIME_SHARE = 0.5  # of the document's time budget, for table detection on all its pages
_MAX_SKIPS_LISTED = 50  # pages named in ``tables_skipped`` (a lineage warning keeps 2,000 characters)


@dataclass(slots=True)
class _Page:
    lines: list[Line]
    height: float
    tables: list[Table] = field(default_factory=list)
    image_only: bool = False
    tables_skipped: str | None = None  # why table detection was cut short here


@dataclass(slots=True)
class _Extracted:
    pages: list[_Page]
    toc: dict[int, list[tuple[int, str]]]
    info: dict[str, str]
    attachments: list[EmbeddedFile]
    ocr: dict[str, Any]  # ocr_used / ocr_engine / ocr_pages / ocr_unavailable, as found


def _image_coverage(page: Any, width: float, height: float) -> float:
    import pypdfium2.raw as pdfium_c  # pdfium's native library loads with the first PDF only

    area = 0.0
    for obj in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=2):
        left, bottom, right, top = obj.get_bounds()
        area += max(0.0, right - left) * max(0.0, top - bottom)
    return area / max(width * height, 1.0)


class _Refused(Exception):
    """pdfium would not open the file; ``reason`` is what it said (for the pypdf fallback)."""

    def __init__(self, reason: str, error: ParseError) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = error


def _open(data: bytes, password: str | None) -> Any:
    # pdfium's native library loads with the first PDF only (and inside the forked child when isolated)
    import pypdfium2 as pdfium  # heavy native library, see above
    import pypdfium2.raw as pdfium_c  # heavy native library, see above

    try:
        return pdfium.PdfDocument(data, password=password)
    except pdfium.PdfiumError as exc:
        if exc.err_code == pdfium_c.FPDF_ERR_PASSWORD:
            error = ParseError(ParseErrorCode.ENCRYPTED, "pdf: password required")
            if password:  # the wrong password given: another reader will not know a better one
                raise error from exc
            raise _Refused(str(exc), error) from exc
        if exc.err_code == pdfium_c.FPDF_ERR_SUCCESS:
            # pdfium refuses a document whose page tree is empty without naming an error
            raise ParseError(ParseErrorCode.EMPTY, "pdf: no pages (empty or unreadable page tree)") from exc
        if exc.err_code == pdfium_c.FPDF_ERR_SECURITY:
            raise ParseError(ParseErrorCode.ENCRYPTED, "pdf: unsupported security handler") from exc
        raise _Refused(str(exc), ParseError(ParseErrorCode.CORRUPT, f"pdf: {exc}")) from exc


def _toc(pdf: Any, limit: int = 5000) -> dict[int, list[tuple[int, str]]]:
    out: dict[int, list[tuple[int, str]]] = {}
    try:
        for i, item in enumerate(pdf.get_toc(max_depth=9)):
            if i >= limit:
                break
            dest = item.get_dest()
            page = dest.get_index() if dest is not None else None
            title = clean_text(item.get_title() or "")
            if page is not None and title:
                out.setdefault(page, []).append((item.level + 1, title))
    except Exception:  # a broken outline must not lose the text
        return {}
    return out


def _read_page(page: Any, table_deadline: Deadline | None) -> _Page:
    """The page's text and, given a deadline for them, its tables (``_pdf_page``)."""
    width, height = page.get_size()
    textpage = page.get_textpage()
    try:  # the text page stays open while tables are found: a header row's font weight is asked there
        read = read_page(page, textpage, height, _MAX_PAGE_CHARS, table_deadline)
    finally:
        textpage.close()
    lines, tables = read.lines, read.found.tables
    image_only = sum(len(ln.text) for ln in lines) + sum(len(t.members) for t in tables) < 20
    image_only = image_only and _image_coverage(page, width, height) > 0.5
    return _Page(lines, height, tables, image_only, read.found.skipped)


def _attachments(pdf: Any, limits: Limits, deadline: Deadline) -> list[EmbeddedFile]:
    """The document's embedded files, read while pdfium is ours (parsed later, outside the lock)."""
    out: list[EmbeddedFile] = []
    try:
        count = pdf.count_attachments()
    except Exception:  # a broken name tree must not lose the text
        return out
    for i in range(min(count, limits.embed_max_files)):
        deadline.check("pdf attachments")
        try:
            attachment = pdf.get_attachment(i)
            out.append(
                EmbeddedFile(
                    attachment.get_name() or f"attachment-{i + 1}", bytes(attachment.get_data()), where="attachment"
                )
            )
        except Exception:  # one unreadable attachment (no data, bad stream): the others still count
            continue
    return out


def _extract(pdf: Any, ctx: ParseContext, limits: Limits, deadline: Deadline) -> _Extracted:
    n = len(pdf)
    if n == 0:
        raise ParseError(ParseErrorCode.EMPTY, "pdf: document has no pages")
    if n > limits.max_pages:
        raise ParseError(ParseErrorCode.TOO_LARGE, f"pdf: {n} pages (limit {limits.max_pages})")
    engine = ctx.engine or "auto"
    # tables get a share of the budget: past it the pages are read as text, never lost to a grid
    table_deadline = Deadline(deadline.remaining * _TABLE_TIME_SHARE) if engine != "ocr" else None
    pages: list[_Page] = []
    for i in range(n):
        deadline.check(f"pdf page {i + 1}")
        page = pdf[i]
        try:
            pages.append(_read_page(page, table_deadline))
        finally:
            page.close()
    wanted = list(range(n)) if engine == "ocr" else [i for i, p in enumerate(pages) if p.image_only]
    ocr = _run_ocr(pdf, pages, wanted, ctx, deadline) if wanted and engine != "text" else {}
    toc = _toc(pdf)
    info = {k.lower(): v for k, v in pdf.get_metadata_dict(skip_empty=True).items()}
    return _Extracted(pages, toc, info, _attachments(pdf, limits, deadline), ocr)


def _run_ocr(pdf: Any, pages: list[_Page], wanted: list[int], ctx: ParseContext, deadline: Deadline) -> dict[str, Any]:
    """OCR ``wanted`` pages (0-based) in place of their text layer; the facts for the metadata.

    Called with the pdfium lock held: the OCR module renders pages through the same pdfium.
    """
    result = ocr_pdf_pages(pdf, wanted, ctx.options, deadline)
    if result.unavailable:
        return {"ocr_unavailable": result.unavailable}
    done = []
    for index in wanted:
        ocr_lines = result.pages.get(index)
        if ocr_lines is None:
            continue
        lines = [
            Line(clean_text(ln.text), ln.x0, ln.top, ln.x1, ln.bottom, first=k, ocr=True)
            for k, ln in enumerate(ocr_lines)
            if clean_text(ln.text)
        ]
        pages[index] = _Page(lines, pages[index].height, [], image_only=False)  # OCR'd, text or not
        done.append(index + 1)
    facts: dict[str, Any] = {
        "ocr_used": bool(done),
        "ocr_engine": result.engine,
        "ocr_pages": done[:_MAX_OCR_PAGES_LISTED],
    }
    # pages OCR did not reach stay image-only (needs OCR); lineage says which and why
    not_read = sorted(result.skipped + result.out_of_time)
    if not_read:
        facts["ocr_pages_skipped"] = [i + 1 for i in not_read][:_MAX_OCR_PAGES_LISTED]
        facts["ocr_skipped_reason"] = "time budget" if result.out_of_time else "ocr.max_pages"
    return facts


# page numbers listed in ``ocr_pages``: 200 of up to 4 digits stay a list within the 2,000
# characters a lineage warning keeps (``plugins.engine.lineage.parser_warnings``)
_MAX_OCR_PAGES_LISTED = 200


def _ocr_warning(ocr_pages: list[int]) -> dict[str, Any]:
    """``needs_ocr`` and the image-only pages, the first :data:`_MAX_OCR_PAGES_LISTED` of them."""
    return {"needs_ocr": True, "ocr_pages": ocr_pages[:_MAX_OCR_PAGES_LISTED]}


def _matched_toc(toc: dict[int, list[tuple[int, str]]], pages: list[_Page]) -> dict[int, list[tuple[int, str]]]:
    """Outline entries whose title is in the text of the page they point at; the rest are dropped."""
    out: dict[int, list[tuple[int, str]]] = {}
    for p, entries in toc.items():
        if not 0 <= p < len(pages):
            continue
        page_text = norm(" ".join(ln.text for ln in pages[p].lines))
        page_text += " " + norm(" ".join(c for t in pages[p].tables for r in [t.header or [], *t.rows] for c in r))
        kept = [(level, title) for level, title in entries if norm(title) in page_text]
        if kept:
            out[p] = kept
    return out


def _size_levels(pages: list[_Page], has_toc: bool) -> dict[int, int]:
    """Without an outline, the three largest line heights well above the body's are heading levels."""
    heights = [ln.height for page in pages for ln in page.lines if ln.height > 0.1]
    body_height = statistics.median(heights) if heights else 0.0
    if has_toc or not body_height:
        return {}
    big = sorted({round(h) for h in heights if h >= 1.25 * body_height}, reverse=True)[:3]
    return {h: i + 1 for i, h in enumerate(big)}


def _emit_page(
    builder: BlockBuilder,
    p: int,
    kept: list[Line],
    page: _Page,
    toc: dict[int, list[tuple[int, str]]],
    size_levels: dict[int, int],
) -> None:
    entries = {norm(title): level for level, title in toc.get(p, [])}
    on_page = {norm(ln.text) for ln in kept}
    for level, title in toc.get(p, []):
        if norm(title) not in on_page:  # a title inside a longer line: still a heading here
            builder.heading(title, level, [Position(page=p + 1)])
    items: list[tuple[int, list[Line] | Table]] = [(g[0].first, g) for g in paragraphs(kept, set(entries))]
    items += [(t.first, t) for t in page.tables]
    items.sort(key=lambda item: item[0])
    for _, item in items:
        if isinstance(item, Table):
            kind = "ruled" if item.ruled else "aligned"
            builder.table(item.rows, item.header, [Position(page=p + 1, bbox=item.bbox)], table_kind=kind)
            continue
        _emit_group(builder, p, item, entries, size_levels)


def _emit_group(
    builder: BlockBuilder, p: int, group: list[Line], entries: dict[str, int], size_levels: dict[int, int]
) -> None:
    text = "\n".join(ln.text for ln in group)
    box = (
        min(ln.x0 for ln in group),
        min(ln.top for ln in group),
        max(ln.x1 for ln in group),
        max(ln.bottom for ln in group),
    )
    positions = [Position(page=p + 1, bbox=tuple(round(v, 2) for v in box))]  # type: ignore[arg-type]
    extra: dict[str, Any] = {"ocr": True} if group[0].ocr else {}
    flat = norm(text)
    if flat in entries:
        builder.heading(text, entries.pop(flat), positions, **extra)
        return
    size_level = size_levels.get(round(group[0].height)) if len(group) <= 2 and len(text) < 120 else None
    if size_level is not None and re.search(r"[A-Za-z\u00c0-\uffff]", text):
        builder.heading(text, size_level, positions, **extra)
    else:
        builder.add(BlockKind.PARAGRAPH, text, positions, **extra)


def _build(found: _Extracted, ctx: ParseContext, limits: Limits) -> ParsedDocument:
    pages = found.pages
    drop = furniture([p.lines for p in pages], [p.height for p in pages])
    builder = BlockBuilder(limits.max_blocks)
    toc = _matched_toc(found.toc, pages)
    size_levels = _size_levels(pages, bool(toc))
    for p, page in enumerate(pages):
        kept = [ln for i, ln in enumerate(page.lines) if (p, i) not in drop]
        _emit_page(builder, p, kept, page, toc, size_levels)
    n_text_blocks = len(builder.blocks)
    meta: dict[str, Any] = {"pages": len(pages)}
    meta.update(_ocr_facts(found.ocr, [i + 1 for i, p in enumerate(pages) if p.image_only]))
    if found.attachments:
        embedded = parse_embedded(found.attachments, ctx.options, builder.heading_path)
        builder.blocks.extend(embedded.blocks)
        embedded.record(meta)
    if not builder.blocks:
        scanned = [k for k in ("needs_ocr", "ocr_pages", "ocr_unavailable") if k in meta]
        if meta.get("needs_ocr"):
            raise ParseError(
                ParseErrorCode.EMPTY,
                f"pdf: scanned images without text on {sum(p.image_only for p in pages)} page(s), needs OCR",
                {k: meta[k] for k in scanned},  # the run's lineage says so, as for a partly scanned one
            )
        ocr_facts: dict[str, Any] = {k: meta[k] for k in ("ocr_used", "ocr_engine", "ocr_pages") if k in meta}
        raise ParseError(ParseErrorCode.EMPTY, "pdf: no text" + (" (OCR found none)" if ocr_facts else ""), ocr_facts)
    for key in ("author", "subject", "keywords", "creator", "producer"):
        if found.info.get(key):
            meta[key] = found.info[key]
    if drop:
        meta["furniture_lines_removed"] = len(drop)
    tables = sum(len(p.tables) for p in pages)
    if tables:
        meta["tables"] = tables
    skipped = [{"page": i + 1, "reason": p.tables_skipped} for i, p in enumerate(pages) if p.tables_skipped]
    if skipped:
        meta["tables_skipped"] = skipped[:_MAX_SKIPS_LISTED]
        meta["tables_skipped_pages"] = len(skipped)
    heading = next((b.text for b in builder.blocks[:n_text_blocks] if b.kind == BlockKind.HEADING), None)
    return ParsedDocument(
        blocks=builder.blocks, title=found.info.get("title") or heading, media_type="application/pdf", metadata=meta
    )


def _ocr_facts(ocr: dict[str, Any], still_image_only: list[int]) -> dict[str, Any]:
    """``ocr_used``/``ocr_engine``/``ocr_pages`` for what was OCR'd, ``needs_ocr`` for what is left."""
    out: dict[str, Any] = {}
    if ocr.get("ocr_used"):
        out.update({k: ocr[k] for k in ("ocr_used", "ocr_engine", "ocr_pages")})
    if still_image_only:
        out.update(_ocr_warning(still_image_only))
        if "ocr_unavailable" in ocr:
            out["ocr_unavailable"] = ocr["ocr_unavailable"]
    elif "ocr_unavailable" in ocr:  # engine "ocr" without OCR: the text layer was read instead
        out["ocr_unavailable"] = ocr["ocr_unavailable"]
    return out


# "stream" then its end of line (ISO 32000-1 7.3.8.1); "endstream" is not a start. The "end" test
# is made on the match, not by a look-behind: a pattern that opens with one loses re's literal
# prefix search and scanned these files 25x slower (0.19 s vs 0.008 s on the 142 real PDFs).
_STREAM_START = re.compile(rb"stream(?:\r\n|\n|\r)")
_IMAGE_DICT = re.compile(rb"/Subtype\s*/Image\b")
_INFLATE_STEP = 1 << 20


def _check_inflated_size(data: bytes, limits: Limits, deadline: Deadline) -> None:
    """Refuse a document whose zlib streams inflate past ``pdf_max_inflated`` in total.

    pdfium inflates a content stream, font or object stream whole, in C, before it parses it:
    a few MB of deflated spaces become gigabytes there. Inflating them here first, a MiB at a
    time and discarding the output, costs memory for one step only. Image streams are skipped:
    text extraction never decodes them, and a scan's blank pages compress at bomb ratios.
    Streams under another filter chain are left to the isolated child's memory cap.
    """
    view = memoryview(data)
    total = 0
    for match in _STREAM_START.finditer(data):
        if data.endswith(b"end", 0, match.start()):
            continue
        # the stream's dictionary: back to its "obj" keyword, looked for in a bounded window
        window = max(0, match.start() - 65536)
        head = data[max(window, data.rfind(b"obj", window, match.start())) : match.start()]
        if _IMAGE_DICT.search(head):
            continue
        total += _inflated_size(view[match.end() :], limits.pdf_max_inflated - total)
        if total > limits.pdf_max_inflated:
            raise ParseError(
                ParseErrorCode.BOMB,
                f"pdf: compressed streams inflate to more than {limits.pdf_max_inflated >> 20} MiB",
            )
        deadline.check("pdf streams")


def _inflated_size(view: memoryview, budget: int) -> int:
    """Bytes the zlib stream at the start of ``view`` inflates to, counting to ``budget`` + 1."""
    inflater = zlib.decompressobj()
    total = pos = 0
    chunk: bytes | memoryview
    try:
        while total <= budget and not inflater.eof:
            if inflater.unconsumed_tail:
                chunk = inflater.unconsumed_tail
            else:
                chunk, pos = view[pos : pos + _INFLATE_STEP], pos + _INFLATE_STEP
                if not chunk:
                    break
            total += len(inflater.decompress(chunk, _INFLATE_STEP))
    except zlib.error:  # not zlib (an uncompressed or otherwise filtered stream) or damaged
        pass
    return total


@register_parser(
    "pdf", "2.0", ("application/pdf",), ("pdf",), isolate=True, engines=("auto", "text", "ocr"), engine_key="pdf"
)
def parse_pdf(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    _check_inflated_size(data, limits, deadline)
    password = ctx.options.get("pdf_password")
    with _LOCK:
        try:
            pdf = _open(data, password)
        except _Refused as refused:
            pdf = None
            refusal = refused
        if pdf is not None:
            try:
                found = _extract(pdf, ctx, limits, deadline)
            finally:
                pdf.close()
    if pdf is None:
        return _fallback(data, ctx, password, refusal)
    # embedded files parse outside the lock: a PDF attachment parsed in this process takes it again
    return _build(found, ctx, limits)


def _fallback(data: bytes, ctx: ParseContext, password: str | None, refused: _Refused) -> ParsedDocument:
    """A file pdfium refused goes to pypdf, which opens it or raises the typed error itself."""
    return read_with_pypdf(data, ctx, password, refused.reason)
