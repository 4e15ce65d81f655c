"""OLE sniffing by root stream names, without case ([MS-CFB] 2.6.4), and not by names in sub-storages."""

from __future__ import annotations

import io
from pathlib import Path

import olefile
import pytest

from plugins.parsers.registry import sniff_media_type
from plugins.parsers.sniff import DOC, PPT, XLS
from tests.parsers.conftest import needs_soffice, parse_bytes

REALDOCS = Path(__file__).resolve().parents[2].parent / "shared" / "realdocs"
needs_realdocs = pytest.mark.skipif(not REALDOCS.is_dir(), reason="../shared/realdocs not present")


def _renamed(data: bytes, old: str, new: str) -> bytes:
    """``data`` with one directory entry's name changed in case (same length, so nothing moves).

    A CFB directory entry starts with its name in UTF-16LE ([MS-CFB] 2.6.1); only the entries'
    own names are patched, found through olefile's parse of the directory.
    """
    assert old.lower() == new.lower() and old != new
    ole = olefile.OleFileIO(data)
    sector_size = ole.sector_size
    buf = bytearray(data)
    patched = 0
    for sid, entry in enumerate(ole.direntries):
        if entry is None or entry.name != old:
            continue
        # the directory is a chain of sectors; entry `sid` is 128 bytes into it
        chain = [ole.first_dir_sector]
        while len(chain) * sector_size // 128 <= sid:
            chain.append(ole.fat[chain[-1]])
        sector = chain[sid * 128 // sector_size]
        offset = (sector + 1) * sector_size + (sid * 128) % sector_size
        assert bytes(buf[offset : offset + len(old) * 2]) == old.encode("utf-16-le")
        buf[offset : offset + len(new) * 2] = new.encode("utf-16-le")
        patched += 1
    ole.close()
    assert patched == 1
    return bytes(buf)


def _root_names(data: bytes) -> list[str]:
    with olefile.OleFileIO(io.BytesIO(data)) as ole:
        return [e[0] for e in ole.listdir(streams=True, storages=True) if len(e) == 1]


@needs_realdocs
def test_directory_names_in_other_case_route_by_kind():
    word = (REALDOCS / "doc/0048_simple_normal_case.doc").read_bytes()
    shouting = _renamed(word, "WordDocument", "WORDDOCUMENT")
    assert "WORDDOCUMENT" in _root_names(shouting)
    assert sniff_media_type(shouting, "upload") == DOC
    lower = _renamed(word, "WordDocument", "worddocument")
    assert sniff_media_type(lower, "upload") == DOC
    excel = (REALDOCS / "xls/0805_invalid_formula.xls").read_bytes()
    book = _renamed(excel, "Workbook", "wORKBOOK")
    assert "wORKBOOK" in _root_names(book)
    assert sniff_media_type(book, "upload") == XLS
    # a file written with lower-case names by its producer (Apache Tika's test file)
    assert sniff_media_type((REALDOCS / "doc/0029_simple_lower_case.doc").read_bytes(), "x") == DOC


@needs_realdocs
@needs_soffice
def test_a_renamed_word_document_still_converts():
    word = (REALDOCS / "doc/0048_simple_normal_case.doc").read_bytes()
    normal = parse_bytes(word, "a.doc")
    shouting = parse_bytes(_renamed(word, "WordDocument", "WORDDOCUMENT"), "a.doc")
    assert shouting.parser == "legacy-office" and shouting.text == normal.text and normal.text.strip()


@needs_realdocs
@pytest.mark.parametrize(
    ("name", "kind", "embedded"),
    [
        ("xls/0820_testEXCEL_embeded.xls", XLS, "WordDocument"),  # and a presentation
        ("xls/0826_testWPSAttachment.xls", XLS, "WordDocument"),
        ("doc/0054_testWPSAttachment.doc", DOC, "Workbook"),  # and a presentation
        ("doc/0046_testWORD_embeded.doc", DOC, "PowerPoint Document"),
    ],
)
def test_a_file_with_embedded_office_documents_routes_by_its_own_root_streams(name: str, kind: str, embedded: str):
    data = (REALDOCS / name).read_bytes()
    with olefile.OleFileIO(data) as ole:
        nested = {e[-1] for e in ole.listdir(streams=True, storages=True) if len(e) > 1}
    assert embedded in nested  # another kind's main stream, in a sub-storage
    assert sniff_media_type(data, "download") == kind
    # the name agrees or not, the content decides
    assert sniff_media_type(data, "misnamed.ppt") == kind != PPT
