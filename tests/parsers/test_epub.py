"""EPUB parser: hand-built EPUB 2/3 packages, a LibreOffice-made EPUB, real files, hostile cases, a fuzz."""

from __future__ import annotations

import contextlib
import io
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from include.contract import BlockKind, ParseError
from tests.parsers.conftest import needs_soffice, parse_bytes

REALDOCS = Path(__file__).resolve().parents[2].parent / "shared" / "realdocs"
CONTAINER = (
    '<container xmlns="urn:oasis:names:tc:opendocument:xmlns:container" version="1.0"><rootfiles>'
    '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>'
)


def xhtml(body: str) -> str:
    return f'<html xmlns="http://www.w3.org/1999/xhtml"><head><title>t</title></head><body>{body}</body></html>'


def epub(chapters: dict[str, str], spine: list[tuple[str, bool]], extra: dict[str, str] | None = None) -> bytes:
    items = "".join(f'<item id="{n}" href="{n}.xhtml" media-type="application/xhtml+xml"/>' for n in chapters)
    items += '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
    no = ' linear="no"'
    refs = "".join(f'<itemref idref="{n}"{"" if lin else no}/>' for n, lin in spine)
    opf = (
        '<package xmlns="http://www.idpf.org/2007/opf" version="3.0"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
        "<dc:title>Book Title</dc:title><dc:creator>Ann Author</dc:creator><dc:language>en</dc:language></metadata>"
        f"<manifest>{items}</manifest><spine>{refs}</spine></package>"
    )
    nav = xhtml(
        '<nav xmlns:epub="http://www.idpf.org/2007/ops" epub:type="toc"><ol>'
        + "".join(f'<li><a href="{n}.xhtml">Title of {n}</a></li>' for n in chapters)
        + "</ol></nav>"
    )
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")
        zf.writestr("META-INF/container.xml", CONTAINER)
        zf.writestr("OEBPS/content.opf", opf)
        zf.writestr("OEBPS/nav.xhtml", nav)
        for name, body in chapters.items():
            zf.writestr(f"OEBPS/{name}.xhtml", xhtml(body))
        for name, content in (extra or {}).items():
            zf.writestr(name, content)
    return buf.getvalue()


def test_spine_order_headings_toc_titles_and_metadata() -> None:
    chapters = {
        "c1": "<h1>Chapter One</h1><p>first text</p>",
        "c2": "<p>no heading here</p><table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>",
        "notes": "<p>an aside</p>",
        "c3": "<h1>Chapter Three</h1><h2>Part</h2><p>third</p>",
    }
    data = epub(chapters, [("c3", True), ("notes", False), ("c1", True), ("c2", True), ("gone", True)])
    doc = parse_bytes(data, "b.epub")
    assert doc.title == "Book Title" and doc.metadata["author"] == "Ann Author" and doc.metadata["language"] == "en"
    heads = [b.text for b in doc.blocks if b.kind == BlockKind.HEADING]
    # spine order, linear="no" last; a chapter without a heading gets its nav title
    assert heads == ["Chapter Three", "Part", "Chapter One", "Title of c2", "Title of notes"]
    assert [b.positions[0].path for b in doc.blocks if b.kind != BlockKind.HEADING] == [
        "OEBPS/c3.xhtml",
        "OEBPS/c1.xhtml",
        "OEBPS/c2.xhtml",
        "OEBPS/c2.xhtml",
        "OEBPS/notes.xhtml",
    ]
    table = next(b for b in doc.blocks if b.kind == BlockKind.TABLE)
    assert table.header == ["a", "b"] and table.rows == [["1", "2"]] and table.heading_path == ["Title of c2"]
    assert doc.blocks[-1].metadata["linear"] is False
    assert doc.metadata["spine_skipped"] == [{"idref": "gone", "reason": "not in the manifest"}]


def test_missing_spine_file_is_a_warning_not_a_crash() -> None:
    data = epub({"c1": "<p>kept</p>", "c2": "<p>lost</p>"}, [("c1", True), ("c2", True)])
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as zin, zipfile.ZipFile(buf, "w") as zout:
        for info in zin.infolist():
            if info.filename != "OEBPS/c2.xhtml":
                zout.writestr(info, zin.read(info))
    doc = parse_bytes(buf.getvalue(), "b.epub")
    assert "kept" in doc.text and "lost" not in doc.text
    assert doc.metadata["spine_skipped"] == [
        {"idref": "c2", "path": "OEBPS/c2.xhtml", "reason": "missing from the archive"}
    ]


FONT_ONLY = (
    '<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" xmlns:enc="http://www.w3.org/2001/04/xmlenc#">'
    '<enc:EncryptedData><enc:EncryptionMethod Algorithm="{alg}"/><enc:CipherData><enc:CipherReference URI="{uri}"/>'
    "</enc:CipherData></enc:EncryptedData></encryption>"
)


def test_font_obfuscation_is_fine_drm_is_encrypted() -> None:
    ok = FONT_ONLY.format(alg="http://www.idpf.org/2008/embedding", uri="OEBPS/f.ttf")
    assert (
        "body" in parse_bytes(epub({"c": "<p>body</p>"}, [("c", True)], {"META-INF/encryption.xml": ok}), "a.epub").text
    )
    drm = FONT_ONLY.format(alg="http://www.w3.org/2001/04/xmlenc#aes128-cbc", uri="OEBPS/c.xhtml")
    with pytest.raises(ParseError) as err:
        parse_bytes(epub({"c": "<p>body</p>"}, [("c", True)], {"META-INF/encryption.xml": drm}), "a.epub")
    assert err.value.code.value == "encrypted"


def test_hostile_epubs() -> None:
    deep = "<!DOCTYPE x><a>" + "<b>" * 300 + "</b>" * 300 + "</a>"
    with pytest.raises(ParseError) as err:
        parse_bytes(epub({"c": "<p>x</p>"}, [("c", True)], {"META-INF/container.xml": deep}), "d.epub")
    assert err.value.code.value in ("bomb", "corrupt")
    bomb = epub({"c": "<p>x</p>" + " " * (64 << 20)}, [("c", True)])
    with pytest.raises(ParseError) as err:
        parse_bytes(bomb, "z.epub")
    assert err.value.code.value == "bomb"
    no_container = io.BytesIO()
    with zipfile.ZipFile(no_container, "w") as zf:
        zf.writestr("mimetype", "application/epub+zip")
    with pytest.raises(ParseError) as err:
        parse_bytes(no_container.getvalue(), "n.epub")
    assert err.value.code.value == "corrupt"
    with pytest.raises(ParseError) as err:
        parse_bytes(epub({"c": "<img src='x.png'/>"}, [("c", True)]), "e.epub")
    assert err.value.code.value == "empty"


@needs_soffice
def test_libreoffice_made_epub(lo_convert: Callable[[bytes, str, str], bytes]) -> None:
    import docx

    d = docx.Document()
    for title in ("Alpha", "Beta", "Gamma"):
        d.add_heading(title, level=1)
        d.add_paragraph(f"text of {title}")
    src = io.BytesIO()
    d.save(src)
    doc = parse_bytes(lo_convert(src.getvalue(), "docx", "epub"), "lo.epub")
    assert [b.text for b in doc.blocks if b.kind == BlockKind.HEADING] == ["Alpha", "Beta", "Gamma"]
    assert "text of Beta" in doc.text


_REAL = sorted((REALDOCS / "epub").glob("*")) if (REALDOCS / "epub").is_dir() else []


@pytest.mark.skipif(not _REAL, reason="../shared/realdocs/epub not present")
def test_real_epubs() -> None:
    outcomes: dict[str, int] = {}
    for path in _REAL:
        try:
            doc = parse_bytes(path.read_bytes(), path.name)
            outcomes["ok"] = outcomes.get("ok", 0) + 1
            assert doc.media_type == "application/epub+zip" and doc.text
        except ParseError as exc:
            outcomes[exc.code.value] = outcomes.get(exc.code.value, 0) + 1
    print("realdocs epub outcomes", outcomes)
    assert outcomes.get("ok") == len(_REAL)  # all 15 measured
    alice = parse_bytes((REALDOCS / "epub" / "0197_test_3493.epub").read_bytes(), "a.epub")
    assert alice.title == "Alice's Adventures in Wonderland" and "Down the Rabbit-Hole" in alice.text


_SEED = epub({"c1": "<h1>H</h1><p>text</p>", "c2": "<p>more</p>"}, [("c1", True), ("c2", True)])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(st.data())
def test_fuzz_only_parse_errors(data: st.DataObject) -> None:
    zin = zipfile.ZipFile(io.BytesIO(_SEED))
    members = [(i.filename, bytearray(zin.read(i))) for i in zin.infolist()]
    target = data.draw(st.integers(0, len(members) - 1))
    content = members[target][1]
    for _ in range(data.draw(st.integers(1, 6))):
        if content:
            content[data.draw(st.integers(0, len(content) - 1))] = data.draw(st.integers(0, 255))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zout:
        for name, body in members:
            zout.writestr(name, bytes(body))
    raw = buf.getvalue()
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    with contextlib.suppress(ParseError):
        parse_bytes(raw, "f.epub", time_budget_s=5)
