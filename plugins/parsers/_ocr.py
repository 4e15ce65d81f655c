"""OCR through Debian's tesseract 5 (pytesseract): text lines with boxes and confidence.

A component the parsers call (the image parser, the PDF parser for scanned pages), never a
parser itself. The engine and its models are system packages (``tesseract-ocr``,
``tesseract-ocr-chi-sim``, ``tesseract-ocr-eng``, installed by scripts/ensure_system_packages.sh):
nothing is downloaded at run time. When the binary or a language pack is missing,
:func:`ocr_available` says why and callers report the document as needing OCR instead.

Options, under ``ocr`` in the parser options::

    ocr: {languages: "chi_sim+eng", dpi: 300, max_pages: 40, psm: 3, min_confidence: 30}

``languages`` is tesseract's ``-l`` (models joined by ``+``), ``dpi`` the resolution PDF pages
are rendered at, ``max_pages`` how many pages (PDF pages, TIFF frames) one document may have
OCR'd, ``psm`` tesseract's page segmentation mode (3, fully automatic, is its default),
``min_confidence`` the mean word confidence (0-100) under which a line is dropped as noise (a
photograph's texture read as "~ |"), ``max_pixels`` the largest image handed to tesseract.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from include.contract import ParseError, ParseErrorCode
from plugins.parsers._common import Deadline

if TYPE_CHECKING:  # Pillow is loaded by the first OCR, not by importing the PDF or image parser
    from PIL import Image

__all__ = [
    "OcrLine",
    "OcrSettings",
    "engine_name",
    "join_lines",
    "mean_confidence",
    "ocr_available",
    "ocr_image",
]

DEFAULT_LANGUAGES = "chi_sim+eng"
# tesseract's -l: model names joined by "+"; anything else never reaches its command line
_LANGUAGES = re.compile(r"^[A-Za-z0-9_]+(?:\+[A-Za-z0-9_]+)*$")
# Han ideographs (and extension A, compatibility), CJK punctuation and full-width forms: tesseract
# puts a space between every two of them (its word boxes are single characters in Chinese)
_CJK = "\u2e80-\u2fdf\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef"
_CJK_GAP = re.compile(f"(?<=[{_CJK}]) +(?=[{_CJK}])")
_CJK_END = re.compile(f"[{_CJK}]$")
_CJK_START = re.compile(f"^[{_CJK}]")


@dataclass(frozen=True, slots=True)
class OcrSettings:
    languages: str = DEFAULT_LANGUAGES
    dpi: int = 300
    max_pages: int = 40
    psm: int = 3
    min_confidence: float = 30.0
    # about an A3 page at 300 dpi (3508 x 4961 = 17.4 M) twice over; an 8-bit copy is 35 MB and
    # tesseract holds a few; a page box or an image larger than this is scaled down to it
    max_pixels: int = 35_000_000
    # images with a side shorter than this (icons, bullets, spacer GIFs) cannot hold a line of text
    min_side: int = 32

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> OcrSettings:
        """Read ``options["ocr"]``; a value of the wrong kind is ``ParseError(unsupported)``."""
        raw = (options or {}).get("ocr") or {}
        if not isinstance(raw, Mapping):
            raise ParseError(ParseErrorCode.UNSUPPORTED, f"option ocr must be a mapping, not {type(raw).__name__}")
        defaults = cls()
        try:
            settings = cls(
                languages=str(raw.get("languages", defaults.languages)),
                dpi=int(raw.get("dpi", defaults.dpi)),
                max_pages=int(raw.get("max_pages", defaults.max_pages)),
                psm=int(raw.get("psm", defaults.psm)),
                min_confidence=float(raw.get("min_confidence", defaults.min_confidence)),
                max_pixels=int(raw.get("max_pixels", defaults.max_pixels)),
                min_side=int(raw.get("min_side", defaults.min_side)),
            )
        except (TypeError, ValueError) as exc:
            raise ParseError(ParseErrorCode.UNSUPPORTED, f"option ocr: {exc}") from exc
        if not _LANGUAGES.match(settings.languages):
            raise ParseError(ParseErrorCode.UNSUPPORTED, f"option ocr.languages: {settings.languages!r} is not a+b+c")
        # tesseract's --psm values are 0-13; 0 is orientation detection only (no text)
        if not 1 <= settings.psm <= 13 or not 36 <= settings.dpi <= 1200 or settings.max_pixels < 1_000_000:
            raise ParseError(ParseErrorCode.UNSUPPORTED, f"option ocr out of range: {dict(raw)}")
        return settings


@dataclass(slots=True)
class OcrLine:
    """One text line: its box (pixels of the image; PDF points from the page's top-left once
    :mod:`plugins.parsers._pdf_ocr` converts it), mean word confidence (0-100), and the index of
    the paragraph tesseract put it in (lines sharing it form one paragraph, in reading order)."""

    text: str
    x0: float
    top: float
    x1: float
    bottom: float
    confidence: float
    paragraph: int = 0


@functools.cache
def _installed() -> tuple[str, frozenset[str]] | str:
    """(version, languages) of the tesseract on PATH, or why there is none; asked once a process."""
    import pytesseract  # loads only when OCR runs: most documents never need it

    try:
        version = str(pytesseract.get_tesseract_version()).split()[0]
        languages = frozenset(pytesseract.get_languages(config=""))
    except (pytesseract.TesseractNotFoundError, OSError, subprocess.SubprocessError) as exc:
        return f"tesseract is not installed or does not run ({type(exc).__name__}): apt-get install tesseract-ocr"
    except pytesseract.TesseractError as exc:
        return f"tesseract --list-langs failed: {exc}"
    return version, languages


def ocr_available(languages: str = DEFAULT_LANGUAGES) -> str | None:
    """None when tesseract and every model in ``languages`` are installed, else the reason."""
    found = _installed()
    if isinstance(found, str):
        return found
    missing = [lang for lang in languages.split("+") if lang not in found[1]]
    if missing:
        packages = " ".join("tesseract-ocr-" + m.replace("_", "-").lower() for m in missing)
        return f"tesseract has no model for {', '.join(missing)}: apt-get install {packages}"
    return None


def engine_name(settings: OcrSettings) -> str:
    """What read the text, for metadata and lineage: ``tesseract 5.3.0 chi_sim+eng``."""
    found = _installed()
    if isinstance(found, str):
        return "tesseract (not installed)"
    return f"tesseract {found[0]} {settings.languages}"


def ocr_image(image: Image.Image, settings: OcrSettings, deadline: Deadline) -> list[OcrLine]:
    """OCR ``image`` (any mode; alpha is laid on white) into lines, in tesseract's reading order.

    The tesseract process gets what is left of ``deadline`` as its timeout; running over it is
    ``ParseError(timeout)``. Boxes are in pixels of ``image``.
    """
    import pytesseract  # loads only when OCR runs: most documents never need it

    deadline.check("before OCR")
    prepared = _grey(image)
    # pytesseract hands tesseract this process's environment (no per-call env). One OpenMP thread
    # unless the operator set one: workers parallelise by processes, and tesseract's spinning
    # OpenMP threads made a Chinese page 3.5x slower on a busy 2-core machine (25.7 s vs 7.2 s)
    os.environ["OMP_THREAD_LIMIT"] = os.environ.get("OMP_THREAD_LIMIT", "1")
    try:
        data = pytesseract.image_to_data(
            prepared,
            lang=settings.languages,
            config=f"--psm {settings.psm}",
            output_type=pytesseract.Output.DICT,
            timeout=max(deadline.remaining, 0.5),
        )
    except pytesseract.TesseractError as exc:  # tesseract ran and refused the image
        raise ParseError(ParseErrorCode.CORRUPT, f"OCR: tesseract failed: {exc.message}") from exc
    except RuntimeError as exc:  # (TesseractError is one: caught first) a kill: "Tesseract process timeout"
        if "timeout" in str(exc).lower():
            raise ParseError(
                ParseErrorCode.TIMEOUT, f"OCR: time budget of {deadline.seconds:g}s exceeded (tesseract killed)"
            ) from exc
        raise ParseError(ParseErrorCode.CORRUPT, f"OCR: {exc}") from exc
    except OSError as exc:  # the binary vanished since ocr_available() (TesseractNotFoundError)
        raise ParseError(
            ParseErrorCode.UNSUPPORTED, f"OCR: tesseract does not run: {exc}", {"needs_ocr": True}
        ) from exc
    return [line for line in _lines(data) if line.confidence >= settings.min_confidence]


def _grey(image: Image.Image) -> Image.Image:
    """An 8-bit greyscale copy: transparent pixels become white (text drawn on a transparent
    PNG would otherwise be black on black), palettes and 16-bit depths are resolved."""
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        from PIL import Image  # deferred: importing the PDF or image parser must not load Pillow

        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("L")
    if image.mode in ("I;16", "I;16B", "I;16L", "I"):
        # 16-bit scans: scale into 0-255 rather than clip (Pillow's convert("L") clips at 255)
        low, high = cast(tuple[int, int], image.getextrema())
        span = max(high - low, 1)
        return image.point(lambda v: (v - low) * 255 / span).convert("L")
    return image if image.mode == "L" else image.convert("L")


def _lines(data: Mapping[str, Sequence[Any]]) -> list[OcrLine]:
    """Group image_to_data's words (level 5 rows) by block, paragraph and line number."""
    grouped: dict[tuple[int, int, int], list[int]] = {}
    for i, word in enumerate(data["text"]):
        if int(data["level"][i]) != 5 or not str(word).strip() or float(data["conf"][i]) < 0:
            continue
        key = (int(data["block_num"][i]), int(data["par_num"][i]), int(data["line_num"][i]))
        grouped.setdefault(key, []).append(i)
    lines: list[OcrLine] = []
    paragraphs: dict[tuple[int, int], int] = {}
    for (block, par, _), words in grouped.items():
        left = [int(data["left"][i]) for i in words]
        top = [int(data["top"][i]) for i in words]
        right = [int(data["left"][i]) + int(data["width"][i]) for i in words]
        bottom = [int(data["top"][i]) + int(data["height"][i]) for i in words]
        text = _CJK_GAP.sub("", " ".join(str(data["text"][i]).strip() for i in words))
        confidence = sum(float(data["conf"][i]) for i in words) / len(words)
        paragraph = paragraphs.setdefault((block, par), len(paragraphs))
        lines.append(OcrLine(text, min(left), min(top), max(right), max(bottom), round(confidence, 1), paragraph))
    return lines


def join_lines(lines: Sequence[OcrLine]) -> str:
    """The text of consecutive lines of one paragraph: a space between lines, none where a line
    break falls between two CJK characters (Chinese has no spaces between words)."""
    parts: list[str] = []
    for line in lines:
        if parts and not (_CJK_END.search(parts[-1]) and _CJK_START.search(line.text)):
            parts.append(" ")
        parts.append(line.text)
    return "".join(parts)


def mean_confidence(lines: Sequence[OcrLine]) -> float | None:
    """Mean confidence over lines, weighted by their characters; None without lines."""
    chars = sum(len(line.text) for line in lines)
    if not chars:
        return None
    return round(sum(line.confidence * len(line.text) for line in lines) / chars, 1)
