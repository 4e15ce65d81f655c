"""MHTML (RFC 2557) archives as browsers and Word save them: root part, charsets, attachments, caps."""

from __future__ import annotations

import contextlib
import io
from email.message import EmailMessage

import docx
import pytest

from include.contract import BlockKind, ParseError, ParseErrorCode
from plugins.parsers import mhtml
from plugins.parsers.registry import ParseContext, sniff_media_type
from tests.parsers.conftest import parse_bytes
from tests.parsers.mutations import mutated_bytes

PAGE = (
    "<html><head><title>Über uns</title></head><body><nav>Menu</nav><h1>Grüße aus Köln</h1>"
    "<p>Straße, café – und „Anführungszeichen“.</p><img src='logo.png'></body></html>"
)


def _part(content: str | bytes, kind: str, location: str, **kw: str) -> EmailMessage:
    part = EmailMessage()
    if isinstance(content, str):
        part.set_content(content, subtype=kind.split("/")[1], **kw)  # type: ignore[arg-type]
    else:
        maintype, subtype = kind.split("/")
        part.set_content(content, maintype=maintype, subtype=subtype, cte="base64")
    part["Content-Location"] = location
    return part


def _docx(text: str) -> bytes:
    document = docx.Document()
    document.add_paragraph(text)
    buf = io.BytesIO()
    document.save(buf)
    return buf.getvalue()


def browser_archive(parts: list[EmailMessage] | None = None, start: str | None = None) -> bytes:
    """An archive laid out as Chrome's "Save as single file" writes it."""
    message = EmailMessage()
    message["From"] = "<Saved by Blink>"
    message["Snapshot-Content-Location"] = "https://example.org/about"
    message["Subject"] = "Über uns"
    message["MIME-Version"] = "1.0"
    message.set_type("multipart/related")
    message.set_param("type", "text/html")
    if start:
        message.set_param("start", start)
    root = _part(PAGE, "text/html", "https://example.org/about", charset="windows-1252", cte="quoted-printable")
    for part in parts if parts is not None else [root]:
        message.attach(part)
    return bytes(message)


def test_browser_archive_root_page_decoded_and_documents_attached():
    parts = [
        _part(PAGE, "text/html", "https://example.org/about", charset="windows-1252", cte="quoted-printable"),
        _part(b"\x89PNG\r\n\x1a\n" + b"\x00" * 32, "image/png", "https://example.org/logo.png"),
        _part("body { color: red }", "text/css", "https://example.org/site.css"),
        _part(
            _docx("Attached minutes of the meeting."), "application/octet-stream", "https://example.org/minutes.docx"
        ),
        _part("name,qty\nbolts,12\n", "text/csv", "https://example.org/stock.csv", cte="base64"),
    ]
    data = browser_archive(parts)
    assert b"Content-Transfer-Encoding: quoted-printable" in data  # the page really is encoded
    doc = parse_bytes(data, "about.mhtml")
    assert doc.parser == "mhtml" and doc.media_type == "multipart/related"
    assert doc.title == "Über uns"
    assert doc.blocks[0].kind == BlockKind.HEADING and doc.blocks[0].text == "Grüße aus Köln"
    assert doc.blocks[1].text == "Straße, café – und „Anführungszeichen“."
    assert "Menu" not in doc.text and "Content-Type" not in doc.text and "=C3" not in doc.text
    names = [item["name"] for item in doc.metadata["embedded"]]
    assert names == ["minutes.docx", "stock.csv"]  # not the image, not the style sheet
    minutes = [b for b in doc.blocks if b.text == "Attached minutes of the meeting."]
    assert minutes and minutes[0].metadata["embedded_from"] == ["minutes.docx"]
    assert doc.metadata["mhtml_parts"] == 5
    assert doc.metadata["mhtml_root"] == "https://example.org/about"


WORD_MHT = b"""MIME-Version: 1.0
Content-Type: multipart/related; boundary="----=_NextPart_01DA0000.5B6F2C10"

This document is a Single File Web Page, also known as a Web Archive file.

------=_NextPart_01DA0000.5B6F2C10
Content-Location: file:///C:/0000000A/report.htm
Content-Transfer-Encoding: quoted-printable
Content-Type: text/html; charset="gb2312"

<html xmlns:o=3D"urn:schemas-microsoft-com:office:office"><head>
<link rel=3DFile-List href=3D"report.files/filelist.xml"></head>
<body lang=3DZH-CN><div class=3DWordSection1>
<h1>=B1=A8=B8=E6</h1>
<p class=3DMsoNormal>=CA=FD=BE=DD=CD=AC=B2=BD</p>
</div></body></html>

------=_NextPart_01DA0000.5B6F2C10
Content-Location: file:///C:/0000000A/report.files/filelist.xml
Content-Transfer-Encoding: quoted-printable
Content-Type: text/xml; charset="utf-8"

<xml xmlns:o=3D"urn:schemas-microsoft-com:office:office">
 <o:MainFile HRef=3D"../report.htm"/>
</xml>
------=_NextPart_01DA0000.5B6F2C10
Content-Location: file:///C:/0000000A/report.files/themedata.thmx
Content-Transfer-Encoding: base64
Content-Type: application/vnd.ms-officetheme

UEsDBBQABgAIAAAAIQDp3g+//wAAABwCAAATAAAAW0NvbnRlbnRfVHlwZXNdLnhtbKyRy07DMBBF
------=_NextPart_01DA0000.5B6F2C10--
"""


def test_word_single_file_web_page_in_gb2312_without_housekeeping_parts():
    assert sniff_media_type(WORD_MHT, "report.bin") == "multipart/related"
    doc = parse_bytes(WORD_MHT, "report.mht")
    assert [(b.kind, b.text) for b in doc.blocks] == [(BlockKind.HEADING, "报告"), (BlockKind.PARAGRAPH, "数据同步")]
    assert "embedded" not in doc.metadata and "embedded_failed" not in doc.metadata


def test_start_parameter_names_the_root_part():
    other = _part("<html><body><p>Frame content</p></body></html>", "text/html", "https://example.org/frame")
    root = _part("<html><body><p>The real page</p></body></html>", "text/html", "https://example.org/")
    root["Content-ID"] = "<root@example.org>"
    doc = parse_bytes(browser_archive([other, root], start="<root@example.org>"), "x.mht")
    assert doc.blocks[0].text == "The real page"
    assert doc.metadata["mhtml_root"] == "https://example.org/"
    # the frame is another document of the archive: attached, not lost
    assert any(b.text == "Frame content" for b in doc.blocks[1:])


def test_images_are_handed_to_the_image_parser_only_when_ocr_is_asked_for():
    png = _part(b"\x89PNG\r\n\x1a\n" + b"\x00" * 32, "image/png", "https://example.org/scan.png")
    page = _part(PAGE, "text/html", "https://example.org/about", charset="utf-8")
    data = browser_archive([page, png])
    doc = parse_bytes(data, "x.mhtml")
    assert "embedded" not in doc.metadata and "embedded_failed" not in doc.metadata
    with_ocr = parse_bytes(data, "x.mhtml", engines={"embedded_images": "ocr"})
    outcomes = with_ocr.metadata.get("embedded", []) + with_ocr.metadata.get("embedded_failed", [])
    assert [item["name"] for item in outcomes] == ["scan.png"]


def test_caps_on_parts_nesting_and_decoded_size(monkeypatch: pytest.MonkeyPatch):
    page = _part("<html><body><p>x</p></body></html>", "text/html", "https://example.org/")
    many = browser_archive(
        [page] + [_part("a,b\n1,2\n", "text/csv", f"https://example.org/{i}.csv") for i in range(20)]
    )
    monkeypatch.setattr(mhtml, "MAX_PARTS", 10)
    with pytest.raises(ParseError) as err:
        mhtml.parse_mhtml(many, ParseContext())
    assert err.value.code == ParseErrorCode.TOO_LARGE
    monkeypatch.setattr(mhtml, "MAX_PARTS", 10_000)
    with pytest.raises(ParseError) as err:
        mhtml.parse_mhtml(many, ParseContext(options={"zip_max_uncompressed": 40}))
    assert err.value.code == ParseErrorCode.TOO_LARGE
    nested = page
    for _ in range(12):
        outer = EmailMessage()
        outer.set_type("multipart/related")
        outer.attach(nested)
        nested = outer
    with pytest.raises(ParseError) as err:
        mhtml.parse_mhtml(bytes(nested), ParseContext(options={"xml_max_depth": 8}))
    assert err.value.code == ParseErrorCode.BOMB


def test_archives_without_a_page_or_not_mime_are_typed_errors():
    only_css = browser_archive([_part("p { }", "text/css", "https://example.org/a.css")])
    with pytest.raises(ParseError) as err:
        parse_bytes(only_css, "x.mhtml")
    assert err.value.code == ParseErrorCode.EMPTY
    with pytest.raises(ParseError) as err:
        mhtml.parse_mhtml(b"\x00\x01 not a message at all", ParseContext())
    assert err.value.code in (ParseErrorCode.EMPTY, ParseErrorCode.CORRUPT)


# --------------------------------------------------------------------------- fuzz

FUZZ_BUDGET_S = 5.0
_MIME_JUNK = [b"\r\n", b"--", b"=", b"=\r\n", b"Content-Type: multipart/related; boundary=x\r\n\r\n", b"\x00", b"<"]


def test_fuzzed_mhtml_raises_only_parse_errors_within_budget():
    import time

    from hypothesis import HealthCheck, given, settings

    parts = [
        _part(PAGE, "text/html", "https://example.org/about", charset="windows-1252", cte="quoted-printable"),
        _part("name,qty\nbolts,12\n", "text/csv", "https://example.org/stock.csv", cte="base64"),
    ]
    seeds = [browser_archive(parts), WORD_MHT]

    @settings(
        max_examples=150,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=mutated_bytes(seeds, _MIME_JUNK, 100))
    def run(data: bytes) -> None:
        started = time.monotonic()
        with contextlib.suppress(ParseError):
            parse_bytes(data, "fuzz.mhtml", time_budget_s=FUZZ_BUDGET_S)
        assert time.monotonic() - started < FUZZ_BUDGET_S + 2

    run()
