"""OCR of PDF pages: render with pdfium, read with tesseract (:mod:`plugins.parsers._ocr`).

Called by the PDF parser for pages without a text layer (engine ``auto``) or for every page
(engine ``ocr``), while it holds pdfium's lock (pdfium is not thread-safe): this module renders
and closes each page itself and never takes the lock. It returns lines with boxes in PDF points
from the page's top-left corner, the unit and origin of the PDF parser's text-layer boxes; the
PDF parser turns them into paragraphs.

Bounds: at most ``ocr.max_pages`` pages are OCR'd (the rest are listed in ``skipped``); a page is
rendered at ``ocr.dpi`` unless that makes more than ``ocr.max_pixels`` pixels, in which case it
is rendered smaller to fit (a 200-inch page box at 300 dpi would be 3.6 G pixels); a page so large
that fitting it leaves under 72 dpi, or with no area, is not OCR'd and is listed in ``refused``.
The deadline is checked before every page and bounds each tesseract run; OCR stops while
``_TIME_RESERVE`` of the budget is left (the pages not reached are listed in ``out_of_time``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from plugins.parsers._common import Deadline
from plugins.parsers._ocr import OcrLine, OcrSettings, engine_name, ocr_available, ocr_image

__all__ = ["PdfOcrResult", "ocr_pdf_pages"]

_POINTS_PER_INCH = 72.0
# below this a page's text is a few pixels high and tesseract reads noise
_MIN_DPI = 72.0
# share of the document's time budget OCR leaves for the rest of the parse (layout, tables, blocks)
_TIME_RESERVE = 0.15


@dataclass(slots=True)
class PdfOcrResult:
    """What OCR found on the pages asked for.

    ``pages``: 0-based page index -> its lines (boxes in points from the page's top-left), for
    every page OCR'd (an empty list: OCR found no text there). ``unavailable``: why OCR could not
    run at all (tesseract or a language model missing), else None; then ``pages`` is empty.
    ``skipped``: pages not OCR'd because the document reached ``ocr.max_pages``. ``refused``:
    page index -> why it was not rendered (its box is too large or empty).
    """

    pages: dict[int, list[OcrLine]] = field(default_factory=dict)
    unavailable: str | None = None
    engine: str = ""
    skipped: list[int] = field(default_factory=list)
    refused: dict[int, str] = field(default_factory=dict)
    # pages left when the time budget (less a reserve for the rest of the parse) ran short
    out_of_time: list[int] = field(default_factory=list)
    dpi: int = 0


def ocr_pdf_pages(
    pdf: Any, page_indices: Sequence[int], options: Mapping[str, Any], deadline: Deadline
) -> PdfOcrResult:
    """OCR ``page_indices`` (0-based) of an open ``pypdfium2.PdfDocument``.

    Raises only ``ParseError``: timeout (the deadline), unsupported (bad ``ocr`` options).
    """
    settings = OcrSettings.from_options(options)
    result = PdfOcrResult(engine=engine_name(settings), dpi=settings.dpi)
    result.unavailable = ocr_available(settings.languages)
    if result.unavailable is not None:
        return result
    wanted = list(dict.fromkeys(page_indices))  # once each, in the order asked
    result.skipped = wanted[settings.max_pages :]
    # OCR stops while the rest of the parse still has time: a long scan keeps the pages it read
    # (the others listed in ``out_of_time``) instead of losing them all to the document's timeout
    reserve = _TIME_RESERVE * deadline.seconds
    slowest = 0.0
    for position, index in enumerate(wanted[: settings.max_pages]):
        if deadline.remaining - reserve < max(slowest, 1.0):
            result.out_of_time = wanted[position : settings.max_pages]
            break
        started = time.monotonic()
        _ocr_page(pdf, index, settings, Deadline(deadline.remaining - reserve), result)
        slowest = max(slowest, time.monotonic() - started)
    return result


def _ocr_page(pdf: Any, index: int, settings: OcrSettings, deadline: Deadline, result: PdfOcrResult) -> None:
    """Render and OCR one page into ``result`` (or record why it was not rendered)."""
    page = pdf[index]
    try:
        scale, refusal = _render_scale(page.get_size(), settings)
        if refusal:
            result.refused[index] = refusal
            return
        image = page.render(scale=scale, grayscale=True).to_pil()
    finally:
        page.close()
    lines = ocr_image(image, settings, deadline)
    del image  # the bitmap is the large part: free it before the next page renders
    result.pages[index] = [_in_points(line, scale) for line in lines]


def _render_scale(size: tuple[float, float], settings: OcrSettings) -> tuple[float, str]:
    """Pixels per point to render a page of ``size`` points at, or a reason not to render it."""
    width, height = size
    if not (width > 0 and height > 0) or not math.isfinite(width * height):
        return 0.0, f"page box {width:g} x {height:g} pt has no area"
    scale = settings.dpi / _POINTS_PER_INCH
    if width * height * scale * scale > settings.max_pixels:
        scale = math.sqrt(settings.max_pixels / (width * height))
    if scale * _POINTS_PER_INCH < _MIN_DPI:
        return 0.0, (
            f"page box {width:g} x {height:g} pt: fitting it into ocr.max_pixels={settings.max_pixels}"
            f" leaves {scale * _POINTS_PER_INCH:.0f} dpi (under {_MIN_DPI:g})"
        )
    return scale, ""


def _in_points(line: OcrLine, scale: float) -> OcrLine:
    return OcrLine(
        line.text,
        round(line.x0 / scale, 2),
        round(line.top / scale, 2),
        round(line.x1 / scale, 2),
        round(line.bottom / scale, 2),
        line.confidence,
        line.paragraph,
    )
