"""Hostile and broken input: every case ends in a typed ParseError within its budget."""

from __future__ import annotations

import io
import random
import time
import zipfile

import pytest

from include.contract import ParsedDocument, ParseError, ParseErrorCode
from plugins.parsers import register_parser
from plugins.parsers.registry import ParseContext
from tests.parsers.conftest import FIXTURES, parse_bytes
from tests.parsers.ooxml import build_docx, p
from tests.parsers.pdfgen import build_pdf


def _code(data: bytes, name: str, **options: object) -> ParseErrorCode:
    with pytest.raises(ParseError) as err:
        parse_bytes(data, name, **options)
    return err.value.code


def test_truncated_zip_is_corrupt():
    data = (FIXTURES / "test.docx").read_bytes()
    for cut in (len(data) // 2, len(data) - 30, 200):
        assert _code(data[:cut], "cut.docx") == ParseErrorCode.CORRUPT


def test_zip_bomb_by_total_size():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("[Content_Types].xml", "<Types/>")
        with zf.open("word/document.xml", "w", force_zip64=True) as fh:
            zeros = b"\0" * (1 << 20)
            for _ in range(40):  # 40 MiB of zeros, ~40 KiB compressed, against a 32 MiB limit
                fh.write(zeros)
    data = buf.getvalue()
    assert len(data) < 200_000
    assert _code(data, "bomb.docx", zip_max_uncompressed=32 << 20, zip_max_ratio=1e9) == ParseErrorCode.BOMB


def test_zip_bomb_by_ratio_and_entry_count():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("word/document.xml", b"<a/>" + b" " * (64 << 20))
    assert _code(buf.getvalue(), "ratio.docx") == ParseErrorCode.BOMB

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("word/document.xml", "<a/>")
        for i in range(300):
            zf.writestr(f"junk/{i}.xml", "")
    assert _code(buf.getvalue(), "many.docx", zip_max_entries=200) == ParseErrorCode.BOMB


def test_deeply_nested_xml_in_docx():
    body = "<w:sdt><w:sdtContent>" * 5000 + p("deep") + "</w:sdtContent></w:sdt>" * 5000
    assert _code(build_docx(body), "deep.docx") in (ParseErrorCode.BOMB, ParseErrorCode.CORRUPT)


def test_entity_expansion_not_performed():
    lol = (
        '<?xml version="1.0"?><!DOCTYPE w:document [<!ENTITY a "aaaaaaaaaa">'
        '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]>'
    )
    data = build_docx(p("&c;"))
    zin = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            content = zin.read(info)
            if info.filename == "word/document.xml":
                content = lol.encode() + content.split(b"?>", 1)[1]
            zout.writestr(info, content)
    try:
        doc = parse_bytes(out.getvalue(), "lol.docx")
    except ParseError as err:  # empty: the undeclared entity stays unexpanded, leaving no text
        assert err.code in (ParseErrorCode.CORRUPT, ParseErrorCode.BOMB, ParseErrorCode.EMPTY)
    else:
        assert "aaaaaaaaaa" not in doc.text


def test_deeply_nested_html_does_not_crash():
    html = "<div>" * 20000 + "deep text" + "</div>" * 20000
    try:
        doc = parse_bytes(f"<html><body>{html}</body></html>".encode(), "deep.html")
    except ParseError as err:
        assert err.code in (ParseErrorCode.BOMB, ParseErrorCode.CORRUPT, ParseErrorCode.EMPTY)
    else:
        assert isinstance(doc, ParsedDocument)


def test_time_budget_is_enforced_cooperatively():
    rows = "\n".join(f"{i},value {i},{i * 3}" for i in range(300_000)).encode()
    assert _code(rows, "big.csv", time_budget_s=0.05) == ParseErrorCode.TIMEOUT


@register_parser("test-hang", "0", ("application/x-tributary-test-hang",), ("tributary-hang",), isolate=True)
def _hanging_parser(data: bytes, ctx: ParseContext) -> ParsedDocument:
    # stands in for C code stuck in one call: no cooperative check can run
    time.sleep(3600)
    raise AssertionError("unreachable")


def test_hard_budget_kills_a_hung_parser():
    started = time.monotonic()
    assert _code(b"\x00\x01", "x.tributary-hang", time_budget_s=0.5) == ParseErrorCode.TIMEOUT
    assert time.monotonic() - started < 30  # generous: only proves the hang was cut off


def test_size_cap():
    assert _code(b"word " * 1000, "a.txt", max_bytes=100) == ParseErrorCode.TOO_LARGE


@pytest.mark.parametrize("name", ["a.pdf", "a.docx", "a.xlsx", "a.pptx", "a.html", "a.csv", "a.json", "a.md", "a.txt"])
def test_random_bytes_only_ever_raise_parse_error(name: str):
    rng = random.Random(name)
    seeds = [
        bytes(rng.getrandbits(8) for _ in range(2000)),
        b"%PDF-1.7\n" + bytes(rng.getrandbits(8) for _ in range(2000)),
        b"PK\x03\x04" + bytes(rng.getrandbits(8) for _ in range(2000)),
        build_pdf([[(72, 100, 11, "text")]])[:-200],
    ]
    for data in seeds:
        try:
            parse_bytes(data, name)
        except ParseError as err:
            assert isinstance(err.code, ParseErrorCode)


def _parse_pdf_and_report(conn) -> None:  # runs in a daemonic child
    try:
        doc = parse_bytes(build_pdf([[(72, 100, 11, "inside a daemon")]]), "d.pdf")
        conn.send(doc.text)
    except Exception as exc:
        conn.send(f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


def test_isolated_parser_runs_inside_a_daemonic_worker():
    # Celery/Airflow pool workers are daemonic; multiprocessing forbids them children, os.fork does not
    import multiprocessing

    mp = multiprocessing.get_context("fork")
    receiver, sender = mp.Pipe(duplex=False)
    proc = mp.Process(target=_parse_pdf_and_report, args=(sender,), daemon=True)
    proc.start()
    assert receiver.poll(60)
    assert receiver.recv() == "inside a daemon"
    proc.join(10)
