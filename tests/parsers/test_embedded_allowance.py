"""One embedded-file allowance and one deadline per top-level document; a shared member parsed
once (issue 33, points 4, 5 and 6).

Before: each slide of a deck, and each nested document, started from the allowance its
container was given (3 slides x 900 files gave 2,700 parses against a cap of 1,000; 20 nested
DOCX x 900 gave 18,020); a nested document's own usage never reached its container (10 DOCX
copies handed 1.18 GB to parsers against 128 MiB); an ODT member referenced N times was read and
parsed N times. The packages are generated here; what the parsers were handed is counted with a
spy on ``_embedded.parse_document`` (through a file when a forked child does the handing).
"""

from __future__ import annotations

import io
import os
import shutil
import time
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from include.contract import BlockKind, ParsedDocument, RawDocument
from plugins.parsers import _embedded
from plugins.parsers._ooxml_embedded import PackageEmbeds
from tests.parsers.conftest import parse_bytes
from tests.parsers.ooxml import DOCX_TYPE, IMAGE_REL, PACKAGE_REL, add_parts, text_docx

TEXT = "text/plain"


def _deck(slides: int) -> bytes:
    from pptx import Presentation

    prs = Presentation()
    for n in range(1, slides + 1):
        prs.slides.add_slide(prs.slide_layouts[5]).shapes.title.text = f"Slide title {n}"
    buf = io.BytesIO()
    prs.save(buf)
    return buf.getvalue()


def _docx_with_texts(label: str, count: int, size: int = 0) -> bytes:
    """A DOCX embedding ``count`` distinct text files (``size`` bytes each when given)."""
    parts = []
    for i in range(count):
        body = f"{label} file {i} " + (f"{label}{i} " * (size // (len(label) + 8)) if size else "")
        parts.append(("word/document.xml", f"word/embeddings/{label}_{i}.txt", body.encode()))
    return add_parts(text_docx(f"{label} own text."), parts, PACKAGE_REL, TEXT)


def _handed(monkeypatch: pytest.MonkeyPatch, log: Path) -> None:
    """Record the size of every file handed to a parser, from any process (one line each)."""
    real = _embedded.parse_document

    def spy(raw: RawDocument, options: Any = None) -> ParsedDocument:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{len(raw.data)}\n".encode())
        finally:
            os.close(fd)
        return real(raw, options)

    monkeypatch.setattr(_embedded, "parse_document", spy)


def _sizes(log: Path) -> list[int]:
    return [int(line) for line in log.read_text().split()] if log.exists() else []


# --------------------------------------------------------------------------- point 5: files


def test_three_slides_of_900_files_share_one_allowance(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    parts = [
        (f"ppt/slides/slide{s}.xml", f"ppt/embeddings/s{s}_{i}.txt", f"slide {s} file {i}".encode())
        for s in (1, 2, 3)
        for i in range(900)
    ]
    deck = add_parts(_deck(3), parts, PACKAGE_REL, TEXT)
    log = tmp_path / "handed"
    _handed(monkeypatch, log)
    reads: list[str] = []
    real_read = PackageEmbeds._read

    def counting_read(self: PackageEmbeds, part: str, where: str) -> Any:
        reads.append(part)
        return real_read(self, part, where)

    monkeypatch.setattr(PackageEmbeds, "_read", counting_read)
    doc = parse_bytes(deck, "deck.pptx")
    assert len(_sizes(log)) == 1000  # before: 2,700
    assert len(doc.metadata["embedded"]) == 1000
    # the files past the cap are listed, and left unread
    assert len(reads) == 1000  # before: 2,700
    skipped = doc.metadata["embedded_skipped"]
    assert len(skipped) == 1700 and {s["reason"] for s in skipped} == {"more than embed_max_files=1000 embedded files"}
    assert doc.metadata["embedded_usage"]["files"] == 1000
    # the first slide's 900 and 100 of the second are the ones parsed, in document order
    texts = {b.text for b in doc.blocks if b.kind == BlockKind.PARAGRAPH}
    assert "slide 2 file 99" in texts and "slide 2 file 100" not in texts


def test_twenty_nested_docx_of_900_files_share_one_allowance(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    inner = [
        ("word/document.xml", f"word/embeddings/inner{n}.docx", _docx_with_texts(f"in{n}", 900)) for n in range(20)
    ]
    outer = add_parts(text_docx("Outer text."), inner, PACKAGE_REL, DOCX_TYPE)
    log = tmp_path / "handed"
    _handed(monkeypatch, log)
    doc = parse_bytes(outer, "outer.docx")
    handed = len(_sizes(log))
    assert handed == 1000  # before: 18,020 across the two levels
    titles = [len(b.metadata.get("embedded_from", ())) for b in doc.blocks if b.kind == BlockKind.HEADING]
    # the first DOCX and its 900 files, the second and 98 of its: 1,000 files at both levels together
    assert (titles.count(1), titles.count(2)) == (2, 998)
    assert doc.metadata["embedded_usage"]["files"] == 1000
    reasons = {s["reason"] for s in doc.metadata["embedded_skipped"]}
    assert reasons == {"more than embed_max_files=1000 embedded files"}


# --------------------------------------------------------------------------- point 5: bytes, characters


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "forked"])
def test_nested_copies_hand_at_most_the_byte_allowance(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, isolate: bool
) -> None:
    # ten distinct DOCX, each embedding six 1 MiB text files; the allowance is 4 MiB for the tree
    allowance = 4 << 20
    copies = [
        ("word/document.xml", f"word/embeddings/copy{n}.docx", _docx_with_texts(f"c{n}", 6, 1 << 20)) for n in range(10)
    ]
    outer = add_parts(text_docx("Outer text."), copies, PACKAGE_REL, DOCX_TYPE)
    log = tmp_path / "handed"
    _handed(monkeypatch, log)
    # isolate=True forks every parse, nested ones included: their usage comes back as metadata
    doc = parse_bytes(outer, "outer.docx", embed_max_total=allowance, isolate=isolate)
    handed = sum(_sizes(log))
    assert handed <= allowance  # before: 10 x ~4 MiB = ~40 MiB
    assert doc.metadata["embedded_usage"]["bytes"] == handed
    assert any("embed_max_total" in s["reason"] for s in doc.metadata["embedded_skipped"])


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "forked"])
def test_embedded_text_of_the_tree_stays_within_max_chars(isolate: bool) -> None:
    # ten nested DOCX of 6 x 256 KiB text: 15 MiB of text for a document allowed 2 Mi characters
    max_chars = 2 << 20
    copies = [
        ("word/document.xml", f"word/embeddings/copy{n}.docx", _docx_with_texts(f"c{n}", 6, 256 << 10))
        for n in range(10)
    ]
    outer = add_parts(text_docx("Outer text."), copies, PACKAGE_REL, DOCX_TYPE)
    doc = parse_bytes(outer, "outer.docx", max_chars=max_chars, isolate=isolate)
    total = sum(len(b.text) for b in doc.blocks)
    assert total <= max_chars
    assert doc.blocks[0].text == "Outer text."  # the container's own text is kept, not refused
    # what did not fit is listed (cut by the allowance, or refused by the nested parse's cap)
    assert doc.metadata.get("embedded_skipped") or doc.metadata.get("embedded_failed")
    assert doc.metadata["embedded_usage"]["chars"] <= max_chars


# --------------------------------------------------------------------------- point 6: shared members

_ODF_NS = (
    'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
    'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
    'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
    'xmlns:xlink="http://www.w3.org/1999/xlink"'
)


def _odt_referencing(member: bytes, references: int) -> bytes:
    """An ODT whose body points ``references`` times (``draw:object-ole``) at one member."""
    # each frame named apart, as an editor names them (and so the XML is no zip-ratio bomb)
    frames = "".join(
        f'<draw:frame draw:name="Object {n}"><draw:object-ole xlink:href="./Obj1.txt"/></draw:frame>'
        for n in range(references)
    )
    content = (
        f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {_ODF_NS}><office:body><office:text>'
        f"<text:p>Shared object below.</text:p>{frames}</office:text></office:body></office:document-content>"
    ).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("mimetype", "application/vnd.oasis.opendocument.text", zipfile.ZIP_STORED)
        zf.writestr("content.xml", content)
        zf.writestr("Obj1.txt", member)
    return buf.getvalue()


@pytest.mark.parametrize("references", [20, 200_000])
def test_a_member_referenced_many_times_is_parsed_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, references: int
) -> None:
    member = b" ".join(b"word%d" % i for i in range(60_000))  # ~470 KB of text
    data = _odt_referencing(member, references)
    log = tmp_path / "handed"
    _handed(monkeypatch, log)
    tracemalloc.start()
    try:
        doc = parse_bytes(data, "shared.odt")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert _sizes(log) == [len(member)]  # before: 20 parses (200,000: until memory ran out)
    assert [e["name"] for e in doc.metadata["embedded"]] == ["Obj1.txt"]
    assert doc.metadata["embedded_repeats"] == [{"name": "Obj1.txt", "references": references}]
    chars = sum(len(b.text) for b in doc.blocks)
    assert chars < 2 * len(member)  # one copy of the text (before: 20 copies, 9.4 M characters)
    assert peak < 256 << 20  # Python allocations; before, 200,000 copies of the member were read


# --------------------------------------------------------------------------- point 4: one deadline


def _converters() -> list[psutil.Process]:
    """LibreOffice and tesseract processes started by this test process (others' are not counted)."""
    out = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if any(word in proc.name().lower() for word in ("tesseract", "soffice", "oosplash")):
                out.append(proc)
        except psutil.NoSuchProcess:
            pass
    return out


def _word_png(text: str) -> bytes:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (900, 160), "white")
    ImageDraw.Draw(image).text((20, 50), text, fill="black", font_size=48)
    buf = io.BytesIO()
    image.save(buf, "PNG")
    return buf.getvalue()


def _budget_case(make: Callable[[], bytes], budget: float, **options: Any) -> tuple[ParsedDocument, float]:
    data = make()
    started = time.monotonic()
    doc = parse_bytes(data, "many.docx", time_budget_s=budget, **options)
    return doc, time.monotonic() - started


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract not installed")
def test_many_ocr_images_end_within_the_documents_budget() -> None:
    budget = 3.0
    images = [("word/document.xml", f"word/media/scan{n}.png", _word_png(f"Invoice number {n}")) for n in range(60)]

    def make() -> bytes:
        return add_parts(text_docx("Cover page."), images, IMAGE_REL, "image/png")

    doc, seconds = _budget_case(make, budget, engines={"embedded_images": "ocr"})
    assert doc.blocks[0].text == "Cover page."
    skipped = [s for s in doc.metadata.get("embedded_skipped", []) if s["reason"] == "time_budget"]
    done = len(doc.metadata.get("embedded", [])) + len(doc.metadata.get("embedded_failed", []))
    assert skipped and done + len(skipped) == 60  # before: all 60 OCR'd, each with a fresh budget
    assert seconds < budget + 10  # a loose bound: one budget, not one per image
    assert _converters() == []


def _biff2_xls(text: str) -> bytes:
    """A BIFF2 worksheet (Excel 2.x): BOF, one LABEL cell, EOF. LibreOffice reads it."""
    label = text.encode("latin-1")
    bof = b"\x09\x00\x04\x00\x00\x00\x10\x00"
    cell = b"\x04\x00" + (8 + len(label)).to_bytes(2, "little") + b"\x00\x00\x00\x00\x00\x00\x00" + bytes([len(label)])
    return bof + cell + label + b"\x0a\x00\x00\x00"


@pytest.mark.skipif(shutil.which("soffice") is None, reason="LibreOffice (soffice) not installed")
def test_many_legacy_workbooks_end_within_the_documents_budget() -> None:
    budget = 6.0
    sheets = [("word/document.xml", f"word/embeddings/old{n}.xls", _biff2_xls(f"legacy {n}")) for n in range(30)]

    def make() -> bytes:
        return add_parts(text_docx("Cover page."), sheets, PACKAGE_REL, "application/vnd.ms-excel")

    doc, seconds = _budget_case(make, budget)
    assert doc.blocks[0].text == "Cover page."
    skipped = [s for s in doc.metadata.get("embedded_skipped", []) if s["reason"] == "time_budget"]
    assert skipped  # before: 30 LibreOffice runs, one after the other, each with a fresh budget
    assert seconds < budget + 10
    assert _converters() == []
