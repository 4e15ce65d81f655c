"""PDF (pypdfium2): text per page with line and block boxes, cleaned of page furniture.

* text in pdfium's reading order, lines grouped into paragraphs by vertical gaps and font-size
  changes; each block has its page number and box ``(x0, top, x1, bottom)`` in points from the
  page's top-left corner;
* header and footer lines that repeat on most pages (digits ignored, so "Page 3 of 9" matches
  "Page 4 of 9") are removed;
* the outline (bookmarks) marks headings, with levels; without one, clearly larger short
  lines become headings by size rank;
* pages that are images with (almost) no text are listed in ``metadata["ocr_pages"]`` (the
  first 200) with ``needs_ocr`` set, instead of emitting garbage; a document with no text at
  all is ``ParseError(empty)``, carrying the same two keys in its ``details`` when it is a scan;
* encrypted files open when the password is empty (or given as option ``pdf_password``),
  otherwise ``ParseError(encrypted)``.

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
from collections import Counter
from dataclasses import dataclass
from typing import Any

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits, clean_text
from plugins.parsers.registry import ParseContext, register_parser

__all__ = ["parse_pdf"]

_LOCK = threading.Lock()


def _reset_lock() -> None:
    # a fork taken while another thread held the lock must not inherit it held
    global _LOCK
    _LOCK = threading.Lock()


os.register_at_fork(after_in_child=_reset_lock)

_SYMBOL_BULLETS = str.maketrans({"\uf0b7": "•", "\uf0a7": "▪", "\uf076": "•", "\uf0d8": "•", "\uf0fc": "✓"})
_DIGITS = re.compile(r"\d+")


@dataclass(slots=True)
class _Line:
    text: str
    x0: float
    top: float
    x1: float
    bottom: float

    @property
    def height(self) -> float:
        return max(self.bottom - self.top, 0.1)


def _page_lines(textpage: Any, page_height: float) -> list[_Line]:
    text = textpage.get_text_range()
    n_chars = textpage.count_chars()
    lines: list[_Line] = []
    pos = 0
    for raw in re.split(r"(\r\n|\n|\r)", text):
        if raw in ("\r\n", "\n", "\r"):
            pos += len(raw)
            continue
        start, end = pos, pos + len(raw)
        pos = end
        stripped = raw.strip()
        if not stripped:
            continue
        first = start + (len(raw) - len(raw.lstrip()))
        last = end - 1 - (len(raw) - len(raw.rstrip()))
        if len(text) == n_chars and 0 <= first < n_chars and 0 <= last < n_chars:
            l0, b0, r0, t0 = textpage.get_charbox(first)
            l1, b1, r1, t1 = textpage.get_charbox(last)
            box = (min(l0, l1), page_height - max(t0, t1), max(r0, r1), page_height - min(b0, b1))
        else:  # surrogate pairs shift indices: keep the text, skip the box
            box = (0.0, 0.0, 0.0, 0.0)
        lines.append(_Line(stripped.translate(_SYMBOL_BULLETS), *box))
    return lines


def _image_coverage(page: Any, width: float, height: float) -> float:
    import pypdfium2.raw as pdfium_c  # pdfium's native library loads with the first PDF only

    area = 0.0
    for obj in page.get_objects(filter=[pdfium_c.FPDF_PAGEOBJ_IMAGE], max_depth=2):
        left, bottom, right, top = obj.get_bounds()
        area += max(0.0, right - left) * max(0.0, top - bottom)
    return area / max(width * height, 1.0)


def _furniture(pages: list[list[_Line]], heights: list[float]) -> set[tuple[int, int]]:
    """(page, line) indices of header/footer lines repeated on most pages.

    Only lines in the top or bottom margin band (10% of the page) qualify, so a chapter title
    or a repeated sentence in the body is never mistaken for furniture; digits are ignored so
    running page numbers match.
    """
    if len(pages) < 3:
        return set()
    threshold = max(3, int(len(pages) * 0.5 + 0.5))
    drop: set[tuple[int, int]] = set()
    for edge in ("head", "foot"):
        for depth in range(2):  # the first/last two lines of a page
            keys: list[tuple[int, int, str]] = []
            for p, lines in enumerate(pages):
                if len(lines) <= depth:
                    continue
                idx = depth if edge == "head" else len(lines) - 1 - depth
                line, band = lines[idx], 0.1 * heights[p]
                if (edge == "head" and line.bottom > band) or (edge == "foot" and line.top < heights[p] - band):
                    continue
                keys.append((p, idx, _DIGITS.sub("#", " ".join(line.text.lower().split()))))
            counts = Counter(k for _, _, k in keys)
            for p, idx, key in keys:
                if counts[key] >= threshold:
                    drop.add((p, idx))
    return drop


def _paragraphs(lines: list[_Line], titles: set[str]) -> list[list[_Line]]:
    """Group lines into paragraphs; a line equal to an outline title always stands alone."""
    groups: list[list[_Line]] = []
    for line in lines:
        alone = _norm(line.text) in titles
        if groups and not alone and _norm(groups[-1][-1].text) not in titles:
            prev = groups[-1][-1]
            gap = line.top - prev.bottom
            tallest = max(prev.height, line.height)
            # glyph boxes are ~0.7 of the font size, so normal leading leaves a gap below one box height
            size_change = abs(line.height - prev.height) > 0.4 * tallest
            jumped = line.top < prev.top - prev.height  # new column or out-of-order object
            if gap <= 1.0 * tallest and not size_change and not jumped:
                groups[-1].append(line)
                continue
        groups.append([line])
    return groups


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _open(data: bytes, password: str | None) -> Any:
    # pdfium's native library loads with the first PDF only (and inside the forked child when isolated)
    import pypdfium2 as pdfium  # heavy native library, see above
    import pypdfium2.raw as pdfium_c  # heavy native library, see above

    try:
        return pdfium.PdfDocument(data, password=password)
    except pdfium.PdfiumError as exc:
        if exc.err_code == pdfium_c.FPDF_ERR_PASSWORD:
            raise ParseError(ParseErrorCode.ENCRYPTED, "pdf: password required") from exc
        if exc.err_code == pdfium_c.FPDF_ERR_SUCCESS:
            # pdfium refuses a document whose page tree is empty without naming an error
            raise ParseError(ParseErrorCode.EMPTY, "pdf: no pages (empty or unreadable page tree)") from exc
        if exc.err_code == pdfium_c.FPDF_ERR_SECURITY:
            raise ParseError(ParseErrorCode.ENCRYPTED, "pdf: unsupported security handler") from exc
        raise ParseError(ParseErrorCode.CORRUPT, f"pdf: {exc}") from exc


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


def _extract(data: bytes, ctx: ParseContext, limits: Limits, deadline: Deadline) -> ParsedDocument:
    pdf = _open(data, ctx.options.get("pdf_password"))
    try:
        n = len(pdf)
        if n == 0:
            raise ParseError(ParseErrorCode.EMPTY, "pdf: document has no pages")
        if n > limits.max_pages:
            raise ParseError(ParseErrorCode.TOO_LARGE, f"pdf: {n} pages (limit {limits.max_pages})")
        pages: list[list[_Line]] = []
        page_heights: list[float] = []
        ocr_pages: list[int] = []
        for i in range(n):
            deadline.check(f"pdf page {i + 1}")
            page = pdf[i]
            try:
                width, height = page.get_size()
                textpage = page.get_textpage()
                try:
                    lines = _page_lines(textpage, height)
                finally:
                    textpage.close()
                if sum(len(line.text) for line in lines) < 20 and _image_coverage(page, width, height) > 0.5:
                    ocr_pages.append(i + 1)
                pages.append(lines)
                page_heights.append(height)
            finally:
                page.close()
        toc = _toc(pdf)
        meta = {k.lower(): v for k, v in pdf.get_metadata_dict(skip_empty=True).items()}
    finally:
        pdf.close()
    return _build(pages, page_heights, toc, ocr_pages, meta, limits, n)


# page numbers listed in ``ocr_pages``: 200 of up to 4 digits stay a list within the 2,000
# characters a lineage warning keeps (``plugins.engine.lineage.parser_warnings``)
_MAX_OCR_PAGES_LISTED = 200


def _ocr_warning(ocr_pages: list[int]) -> dict[str, Any]:
    """``needs_ocr`` and the image-only pages, the first :data:`_MAX_OCR_PAGES_LISTED` of them."""
    return {"needs_ocr": True, "ocr_pages": ocr_pages[:_MAX_OCR_PAGES_LISTED]}


def _build(
    pages: list[list[_Line]],
    page_heights: list[float],
    toc: dict[int, list[tuple[int, str]]],
    ocr_pages: list[int],
    info: dict[str, str],
    limits: Limits,
    n_pages: int,
) -> ParsedDocument:
    drop = _furniture(pages, page_heights)
    builder = BlockBuilder(limits.max_blocks)
    heights = [ln.height for lines in pages for ln in lines if ln.height > 0.1]
    body_height = statistics.median(heights) if heights else 0.0
    size_levels: dict[int, int] = {}
    if not toc and body_height:
        big = sorted({round(h) for h in heights if h >= 1.25 * body_height}, reverse=True)[:3]
        size_levels = {h: i + 1 for i, h in enumerate(big)}
    for p, lines in enumerate(pages):
        kept = [ln for i, ln in enumerate(lines) if (p, i) not in drop]
        entries = {_norm(title): level for level, title in toc.get(p, [])}
        on_page = {_norm(ln.text) for ln in kept}
        for level, title in toc.get(p, []):
            if _norm(title) not in on_page:  # bookmark whose text is not a line: still a heading here
                builder.heading(title, level, [Position(page=p + 1)])
        for group in _paragraphs(kept, set(entries)):
            text = "\n".join(ln.text for ln in group)
            box = (
                min(ln.x0 for ln in group),
                min(ln.top for ln in group),
                max(ln.x1 for ln in group),
                max(ln.bottom for ln in group),
            )
            positions = [Position(page=p + 1, bbox=tuple(round(v, 2) for v in box))]  # type: ignore[arg-type]
            flat = _norm(text)
            if flat in entries:
                builder.heading(text, entries.pop(flat), positions)
                continue
            size_level = size_levels.get(round(group[0].height)) if len(group) <= 2 and len(text) < 120 else None
            if size_level is not None and re.search(r"[A-Za-z\u00c0-\uffff]", text):
                builder.heading(text, size_level, positions)
            else:
                builder.add(BlockKind.PARAGRAPH, text, positions)
    if not builder.blocks:
        if ocr_pages:
            raise ParseError(
                ParseErrorCode.EMPTY,
                f"pdf: scanned images without text on {len(ocr_pages)} page(s), needs OCR",
                _ocr_warning(ocr_pages),  # the run's lineage says so, as for a partly scanned one
            )
        raise ParseError(ParseErrorCode.EMPTY, "pdf: no text")
    meta: dict[str, Any] = {"pages": n_pages}
    if ocr_pages:
        meta.update(_ocr_warning(ocr_pages))
    for key in ("author", "subject", "keywords", "creator", "producer"):
        if info.get(key):
            meta[key] = info[key]
    if drop:
        meta["furniture_lines_removed"] = len(drop)
    doc_title = info.get("title") or next((b.text for b in builder.blocks if b.kind == BlockKind.HEADING), None)
    return ParsedDocument(blocks=builder.blocks, title=doc_title, media_type="application/pdf", metadata=meta)


# "stream" then its end of line (ISO 32000-1 7.3.8.1); "endstream" is not a start
_STREAM_START = re.compile(rb"(?<!end)stream(?:\r\n|\n|\r)")
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


@register_parser("pdf", "1.0", ("application/pdf",), ("pdf",), isolate=True)
def parse_pdf(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    _check_inflated_size(data, limits, deadline)
    with _LOCK:
        return _extract(data, ctx, limits, deadline)
