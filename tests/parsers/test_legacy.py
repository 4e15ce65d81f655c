"""Legacy Office: BIFF2-4 worksheets, password-protected binaries, and the realdocs .doc/.xls/.ppt.

The whole realdocs set (103 files, ~4 minutes of LibreOffice conversions) runs with
``TRIBUTARY_REALDOCS_LEGACY=all``; by default a sample of the odd ones runs (BIFF4, names in
lower case, embedded objects, a file LibreOffice cannot convert, pictures only).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from include.contract import BlockKind, ParseError, ParseErrorCode
from plugins.parsers.legacy import parse_legacy
from plugins.parsers.registry import ParseContext, sniff_media_type
from plugins.parsers.sniff import DOC, PPT, XLS
from tests.parsers.conftest import needs_soffice, parse_bytes

REALDOCS = Path(__file__).resolve().parents[2].parent / "shared" / "realdocs"
needs_realdocs = pytest.mark.skipif(not REALDOCS.is_dir(), reason="../shared/realdocs not present")
BIFF4 = ("xls/0804_testEXCEL_4.xls", "xls/0817_biff4_no_format_no_window2.xls")
SAMPLE = (
    *BIFF4,
    "doc/0029_simple_lower_case.doc",
    "doc/0054_testWPSAttachment.doc",
    "xls/0820_testEXCEL_embeded.xls",
    "ppt/0651_pictures.ppt",
    "ppt/0636_testWPSAttachment.ppt",
)


def _real(name: str) -> bytes:
    return (REALDOCS / name).read_bytes()


@needs_realdocs
@needs_soffice
def test_biff4_worksheets_without_an_ole_container_are_converted():
    for name in BIFF4:
        data = _real(name)
        assert data[:2] == b"\x09\x04" and not data.startswith(b"\xd0\xcf")  # a bare BIFF4 BOF record
        assert sniff_media_type(data, "download") == XLS
        doc = parse_bytes(data, Path(name).name)
        assert doc.parser == "legacy-office" and doc.metadata["converted_from"] == XLS
        assert any(b.positions and b.positions[0].sheet == "Sheet1" for b in doc.blocks)
    examination = parse_bytes(_real(BIFF4[0]), "t.xls")
    assert "Examination Coverage" in examination.text
    products = parse_bytes(_real(BIFF4[1]), "t.xls")
    assert "DOG & CAT PRODUCTS" in products.text


@needs_realdocs
@pytest.mark.parametrize(
    ("name", "media"),
    [
        ("xls/0814_password.xls", XLS),
        ("xls/0823_testEXCEL_protected_passtika.xls", XLS),
        ("ppt/0642_testPPT_protected_passtika.ppt", PPT),
    ],
)
def test_password_protected_binaries_are_encrypted_without_starting_libreoffice(
    name: str, media: str, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("PATH", "/nonexistent")  # no soffice: the answer must come before conversion
    data = _real(name)
    assert sniff_media_type(data, "x") == media
    with pytest.raises(ParseError) as err:
        parse_legacy(data, ParseContext(media_type=media))
    assert err.value.code == ParseErrorCode.ENCRYPTED


def test_encrypted_word_fib_flag_is_read(monkeypatch: pytest.MonkeyPatch):
    import olefile

    from plugins.parsers import legacy

    # [MS-DOC] 2.5.2: FibBase flags at offset 0x0A, fEncrypted = 0x0100
    fib = b"\xec\xa5\xc1\x00" + b"\x00" * 6 + b"\x00\x01" + b"\x00" * 20
    plain = b"\xec\xa5\xc1\x00" + b"\x00" * 26

    class FakeOle:
        def __init__(self, stream: bytes) -> None:
            self.stream = stream

        def __enter__(self) -> FakeOle:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def listdir(self, streams: bool = True) -> list[list[str]]:
            return [["WordDocument"], ["1Table"]]

        def openstream(self, name: str) -> object:
            import io

            return io.BytesIO(self.stream)

    ole_magic = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
    monkeypatch.setattr(olefile, "OleFileIO", lambda data: FakeOle(fib))
    assert legacy._password_protected(ole_magic, DOC)
    monkeypatch.setattr(olefile, "OleFileIO", lambda data: FakeOle(plain))
    assert not legacy._password_protected(ole_magic, DOC)


def _legacy_files() -> list[str]:
    if not REALDOCS.is_dir():
        return []
    if os.environ.get("TRIBUTARY_REALDOCS_LEGACY") == "all":
        return sorted(str(p.relative_to(REALDOCS)) for fmt in ("doc", "xls", "ppt") for p in (REALDOCS / fmt).iterdir())
    return list(SAMPLE)


@needs_realdocs
@needs_soffice
@pytest.mark.parametrize("name", _legacy_files())
def test_real_legacy_files_give_text_or_a_typed_error(name: str):
    try:
        doc = parse_bytes(_real(name), Path(name).name, time_budget_s=60)
    except ParseError as exc:
        assert exc.code in (
            ParseErrorCode.EMPTY,
            ParseErrorCode.ENCRYPTED,
            ParseErrorCode.CORRUPT,
            ParseErrorCode.UNSUPPORTED,
        )
        return
    assert doc.text.strip()
    assert any(b.kind != BlockKind.HEADING for b in doc.blocks)
