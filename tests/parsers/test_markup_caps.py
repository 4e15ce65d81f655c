"""Caps on markup and zip containers that hold before the expensive part (issue 33, points 4 and 9).

Every hostile input is generated here: an MHTML of 300,000 tiny parts, pages past ``max_chars``,
zips whose central directory holds 300,000 entries (honestly, through a zip64 end record, or
behind a classic record that claims one), EPUBs with encrypted content documents and XHTML with
an internal DTD subset. Outcomes are counted (objects built, traced peak memory, characters),
never timed.
"""

from __future__ import annotations

import email.message
import hashlib
import io
import struct
import tracemalloc
import zipfile
import zlib
from collections.abc import Callable
from typing import Any

import pytest

from include.contract import ParseError, ParseErrorCode
from plugins.parsers import mhtml
from plugins.parsers._common import Limits
from plugins.parsers._ooxml import check_zip
from plugins.parsers._zip import central_directory
from plugins.parsers.registry import ParseContext, get_parser
from plugins.parsers.sniff import DOCX, EPUB, ODT, PPTX, XLSX
from tests.parsers.conftest import parse_bytes

MiB = 1 << 20


def traced_peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    """``fn()``'s result (or the ParseError it raised) and the peak bytes it allocated."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        try:
            outcome: Any = fn()
        except ParseError as exc:
            outcome = exc
        return outcome, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture
def count_instances(monkeypatch: pytest.MonkeyPatch) -> Callable[[type], list[int]]:
    """``count_instances(cls)`` -> a one-item list counting the ``cls.__init__`` calls from now on."""

    def install(cls: type) -> list[int]:
        counter = [0]
        original = cls.__init__  # type: ignore[misc]

        def counting(self: Any, *args: Any, **kwargs: Any) -> None:
            counter[0] += 1
            original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counting)
        return counter

    return install


# --------------------------------------------------------------------------- MHTML


def mhtml_archive(root_html: bytes, tiny_parts: int = 0, extra: bytes = b"") -> bytes:
    head = (
        b'MIME-Version: 1.0\r\nContent-Type: multipart/related; boundary="b"; type="text/html"\r\n\r\n'
        b"--b\r\nContent-Type: text/html; charset=utf-8\r\nContent-Location: https://example.org/\r\n\r\n"
    )
    part = b"--b\r\nContent-Type: text/plain\r\n\r\nx\r\n"
    return head + root_html + b"\r\n" + extra + part * tiny_parts + b"--b--\r\n"


def test_mhtml_with_300k_tiny_parts_is_refused_before_any_part_is_parsed(
    count_instances: Callable[[type], list[int]],
) -> None:
    data = mhtml_archive(b"<html><body><p>root</p></body></html>", tiny_parts=300_000)
    messages = count_instances(email.message.Message)
    outcome, peak = traced_peak(lambda: mhtml.parse_mhtml(data, ParseContext()))
    assert isinstance(outcome, ParseError) and outcome.code == ParseErrorCode.TOO_LARGE
    assert "MIME parts" in outcome.message
    # only the top-level headers became a message object (email's whole parse built 300,001)
    assert messages[0] <= 2
    assert peak < 16 * MiB, f"{peak / MiB:.1f} MiB traced for a {len(data) / MiB:.0f} MiB archive"


def test_mhtml_under_the_part_cap_still_reads_nested_parts_in_order() -> None:
    nested = (
        b'--b\r\nContent-Type: multipart/alternative; boundary="inner"\r\n\r\npreamble\r\n'
        b"--inner\r\nContent-Type: text/csv\r\nContent-Location: https://example.org/a.csv\r\n\r\nk,v\r\nfirst,1\r\n"
        b"--inner\r\nContent-Type: text/csv\r\nContent-Location: https://example.org/b.csv\r\n\r\nk,v\r\nsecond,2\r\n"
        b"--inner--\r\nepilogue\r\n"
    )
    doc = mhtml.parse_mhtml(mhtml_archive(b"<html><body><p>root page</p></body></html>", 3, nested), ParseContext())
    text = doc.text
    assert text.index("root page") < text.index("first") < text.index("second")
    assert "preamble" not in text and "epilogue" not in text
    assert doc.metadata["mhtml_parts"] == 6  # root, two csv, three tiny text parts


def big_page(paragraphs: int, words: int = 100) -> bytes:
    para = b"<p>" + b"lorem ipsum " * words + b"</p>"
    return b"<html><head><title>big</title></head><body>" + para * paragraphs + b"</body></html>"


def test_html_root_over_max_chars_is_too_large_with_memory_bounded() -> None:
    page = big_page(2_000)  # 2.4 M characters of text
    ctx = ParseContext(file_name="big.html", media_type="text/html", options={"max_chars": 100_000})
    spec = get_parser("text/html")
    assert spec is not None
    outcome, peak = traced_peak(lambda: spec.fn(page, ctx))
    assert isinstance(outcome, ParseError) and outcome.code == ParseErrorCode.TOO_LARGE
    assert "max_chars" in outcome.message
    assert peak < 20 * len(page), f"{peak / MiB:.1f} MiB traced for a {len(page) / MiB:.1f} MiB page"
    # under the cap the same page parses whole
    doc = spec.fn(page, ParseContext(file_name="big.html", media_type="text/html", options={"max_chars": 4 * MiB}))
    assert len(doc.text) > 2_000_000


def test_mhtml_root_and_its_documents_are_bounded_by_max_chars() -> None:
    root_over = mhtml_archive(big_page(200))  # ~240,000 characters in the root page
    outcome, peak = traced_peak(lambda: mhtml.parse_mhtml(root_over, ParseContext(options={"max_chars": 50_000})))
    assert isinstance(outcome, ParseError) and outcome.code == ParseErrorCode.TOO_LARGE
    assert peak < 20 * len(root_over)
    # each alone under the cap, together over it: the page plus an attached text document
    attached = b"--b\r\nContent-Type: text/plain\r\nContent-Location: https://example.org/n.txt\r\n\r\n"
    attached += b"notes " * 6_000 + b"\r\n"
    both = mhtml_archive(big_page(25), extra=attached)  # ~30,000 + ~36,000 characters
    assert len(mhtml.parse_mhtml(both, ParseContext()).text) > 60_000
    with pytest.raises(ParseError) as err:
        mhtml.parse_mhtml(both, ParseContext(options={"max_chars": 50_000}))
    assert err.value.code == ParseErrorCode.TOO_LARGE


# --------------------------------------------------------------------------- zip central directory


def crowded_zip(entries: int, zip64: bool = True, stub: bytes = b"") -> bytes:
    """One stored ``mimetype`` member (an EPUB's first entry) named ``entries`` times in the directory.

    With ``zip64`` the end records state the count honestly; without, a classic record claims
    one entry while the directory's size covers them all (zipfile reads by size).
    """
    name, content = b"mimetype", b"application/epub+zip"
    crc = zlib.crc32(content)
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, crc, len(content), len(content), len(name), 0)
    local += name + content
    entry = struct.pack(
        "<IHHHHHHIIIHHHHHII",
        0x02014B50,
        20,
        20,
        0,
        0,
        0,
        0,
        crc,
        len(content),
        len(content),
        len(name),
        0,
        0,
        0,
        0,
        0,
        0,
    )
    directory = (entry + name) * entries
    offset = len(local)
    if zip64:
        record = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, entries, entries, len(directory), offset)
        locator = struct.pack("<IIQI", 0x07064B50, 0, offset + len(directory), 1)
        end = record + locator + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, len(directory), offset, 0)
    else:
        end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(directory), offset, 0)
    return stub + local + directory + end


@pytest.mark.parametrize("zip64", [True, False], ids=["zip64-end-record", "classic-record-claiming-one"])
def test_zip_with_300k_entries_is_a_bomb_before_zipfile_builds_them(
    zip64: bool, count_instances: Callable[[type], list[int]]
) -> None:
    data = crowded_zip(300_000, zip64=zip64)
    with zipfile.ZipFile(io.BytesIO(crowded_zip(3, zip64=zip64))) as small:  # the layout is a real zip
        assert len(small.infolist()) == 3 and small.read("mimetype") == b"application/epub+zip"
    infos = count_instances(zipfile.ZipInfo)
    outcome, peak = traced_peak(lambda: check_zip(data, Limits(), "epub"))
    assert isinstance(outcome, ParseError) and outcome.code == ParseErrorCode.BOMB
    assert infos[0] == 0  # zipfile built 300,000 ZipInfo objects (144 MiB traced) before the count
    assert peak < 4 * MiB, f"{peak / MiB:.1f} MiB traced"


def test_every_zip_based_parser_refuses_the_crowded_directory(count_instances: Callable[[type], list[int]]) -> None:
    data = crowded_zip(150_000)
    infos = count_instances(zipfile.ZipInfo)
    for media in (DOCX, XLSX, PPTX, ODT, EPUB):
        spec = get_parser(media)
        assert spec is not None
        with pytest.raises(ParseError) as err:
            spec.fn(data, ParseContext(file_name="x", media_type=media))
        assert err.value.code == ParseErrorCode.BOMB, media
    assert infos[0] == 0
    # end to end, through sniffing (the stored mimetype member names it an EPUB)
    with pytest.raises(ParseError) as err:
        parse_bytes(data, "book.epub")
    assert err.value.code == ParseErrorCode.BOMB


def test_directory_count_matches_zipfile_with_a_stub_and_at_the_limit() -> None:
    stub = b"#!/bin/sh\nexit 0\n" * 10  # a self-extractor's prefix moves the directory
    data = crowded_zip(40, zip64=False, stub=stub)
    found = central_directory(data)
    assert found is not None and found.entries == 1  # what the record claims
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert len(zf.infolist()) == 40
    check_zip(data, Limits(zip_max_entries=40), "t")  # exactly at the limit: opened
    with pytest.raises(ParseError) as err:
        check_zip(data, Limits(zip_max_entries=39), "t")
    assert err.value.code == ParseErrorCode.BOMB
    plain = io.BytesIO()
    with zipfile.ZipFile(plain, "w") as zf:
        for i in range(5):
            zf.writestr(f"f{i}.txt", "x")
    assert len(check_zip(plain.getvalue(), Limits(zip_max_entries=5), "t").infolist()) == 5


# --------------------------------------------------------------------------- EPUB encryption

IDPF = "http://www.idpf.org/2008/embedding"
AES = "http://www.w3.org/2001/04/xmlenc#aes128-cbc"
UID = "urn:uuid:12345678-1234-1234-1234-123456789abc"
_CONTAINER = (
    '<container xmlns="urn:oasis:names:tc:opendocument:xmlns:container" version="1.0"><rootfiles>'
    '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>'
)


def obfuscate(data: bytes) -> bytes:
    """IDPF font obfuscation (OCF 3.0, 4.2): the first 1040 bytes XORed with SHA-1 of the identifier."""
    key = hashlib.sha1(UID.encode()).digest()
    head = bytes(b ^ key[i % len(key)] for i, b in enumerate(data[:1040]))
    return head + data[1040:]


def chapter(text: str) -> bytes:
    # long enough that text lies past the 1040 obfuscated bytes, as in any real chapter
    filler = "".join(f"<p>{text} paragraph {i}</p>" for i in range(40))
    return (
        f'<html xmlns="http://www.w3.org/1999/xhtml"><head><title>t</title></head><body>{filler}</body></html>'.encode()
    )


def encrypted_epub(chapters: dict[str, bytes], encrypted: dict[str, str]) -> bytes:
    items = "".join(f'<item id="{n}" href="{n}.xhtml" media-type="application/xhtml+xml"/>' for n in chapters)
    items += '<item id="img" href="cover.png" media-type="image/png"/>'
    refs = "".join(f'<itemref idref="{n}"/>' for n in chapters)
    opf = (
        '<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">'
        f'<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="id">{UID}</dc:identifier>'
        f"<dc:title>Locked</dc:title></metadata><manifest>{items}</manifest><spine>{refs}</spine></package>"
    )
    entries = "".join(
        f'<enc:EncryptedData><enc:EncryptionMethod Algorithm="{alg}"/><enc:CipherData>'
        f'<enc:CipherReference URI="{uri}"/></enc:CipherData></enc:EncryptedData>'
        for uri, alg in encrypted.items()
    )
    encryption = (
        '<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
        f'xmlns:enc="http://www.w3.org/2001/04/xmlenc#">{entries}</encryption>'
    )
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")
        zf.writestr("META-INF/container.xml", _CONTAINER)
        zf.writestr("META-INF/encryption.xml", encryption)
        zf.writestr("OEBPS/content.opf", opf)
        zf.writestr("OEBPS/cover.png", hashlib.sha256(b"scrambled image").digest() * 8)
        for name, body in chapters.items():
            zf.writestr(f"OEBPS/{name}.xhtml", body)
    return buf.getvalue()


def test_obfuscated_content_document_is_skipped_and_recorded_not_indexed_as_garbage() -> None:
    data = encrypted_epub(
        {"c1": obfuscate(chapter("hidden")), "c2": chapter("readable")},
        {"OEBPS/c1.xhtml": IDPF},  # font obfuscation misapplied to a chapter (the old code read it)
    )
    doc = parse_bytes(data, "locked.epub")
    assert "readable paragraph 39" in doc.text
    assert "hidden" not in doc.text  # its last 39 paragraphs lie past the scrambled bytes
    assert all(ch.isprintable() or ch == "\n" for ch in doc.text)
    assert doc.metadata["encrypted_parts"] == [{"path": "OEBPS/c1.xhtml", "algorithm": IDPF}]
    assert doc.metadata["chapters"] == 1


def test_a_drm_encrypted_image_costs_no_text() -> None:
    data = encrypted_epub({"c1": chapter("readable")}, {"OEBPS/cover.png": AES})
    doc = parse_bytes(data, "pictures-locked.epub")  # was refused whole as encrypted
    assert "readable paragraph 39" in doc.text and "encrypted_parts" not in doc.metadata


def test_epub_whose_every_content_document_is_encrypted_is_a_typed_error() -> None:
    data = encrypted_epub(
        {"c1": obfuscate(chapter("one")), "c2": chapter("two")}, {"OEBPS/c1.xhtml": IDPF, "OEBPS/c2.xhtml": AES}
    )
    with pytest.raises(ParseError) as err:
        parse_bytes(data, "locked.epub")
    assert err.value.code == ParseErrorCode.ENCRYPTED
    assert [p["path"] for p in err.value.details["encrypted_parts"]] == ["OEBPS/c1.xhtml", "OEBPS/c2.xhtml"]


# --------------------------------------------------------------------------- XHTML internal subset

SUBSET_PAGE = b"""<?xml version="1.0" encoding="utf-8"?>
<!-- a comment before the doctype ]> -->
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" "http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd" [
  <!ENTITY secret "ENTITYVALUE ]> with a bracket">
  <!-- ]> inside a comment -->
  <!ENTITY lol '&secret;&secret;&secret;&secret;'>
  <!ATTLIST p class CDATA "declared">
]>
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>Subset</title></head>
<body><h1>Heading</h1><p>before &secret; &lol; after</p></body></html>"""


@pytest.mark.parametrize("media", ["application/xhtml+xml", "text/html"])
def test_xhtml_internal_subset_never_reaches_the_text_and_never_expands(media: str) -> None:
    spec = get_parser(media)
    assert spec is not None
    doc = spec.fn(SUBSET_PAGE, ParseContext(file_name="s.xhtml", media_type=media))
    assert "]>" not in doc.text and "ENTITYVALUE" not in doc.text and "ENTITY" not in doc.text
    assert "ATTLIST" not in doc.text and "declared" not in doc.text
    assert [b.text for b in doc.blocks] == ["Heading", "before &secret; &lol; after"]
    assert doc.title == "Subset"


def test_internal_subset_scan_is_linear_on_hostile_subsets() -> None:
    many_quotes = b"<!DOCTYPE html [ " + b'<!ENTITY e "v"> ' * 200_000 + b"]><p>tail text</p>"
    doc = parse_bytes(many_quotes, "q.html")
    assert doc.text == "tail text"
