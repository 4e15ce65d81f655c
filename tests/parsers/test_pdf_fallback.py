"""pypdf as the second PDF reader: files pdfium refuses, passwords, outline headings, caps, errors."""

from __future__ import annotations

import io
from pathlib import Path

import pypdf
import pypdfium2 as pdfium
import pytest

from include.contract import BlockKind, ParseError, ParseErrorCode, Position
from plugins.parsers._pdf_fallback import read_with_pypdf
from plugins.parsers.registry import ParseContext
from tests.parsers.pdfgen import build_flate_bomb_pdf, build_pdf

REALDOCS = Path(__file__).resolve().parents[2].parent / "shared" / "realdocs" / "pdf"
# the password-protected files of pypdf's own test suite and their user passwords (from its tests)
PASSWORDS = {
    "0497_rc4-128.pdf": ("foo", "Secret!"),
    "0511_encrypted-file.pdf": ("test", "Example"),
    "0532_crazyones-encrypted-256.pdf": ("password", "The Crazy Ones"),
    "0570_r4-aes-user-password.pdf": ("asdfzxcv", "pdf encryption test"),
    "0589_r4-user-password.pdf": ("asdfzxcv", "pdf encryption test"),
    "0599_password-example.pdf": ("test", "Backup4all"),
}


def _pdfium_refusal(data: bytes) -> str | None:
    try:
        pdfium.PdfDocument(data).close()
    except pdfium.PdfiumError as exc:
        return str(exc)
    return None


def test_a_file_pdfium_calls_a_data_format_error_is_read():
    good = build_pdf([[(72, 100, 14, "Annual report"), (72, 140, 11, "Revenue grew.")], [(72, 100, 11, "Page two")]])
    # the trailer's /Root names an object that is not there: pdfium gives up, pypdf finds the catalog
    damaged = good.replace(b"/Root 1 0 R", b"/Root 7 0 R")
    refusal = _pdfium_refusal(damaged)
    # pdfium says "Data format error" (its last-error code is sometimes stale: "Success")
    assert refusal is not None
    doc = read_with_pypdf(damaged, ParseContext(), None, refusal)
    assert doc.metadata["reader"] == "pypdf" and doc.metadata["pdfium_refused"] == refusal
    assert doc.metadata["pages"] == 2
    pages = {b.positions[0].page for b in doc.blocks}
    assert pages == {1, 2}
    assert "Annual report" in doc.text and "Page two" in doc.text
    assert all(b.positions == [Position(page=b.positions[0].page)] for b in doc.blocks)


def test_r6_aes256_file_with_an_empty_user_password_opens():
    writer = pypdf.PdfWriter()
    writer.append(pypdf.PdfReader(io.BytesIO(build_pdf([[(72, 100, 12, "Opened without a password")]]))))
    writer.encrypt(user_password="", owner_password="owner-secret", algorithm="AES-256")
    buf = io.BytesIO()
    writer.write(buf)
    doc = read_with_pypdf(buf.getvalue(), ParseContext(), None, "password required")
    assert doc.text == "Opened without a password"
    assert doc.metadata["encrypted"] is True


def test_outline_entries_become_headings_only_where_their_title_is_on_the_page():
    pages = [[(72, 100, 16, "Introduction"), (72, 140, 11, "Some words.")], [(72, 100, 11, "Methods text")]]
    data = build_pdf(pages, outline=[("Introduction", 0), ("Not on any page", 0), ("Methods", 1)])
    doc = read_with_pypdf(data, ParseContext(), None, "test")
    headings = [(b.text, b.positions[0].page) for b in doc.blocks if b.kind == BlockKind.HEADING]
    assert headings == [("Introduction", 1), ("Methods", 2)]


@pytest.mark.skipif(not REALDOCS.is_dir(), reason="../shared/realdocs/pdf not present")
@pytest.mark.parametrize("name", sorted(PASSWORDS))
def test_real_password_protected_files(name: str):
    data = (REALDOCS / name).read_bytes()
    refusal = _pdfium_refusal(data)
    assert refusal is not None and "password" in refusal.lower()  # the files pdfium refuses in realdocs
    with pytest.raises(ParseError) as err:
        read_with_pypdf(data, ParseContext(), None, refusal)
    assert err.value.code == ParseErrorCode.ENCRYPTED
    with pytest.raises(ParseError) as err:
        read_with_pypdf(data, ParseContext(), "wrong", refusal)
    assert err.value.code == ParseErrorCode.ENCRYPTED
    password, expected = PASSWORDS[name]
    doc = read_with_pypdf(data, ParseContext(), password, refusal)
    assert expected in doc.text and doc.metadata["encrypted"] is True


def test_caps_and_damage_are_typed_errors():
    two_pages = build_pdf([[(72, 100, 12, "a")], [(72, 100, 12, "b")]])
    with pytest.raises(ParseError) as err:
        read_with_pypdf(two_pages, ParseContext(options={"max_pages": 1}), None, "x")
    assert err.value.code == ParseErrorCode.TOO_LARGE
    with pytest.raises(ParseError) as err:
        read_with_pypdf(two_pages, ParseContext(options={"time_budget_s": 0}), None, "x")
    assert err.value.code == ParseErrorCode.TIMEOUT
    bomb = build_flate_bomb_pdf(64 << 20)
    with pytest.raises(ParseError) as err:
        read_with_pypdf(bomb, ParseContext(options={"pdf_max_inflated": 1 << 20}), None, "x")
    assert err.value.code == ParseErrorCode.BOMB
    for junk in (b"", b"%PDF-1.4\n garbage", two_pages[: len(two_pages) // 3]):
        with pytest.raises(ParseError) as err:
            read_with_pypdf(junk, ParseContext(), None, "x")
        assert err.value.code in (ParseErrorCode.CORRUPT, ParseErrorCode.EMPTY)
