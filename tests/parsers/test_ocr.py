"""OCR (issue 23, point 2): the tesseract component, PDF page OCR and the image parser.

Fixtures are real: LibreOffice makes a PDF from HTML whose English and Chinese text is known,
pdfium renders its page to images (PNG, JPEG, TIFF, an image-only PDF wrapped by Pillow), and
the OCR'd text is scored against the PDF's own text layer (bag-of-characters recall, as
benchmarks/ocr.py scores). Thresholds sit under what was measured here (English 0.99, Chinese
0.97 at 200 dpi) with room for another tesseract build. Tests that OCR skip with the reason when
tesseract or a language model is missing, the Chinese ones when no CJK font is installed (the
PDF would show boxes); the hostile-input tests need neither (they fail before OCR would run).
"""

from __future__ import annotations

import contextlib
import io
import shutil
import struct
import subprocess
import time
import zlib
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageDraw, ImageOps

from include.contract import ParseError, ParseErrorCode
from plugins.parsers._common import Deadline
from plugins.parsers._embedded import EmbeddedFile, parse_embedded
from plugins.parsers._ocr import OcrSettings, join_lines, ocr_available, ocr_image
from plugins.parsers._pdf_ocr import _render_scale, ocr_pdf_pages
from tests.parsers.conftest import SOFFICE, parse_bytes

OCR_MISSING = ocr_available("chi_sim+eng")
needs_tesseract = pytest.mark.skipif(OCR_MISSING is not None, reason=f"OCR unavailable: {OCR_MISSING}")
_FC_LIST = shutil.which("fc-list")
HAS_CJK_FONT = bool(_FC_LIST and subprocess.run([_FC_LIST, ":lang=zh"], capture_output=True, text=True).stdout.strip())
needs_cjk_font = pytest.mark.skipif(
    not HAS_CJK_FONT, reason="no CJK font (fc-list :lang=zh is empty): apt-get install fonts-wqy-microhei"
)

ENGLISH = (
    "Invoices are processed within thirty days of receipt. The quick brown fox jumps over the lazy dog. "
    "Payments above five thousand euros need a second signature from the finance department."
)
CHINESE = (
    "发票在收到后三十天内处理。超过五千欧元的付款需要财务部门的第二个签名。这是一个用于测试光学字符识别的中文段落。"
)
DPI = 200
# (text layer, greyscale render cropped to the text, the crop box in points)
PageFixture = tuple[str, Image.Image, tuple[float, float, float, float]]


def _recall(truth: str, output: str) -> float:
    t = Counter(ch for ch in truth if not ch.isspace())
    o = Counter(ch for ch in output if not ch.isspace())
    return sum((t & o).values()) / max(sum(t.values()), 1)


def _html_pdf(html: str, tmp: Path) -> bytes:
    """A PDF LibreOffice makes from ``html`` (Writer's HTML import, not the web-page export)."""
    if SOFFICE is None:
        pytest.skip("LibreOffice (soffice) not installed: apt-get install libreoffice-writer")
    (tmp / "page.html").write_text(html, encoding="utf-8")
    subprocess.run(
        [
            SOFFICE,
            "--headless",
            f"-env:UserInstallation={(tmp / 'profile').as_uri()}",
            "--infilter=HTML (StarWriter)",
            "--convert-to",
            "pdf:writer_pdf_Export",
            "--outdir",
            str(tmp),
            str(tmp / "page.html"),
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    return (tmp / "page.pdf").read_bytes()


def _page(pdf_bytes: bytes) -> PageFixture:
    """(text layer, 200-dpi greyscale render cropped to the text, crop box in points)."""
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(pdf_bytes)
    page = pdf[0]
    truth = page.get_textpage().get_text_range()
    image = page.render(scale=DPI / 72, grayscale=True).to_pil()
    left, top, right, bottom = ImageOps.invert(image).getbbox() or (0, 0, *image.size)
    box = (max(left - 40, 0), max(top - 40, 0), min(right + 40, image.width), min(bottom + 40, image.height))
    pdf.close()
    return truth, image.crop(box), (box[0] * 72 / DPI, box[1] * 72 / DPI, box[2] * 72 / DPI, box[3] * 72 / DPI)


@pytest.fixture(scope="module")
def english(tmp_path_factory: pytest.TempPathFactory) -> PageFixture:
    html = f"<html><body><h1>Quarterly report</h1><p>{ENGLISH}</p></body></html>"
    return _page(_html_pdf(html, tmp_path_factory.mktemp("en")))


@pytest.fixture(scope="module")
def chinese(tmp_path_factory: pytest.TempPathFactory) -> PageFixture:
    if not HAS_CJK_FONT:
        pytest.skip("no CJK font (fc-list :lang=zh is empty): apt-get install fonts-wqy-microhei")
    html = f'<html><body><h1>季度报告</h1><p lang="zh-CN">{CHINESE}</p></body></html>'
    return _page(_html_pdf(html, tmp_path_factory.mktemp("zh")))


def _encoded(image: Image.Image, fmt: str, **kwargs: object) -> bytes:
    # fresh copies: Pillow keeps a save's settings on the image object (encoderinfo), and a
    # fixture image saved once as TIFF then saved again with other frames failed in its encoder
    if "append_images" in kwargs:
        kwargs["append_images"] = [frame.copy() for frame in kwargs["append_images"]]  # type: ignore[attr-defined]
    buf = io.BytesIO()
    image.copy().save(buf, fmt, **kwargs)
    return buf.getvalue()


# --------------------------------------------------------------------------- recall, positions


@needs_tesseract
@pytest.mark.parametrize(("fmt", "name"), [("PNG", "scan.png"), ("JPEG", "scan.jpg"), ("TIFF", "scan.tif")])
def test_page_image_english_recall_and_boxes(english: PageFixture, fmt: str, name: str) -> None:
    truth, image, _ = english
    doc = parse_bytes(_encoded(image, fmt), name)
    assert doc.parser == "image" and doc.engine == "ocr"
    assert _recall(truth, doc.text) >= 0.95, doc.text
    assert doc.metadata["ocr_used"] is True and doc.metadata["ocr_engine"].startswith("tesseract 5")
    assert doc.metadata["ocr_confidence"] > 80 and doc.metadata["bbox_units"] == "pixels"
    for block in doc.blocks:
        (pos,) = block.positions
        assert pos.bbox is not None
        x0, top, x1, bottom = pos.bbox
        assert pos.page == 1 and 0 <= x0 < x1 <= image.width and 0 <= top < bottom <= image.height
    assert doc.blocks[0].text == "Quarterly report"  # the heading is its own paragraph, above the body


@needs_tesseract
@needs_cjk_font
def test_chinese_page_recall_without_spaces_between_characters(chinese: PageFixture) -> None:
    truth, image, _ = chinese
    doc = parse_bytes(_encoded(image, "PNG"), "scan.png")
    assert _recall(truth, doc.text) >= 0.9, doc.text
    assert "三十天内处理" in doc.text and "光学字符识别" in doc.text
    body = max((b.text for b in doc.blocks), key=len)
    assert " " not in body, body  # tesseract put a space between every two characters


@needs_tesseract
@needs_cjk_font
def test_multipage_tiff_is_one_page_per_frame(english: PageFixture, chinese: PageFixture) -> None:
    frames = [english[1], chinese[1]]
    data = _encoded(frames[0], "TIFF", save_all=True, append_images=frames[1:])
    doc = parse_bytes(data, "batch.tiff")
    assert doc.metadata["pages"] == 2
    pages = {b.positions[0].page for b in doc.blocks}
    assert pages == {1, 2}
    second = "".join(b.text for b in doc.blocks if b.positions[0].page == 2)
    assert _recall(chinese[0], second) >= 0.9 and "Quarterly" not in second


@needs_tesseract
def test_tiff_frames_over_ocr_max_pages_are_listed_not_read(english: PageFixture) -> None:
    data = _encoded(english[1], "TIFF", save_all=True, append_images=[english[1]] * 2)
    doc = parse_bytes(data, "batch.tif", ocr={"max_pages": 1})
    assert {b.positions[0].page for b in doc.blocks} == {1}
    assert doc.metadata["ocr_pages_skipped"] == [2, 3]


@needs_tesseract
def test_transparent_png_text_is_read_on_white() -> None:
    image = Image.new("RGBA", (900, 120), (0, 0, 0, 0))  # black text on a fully transparent canvas
    ImageDraw.Draw(image).text((20, 30), "Transparent background text", fill=(0, 0, 0, 255), font_size=48)
    doc = parse_bytes(_encoded(image, "PNG"), "logo.png")
    assert "Transparent background text" in doc.text


@needs_tesseract
@pytest.mark.parametrize("fmt", ["BMP", "GIF", "WEBP"])
def test_other_formats_are_sniffed_by_their_bytes_and_read(fmt: str) -> None:
    image = Image.new("L", (700, 90), 255)
    ImageDraw.Draw(image).text((12, 16), "Bitmap text here", fill=0, font_size=48)
    doc = parse_bytes(_encoded(image, fmt), "upload.bin")  # no telling name: the bytes decide
    assert doc.parser == "image" and doc.metadata["image_format"] == fmt and "Bitmap text here" in doc.text


# --------------------------------------------------------------------------- image-only PDFs


@needs_tesseract
def test_ocr_pdf_pages_on_an_image_only_pdf(english: PageFixture) -> None:
    import pypdfium2 as pdfium

    truth, image, _ = english
    # an image-only PDF as a scanner writes it: each page one picture, no text layer; Pillow sizes
    # the page from the resolution, so points map back onto the cropped render
    data = _encoded(image, "PDF", resolution=float(DPI), save_all=True, append_images=[image])
    pdf = pdfium.PdfDocument(data)
    assert pdf[0].get_textpage().get_text_range().strip() == ""
    result = ocr_pdf_pages(pdf, [0, 1], {"ocr": {"max_pages": 1, "dpi": DPI}}, Deadline(60))
    assert result.unavailable is None and result.engine.startswith("tesseract 5") and result.skipped == [1]
    lines = result.pages[0]
    assert _recall(truth, join_lines(lines)) >= 0.95
    width, height = pdf[0].get_size()
    heading = lines[0]
    assert heading.text == "Quarterly report"
    assert 0 <= heading.x0 < heading.x1 <= width and 0 <= heading.top < heading.bottom <= height
    # the heading sits 40 px (14.4 pt) inside the crop's margin: boxes are points from the top-left
    assert 5 <= heading.top <= 30 and 5 <= heading.x0 <= 30, heading


def test_ocr_pdf_pages_reports_a_missing_language_model() -> None:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument.new()
    pdf.new_page(200, 200)
    result = ocr_pdf_pages(pdf, [0], {"ocr": {"languages": "eng+zz_nonexistent"}}, Deadline(10))
    assert result.pages == {} and result.unavailable is not None and "zz_nonexistent" in result.unavailable


@needs_tesseract
def test_huge_page_box_is_refused_and_large_one_rendered_within_the_pixel_cap() -> None:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument.new()
    pdf.new_page(14400, 14400)  # 200 x 200 inches, PDF's largest page: 3.6 G pixels at 300 dpi
    pdf.new_page(2000, 3000)  # 28 x 42 inches: 540 M pixels at 300 dpi, rendered smaller
    result = ocr_pdf_pages(pdf, [0, 1], {}, Deadline(60))
    assert "dpi" in result.refused[0] and 0 not in result.pages
    assert result.pages[1] == []  # rendered and OCR'd (a blank page: no text)
    settings = OcrSettings()
    scale, _ = _render_scale((2000, 3000), settings)
    assert 2000 * 3000 * scale * scale <= settings.max_pixels


# --------------------------------------------------------------------------- engine, availability


def test_engine_off_skips_images_as_empty() -> None:
    image = Image.new("L", (400, 200), 255)
    with pytest.raises(ParseError) as err:
        parse_bytes(_encoded(image, "PNG"), "a.png", engines={"image": "off"})
    assert err.value.code is ParseErrorCode.EMPTY and "OCR is off" in err.value.message


def test_missing_language_model_is_unsupported_with_needs_ocr() -> None:
    image = Image.new("L", (400, 200), 255)
    with pytest.raises(ParseError) as err:
        parse_bytes(_encoded(image, "PNG"), "a.png", ocr={"languages": "zz_nonexistent"})
    assert err.value.code is ParseErrorCode.UNSUPPORTED and err.value.details == {"needs_ocr": True}
    assert "zz_nonexistent" in err.value.message


def test_bad_ocr_options_are_typed() -> None:
    with pytest.raises(ParseError) as err:
        OcrSettings.from_options({"ocr": {"languages": "eng; rm -rf /"}})
    assert err.value.code is ParseErrorCode.UNSUPPORTED
    with pytest.raises(ParseError):
        OcrSettings.from_options({"ocr": {"dpi": "many"}})


@needs_tesseract
def test_tesseract_timeout_is_a_typed_timeout(english: PageFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    import pytesseract

    given: dict[str, float] = {}

    def killed(*args: object, timeout: float = 0, **kwargs: object) -> None:
        given["timeout"] = timeout
        raise RuntimeError("Tesseract process timeout")  # what pytesseract raises when it kills tesseract

    # no race against the clock: tesseract is "killed" at once, and the time it was given is checked
    monkeypatch.setattr(pytesseract, "image_to_data", killed)
    with pytest.raises(ParseError) as err:
        ocr_image(english[1], OcrSettings(), Deadline(30.0))
    assert err.value.code is ParseErrorCode.TIMEOUT
    assert 0.5 <= given["timeout"] <= 30.0


@needs_tesseract
def test_blank_image_is_empty_after_ocr() -> None:
    with pytest.raises(ParseError) as err:
        parse_bytes(_encoded(Image.new("L", (600, 400), 255), "PNG"), "blank.png")
    assert err.value.code is ParseErrorCode.EMPTY and err.value.details["ocr_used"] is True


@needs_tesseract
def test_embedded_images_icons_skipped_text_read(english: PageFixture) -> None:
    icon = _encoded(Image.new("RGB", (16, 16), (200, 0, 0)), "PNG")
    files = [
        EmbeddedFile("word/media/image1.png", icon, "image/png"),
        EmbeddedFile("word/media/image2.png", _encoded(english[1], "PNG"), "image/png"),
    ]
    result = parse_embedded(files, {"engines": {"embedded_images": "ocr"}})
    assert [f["name"] for f in result.parsed] == ["word/media/image2.png"]
    assert result.failed[0]["code"] == "empty" and "too small" in result.failed[0]["message"]
    assert any("Invoices are processed" in b.text for b in result.blocks)


# --------------------------------------------------------------------------- hostile images


def _png_header(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    iend = b"IEND"
    return (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", len(ihdr))
        + chunk
        + struct.pack(">I", zlib.crc32(chunk))
        + struct.pack(">I", 0)
        + iend
        + struct.pack(">I", zlib.crc32(iend))
    )


@pytest.mark.parametrize(("width", "height"), [(100_000, 100_000), (12_000, 9_000)])
def test_bomb_dimensions_are_refused_before_decoding(width: int, height: int) -> None:
    # 10 G pixels (Pillow itself raises) and 108 M (over its threshold, where it only warns)
    with pytest.raises(ParseError) as err:
        parse_bytes(_png_header(width, height), "bomb.png")
    assert err.value.code is ParseErrorCode.BOMB


def test_zero_size_and_garbage_are_corrupt() -> None:
    for data in (_png_header(0, 50), b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, b"GIF89a" + b"\xff" * 10):
        with pytest.raises(ParseError) as err:
            parse_bytes(data, "x.png")
        assert err.value.code is ParseErrorCode.CORRUPT, data[:12]


def test_tiny_image_is_empty_without_ocr() -> None:
    with pytest.raises(ParseError) as err:
        parse_bytes(_encoded(Image.new("RGB", (24, 300), (0, 0, 0)), "GIF"), "bullet.gif")
    assert err.value.code is ParseErrorCode.EMPTY and "too small" in err.value.message


@needs_tesseract
def test_truncated_image_is_corrupt(english: PageFixture) -> None:
    data = _encoded(english[1], "PNG")
    with pytest.raises(ParseError) as err:
        parse_bytes(data[: len(data) // 2], "cut.png")
    assert err.value.code is ParseErrorCode.CORRUPT and "frame 1" in err.value.message


@needs_tesseract
def test_tiff_frame_count_over_max_pages_is_too_large() -> None:
    frame = Image.new("L", (40, 40), 255)
    data = _encoded(frame, "TIFF", save_all=True, append_images=[frame] * 9)
    with pytest.raises(ParseError) as err:
        parse_bytes(data, "fax.tif", max_pages=5)
    assert err.value.code is ParseErrorCode.TOO_LARGE


@needs_tesseract
def test_tiff_whose_directories_loop_ends() -> None:
    # one 40x40 8-bit strip; the IFD's "next IFD" offset points back at itself
    pixels = b"\xff" * 1600
    entries = [(256, 3, 1, 40), (257, 3, 1, 40), (258, 3, 1, 8), (259, 3, 1, 1), (262, 3, 1, 1)]
    entries += [(273, 4, 1, 8 + 2 + 9 * 12 + 4), (278, 3, 1, 40), (279, 4, 1, 1600), (277, 3, 1, 1)]
    ifd = struct.pack("<H", len(entries))
    ifd += b"".join(struct.pack("<HHII", tag, kind, 1, value) for tag, kind, _, value in entries)
    data = b"II*\x00" + struct.pack("<I", 8) + ifd + struct.pack("<I", 8) + pixels
    with pytest.raises(ParseError) as err:
        parse_bytes(data, "loop.tif", max_pages=50)
    assert err.value.code in (ParseErrorCode.TOO_LARGE, ParseErrorCode.CORRUPT, ParseErrorCode.EMPTY)


# --------------------------------------------------------------------------- fuzz

_FUZZ_BUDGET_S = 5.0


def _seeds() -> list[tuple[str, bytes]]:
    image = Image.new("L", (260, 60), 255)
    ImageDraw.Draw(image).text((8, 12), "Fuzz seed 42", fill=0, font_size=28)
    out = [(f"seed.{ext}", _encoded(image, fmt)) for fmt, ext in (("PNG", "png"), ("JPEG", "jpg"), ("GIF", "gif"))]
    out += [("seed.bmp", _encoded(image, "BMP")), ("seed.webp", _encoded(image, "WEBP"))]
    out.append(("seed.tif", _encoded(image, "TIFF", save_all=True, append_images=[image])))
    return out


SEEDS = _seeds()


@st.composite
def _mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    name, seed = draw(st.sampled_from(SEEDS))
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(data) - 1))
        how = draw(st.sampled_from(("flip", "cut", "insert")))
        if how == "flip":
            data[at] ^= draw(st.integers(1, 255))
        elif how == "cut":
            del data[at:]
            if not data:
                data = bytearray(seed[:8])
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
    return name, bytes(data)


@needs_tesseract
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated())
def test_fuzzed_images_raise_only_parse_errors_within_budget(case: tuple[str, bytes]) -> None:
    name, data = case
    started = time.monotonic()
    with contextlib.suppress(ParseError):
        parse_bytes(data, name, time_budget_s=_FUZZ_BUDGET_S, max_pages=20)
    assert time.monotonic() - started < _FUZZ_BUDGET_S + 15.0  # bounds a hang, not a speed


# --------------------------------------------------------------------------- real scans

REALDOCS = Path(__file__).resolve().parents[2].parent / "shared" / "realdocs"


def _realdoc(origin_suffix: str) -> Path:
    """A third-party file of ../shared/realdocs by the end of its origin path (manifest.json)."""
    import json

    manifest = REALDOCS / "manifest.json"
    if not manifest.exists():
        pytest.skip(f"no real-document corpus at {REALDOCS}")
    entries = json.loads(manifest.read_text(encoding="utf-8"))
    entries = entries if isinstance(entries, list) else entries.get("files", [])
    for entry in entries:
        if str(entry.get("origin", {}).get("path", "")).endswith(origin_suffix):
            return REALDOCS / str(entry["file"])
    pytest.skip(f"{origin_suffix} is not in {manifest}")


@needs_tesseract
@pytest.mark.parametrize(
    ("origin", "expected"),
    [
        ("tika-parser-pdf-module/src/test/resources/test-documents/testOCR.pdf", "Happy New Year 2003!"),
        ("tests/test_files/MEDRPT-2024-PAT-3847_medical_report_scan.pdf", "SEATTLE GENERAL HOSPITAL"),
    ],
)
def test_real_scanned_pdfs_from_other_projects(origin: str, expected: str) -> None:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(_realdoc(origin)))
    assert pdf[0].get_textpage().get_text_range().strip() == ""  # a scan: no text layer
    result = ocr_pdf_pages(pdf, [0], {}, Deadline(60))
    assert expected in join_lines(result.pages[0])


@needs_tesseract
def test_ocr_stops_while_the_parse_still_has_time_and_lists_the_pages_left() -> None:
    import pypdfium2 as pdfium

    out = io.BytesIO()
    pages = [Image.new("L", (400, 400), 255) for _ in range(3)]
    pages[0].save(out, "PDF", save_all=True, append_images=pages[1:])
    pdf = pdfium.PdfDocument(out.getvalue())
    try:
        # 10 s budget with 9 s gone: 1 s left is less than the 15% kept for the rest of the parse
        nearly_spent = Deadline(10.0, started=time.monotonic() - 9.0)
        result = ocr_pdf_pages(pdf, [0, 1, 2], {}, nearly_spent)
    finally:
        pdf.close()
    assert result.pages == {} and result.out_of_time == [0, 1, 2]
