"""Images (PNG, JPEG, TIFF, GIF, BMP, WebP): text by OCR (tesseract, :mod:`plugins.parsers._ocr`).

* one paragraph block per paragraph tesseract finds, with ``Position(page=<frame>, bbox=...)``;
  the box is in pixels of the image (``metadata["bbox_units"] == "pixels"``), not PDF points;
* a multi-page TIFF (a fax, a scanner's batch) is one page per frame; a GIF's or WebP's later
  frames are animation, so only the first is read;
* engine (``engines: {image: ocr|off}``): ``off`` makes every image ``ParseError(empty)``, so a
  source that does not want OCR records its images as skipped; OCR that cannot run (tesseract
  or a language model missing) is ``ParseError(unsupported)`` with ``details["needs_ocr"]``;
* images with a side under ``ocr.min_side`` pixels (icons, bullets, spacers; the common case
  among images inside DOCX/PPTX, which reach this parser through ``_embedded.py``) are
  ``ParseError(empty)`` from their header alone, before anything is decoded or OCR'd.

Bounds: Pillow opens only the six formats above; an image over Pillow's decompression-bomb
threshold (``Image.MAX_IMAGE_PIXELS``, 89 M pixels) in any frame is ``ParseError(bomb)``, a
truncated or damaged one ``ParseError(corrupt)``; a TIFF with more than ``max_pages`` frames is
``ParseError(too_large)`` (as a PDF with too many pages is) and only the first ``ocr.max_pages``
frames are OCR'd (the others are listed in ``metadata["ocr_pages_skipped"]``); an image larger
than ``ocr.max_pixels`` is reduced to fit before OCR; the deadline is checked per frame and
bounds each tesseract run.
"""

from __future__ import annotations

import io
import math
import struct
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from include.contract import ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits
from plugins.parsers._ocr import (
    OcrLine,
    OcrSettings,
    engine_name,
    join_lines,
    mean_confidence,
    ocr_available,
    ocr_image,
)
from plugins.parsers.registry import ParseContext, register_parser, register_sniffer
from plugins.parsers.sniff import BMP, IMAGE_TYPES

if TYPE_CHECKING:  # Pillow is loaded by the first image parsed, not by registering the parser
    from PIL import Image

__all__ = ["parse_image"]

# Pillow's names of the formats registered here: no other decoder is ever tried on the bytes
_PILLOW_FORMATS = ("PNG", "JPEG", "TIFF", "GIF", "BMP", "WEBP")
_EXTENSIONS = ("png", "jpg", "jpeg", "tif", "tiff", "gif", "bmp", "webp")
# BITMAPFILEHEADER then a DIB header whose first field is its own size: CORE (12), INFO (40),
# the V2/V3 INFO variants (52, 56), OS/2 2.x (64), V4 (108), V5 (124) -- Microsoft's BMP format
_DIB_HEADER_SIZES = frozenset({12, 40, 52, 56, 64, 108, 124})


@register_sniffer
def sniff_bmp(data: bytes, file_name: str = "") -> str | None:
    """BMP by its headers: "BM" alone is too common a start of text to go by, so the reserved
    fields must be zero and the DIB header size one the format defines."""
    if len(data) < 26 or data[:2] != b"BM":
        return None
    reserved, pixel_offset, dib_size = struct.unpack_from("<III", data, 6)
    if reserved != 0 or dib_size not in _DIB_HEADER_SIZES or not 14 + dib_size <= pixel_offset:
        return None
    return BMP


@register_parser("image", "1", IMAGE_TYPES, _EXTENSIONS, engines=("ocr", "off"), engine_key="image")
def parse_image(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    if ctx.engine == "off":
        raise ParseError(ParseErrorCode.EMPTY, "OCR is off for images (parser engines: {image: off})")
    settings = OcrSettings.from_options(ctx.options)
    image = _open(data)
    with image:
        width, height = image.size
        if min(width, height) < settings.min_side:
            raise ParseError(
                ParseErrorCode.EMPTY, f"image of {width}x{height} px is too small to hold text (ocr.min_side)"
            )
        reason = ocr_available(settings.languages)
        if reason is not None:
            raise ParseError(ParseErrorCode.UNSUPPORTED, f"image needs OCR: {reason}", {"needs_ocr": True})
        frames = _frame_count(image, limits, deadline)
        builder = BlockBuilder(limits.max_blocks, limits.max_chars)
        read: list[OcrLine] = []
        for index in range(min(frames, settings.max_pages)):
            deadline.check(f"image frame {index + 1}")
            lines = _ocr_frame(image, index, settings, deadline)
            _add_paragraphs(builder, lines, index + 1)
            read.extend(lines)
        metadata: dict[str, Any] = {
            "ocr_used": True,
            "ocr_engine": engine_name(settings),
            "ocr_confidence": mean_confidence(read),
            "image_format": image.format,
            "width": width,
            "height": height,
            "pages": frames,
            "bbox_units": "pixels",
        }
    if frames > settings.max_pages:
        metadata["ocr_pages_skipped"] = list(range(settings.max_pages + 1, frames + 1))[:200]
    if not builder.blocks:
        raise ParseError(
            ParseErrorCode.EMPTY,
            "OCR found no text in the image",
            {"ocr_used": True, "ocr_engine": metadata["ocr_engine"]},
        )
    return ParsedDocument(builder.blocks, metadata=metadata, engine="ocr")


def _open(data: bytes) -> Image.Image:
    """Open the image lazily (header only), refusing bomb dimensions before any pixel is decoded."""
    from PIL import Image  # deferred: registering the parsers must not load Pillow (~60 ms)

    try:
        with warnings.catch_warnings():
            # over MAX_IMAGE_PIXELS Pillow only warns (it raises over twice that): refused below
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=_PILLOW_FORMATS)
    except Image.DecompressionBombError as exc:
        raise ParseError(ParseErrorCode.BOMB, f"image: {exc}") from exc
    except Exception as exc:  # UnidentifiedImageError, a bad header (SyntaxError, struct.error, ...)
        raise ParseError(ParseErrorCode.CORRUPT, f"image: not a readable image ({type(exc).__name__}: {exc})") from exc
    _check_dimensions(image)
    return image


def _check_dimensions(image: Image.Image) -> None:
    from PIL import Image  # deferred: as in _open

    width, height = image.size
    limit = Image.MAX_IMAGE_PIXELS
    if width <= 0 or height <= 0:
        raise ParseError(ParseErrorCode.CORRUPT, f"image: {width}x{height} px has no pixels")
    if limit is not None and width * height > limit:
        raise ParseError(
            ParseErrorCode.BOMB,
            f"image: {width}x{height} px exceeds {limit} pixels (Pillow's decompression-bomb threshold)",
        )


def _frame_count(image: Image.Image, limits: Limits, deadline: Deadline) -> int:
    """Frames that are pages: a TIFF's, walked one directory at a time up to ``max_pages``."""
    if image.format != "TIFF":
        return 1
    count = 1
    try:
        while True:
            image.seek(count)  # reads the next directory only, no pixels
            count += 1
            if count > limits.max_pages:
                raise ParseError(
                    ParseErrorCode.TOO_LARGE, f"image: TIFF has over {limits.max_pages} frames (max_pages)"
                )
            if count % 100 == 0:
                deadline.check("counting TIFF frames")
    except EOFError:
        pass
    except ParseError:
        raise
    except Exception as exc:  # a damaged directory chain
        raise ParseError(ParseErrorCode.CORRUPT, f"image: TIFF frame {count + 1}: {type(exc).__name__}: {exc}") from exc
    return count


def _ocr_frame(image: Image.Image, index: int, settings: OcrSettings, deadline: Deadline) -> list[OcrLine]:
    """Decode frame ``index`` and OCR it; boxes in pixels of the full-size frame."""
    try:
        image.seek(index)
        _check_dimensions(image)
        if min(image.size) < settings.min_side:
            return []
        image.load()
        pixels = image.size[0] * image.size[1]
        factor = math.ceil(math.sqrt(pixels / settings.max_pixels)) if pixels > settings.max_pixels else 1
        frame = image.reduce(factor) if factor > 1 else image
    except ParseError:
        raise
    except Exception as exc:  # truncated data ("image file is truncated"), a bad stream or palette
        raise ParseError(
            ParseErrorCode.CORRUPT, f"image: frame {index + 1} cannot be decoded ({type(exc).__name__}: {exc})"
        ) from exc
    lines = ocr_image(frame, settings, deadline)
    if factor > 1:
        for line in lines:
            line.x0, line.top, line.x1, line.bottom = (v * factor for v in (line.x0, line.top, line.x1, line.bottom))
    return lines


def _add_paragraphs(builder: BlockBuilder, lines: Sequence[OcrLine], page: int) -> None:
    """One paragraph block per run of lines tesseract put in the same paragraph."""
    start = 0
    for end in range(1, len(lines) + 1):
        if end < len(lines) and lines[end].paragraph == lines[start].paragraph:
            continue
        group = lines[start:end]
        bbox = (
            float(min(line.x0 for line in group)),
            float(min(line.top for line in group)),
            float(max(line.x1 for line in group)),
            float(max(line.bottom for line in group)),
        )
        builder.paragraph(join_lines(group), [Position(page=page, bbox=bbox)], ocr_confidence=mean_confidence(group))
        start = end
