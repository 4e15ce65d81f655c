"""RTF reader: LibreOffice-made and hand-written RTF, the sniffing fix, caps, and real files.

The real files (Apache Tika's and pandoc's RTF test documents in ``../shared/realdocs/rtf``) are
compared with LibreOffice's own text conversion: the characters LibreOffice finds (whitespace
aside) must be found by the reader too.
"""

from __future__ import annotations

import collections
import contextlib
import io
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import docx
import pytest

from include.contract import BlockKind, ParseError, ParseErrorCode
from plugins.parsers.registry import ParseContext
from plugins.parsers.rtf import parse_rtf
from tests.parsers.conftest import SOFFICE, needs_soffice, parse_bytes
from tests.parsers.mutations import mutated_bytes

REALDOCS = Path(__file__).resolve().parents[2].parent / "shared" / "realdocs" / "rtf"


def rtf(body: str, header: str = r"\ansi\ansicpg1252\deff0") -> bytes:
    return ("{\\rtf1" + header + "{\\fonttbl{\\f0\\fswiss Arial;}}" + body + "}").encode("latin-1")


def texts(data: bytes, **options: object) -> list[str]:
    return [b.text for b in parse_rtf(data, ParseContext(options=options)).blocks]


# --------------------------------------------------------------------------- LibreOffice-made


def _report_docx() -> bytes:
    document = docx.Document()
    document.core_properties.title = "Quarterly report"
    document.add_heading("Results", 1)
    document.add_paragraph("Revenue grew in every region.")
    document.add_heading("By region", 2)
    table = document.add_table(rows=3, cols=2)
    for row, values in zip(table.rows, [("Region", "Q1"), ("North", "12"), ("South", "7")], strict=True):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    document.add_paragraph("first point", style="List Bullet")
    document.add_paragraph("second point", style="List Bullet")
    document.add_paragraph("中文段落：数据同步到搜索索引。")
    buf = io.BytesIO()
    document.save(buf)
    return buf.getvalue()


@needs_soffice
def test_libreoffice_rtf_headings_table_list_and_chinese(lo_convert: Callable[[bytes, str, str], bytes]):
    data = lo_convert(_report_docx(), "docx", "rtf")
    doc = parse_bytes(data, "report.rtf")
    assert doc.parser == "rtf"
    headings = [(b.text, b.level) for b in doc.blocks if b.kind == BlockKind.HEADING]
    assert headings == [("Results", 1), ("By region", 2)]
    (table,) = [b for b in doc.blocks if b.kind == BlockKind.TABLE]
    assert table.header == ["Region", "Q1"]
    assert table.rows == [["North", "12"], ["South", "7"]]
    assert table.heading_path == ["Results", "By region"]
    lists = [b.text for b in doc.blocks if b.kind == BlockKind.LIST]
    assert [t.split()[-2:] for t in lists] == [["first", "point"], ["second", "point"]]
    assert "中文段落：数据同步到搜索索引。" in doc.text
    assert "\\rtf" not in doc.text and "fonttbl" not in doc.text
    assert doc.title == "Quarterly report"


@needs_soffice
def test_rtf_over_64_kib_goes_to_the_rtf_parser_not_json(lo_convert: Callable[[bytes, str, str], bytes]):
    document = docx.Document()
    for i in range(3000):
        document.add_paragraph(f"Paragraph number {i} of a long document.")
    buf = io.BytesIO()
    document.save(buf)
    data = lo_convert(buf.getvalue(), "docx", "rtf")
    assert len(data) > 64 * 1024 and data.startswith(b"{\\rtf")
    doc = parse_bytes(data, "long.rtf", declared="application/octet-stream")
    assert doc.parser == "rtf"
    assert "Paragraph number 2999 of a long document." in doc.text
    # without a name or declared type, too: the bytes say RTF
    assert parse_bytes(data, "download").parser == "rtf"


# --------------------------------------------------------------------------- the syntax


def test_code_pages_from_ansicpg_and_font_charset():
    gbk = "中文".encode("gbk")
    hexed = "".join(f"\\'{b:02x}" for b in gbk)
    # the document's code page
    assert texts(rtf(hexed + r"\par", r"\ansi\ansicpg936")) == ["中文"]
    # a font with \fcharset134 (GB2312) in a cp1252 document; \f0 back to Western afterwards
    data = (
        r"{\rtf1\ansi\ansicpg1252{\fonttbl{\f0 Arial;}{\f1\fcharset134 SimSun;}}"
        + r"{\f1 "
        + hexed
        + r"}\f0 caf\'e9\par}"
    ).encode("latin-1")
    assert texts(data) == ["中文café"]
    # Shift-JIS with a trail byte written as a literal (0x5c is "\\")
    sjis = "ソ".encode("cp932")
    assert sjis[1:] == b"\\"
    data = rb"{\rtf1\ansi\ansicpg932{\fonttbl{\f0\fcharset128 MS Mincho;}}\f0\'83\\\par}"
    assert texts(data) == ["ソ"]


def test_unicode_with_fallback_skip_counts_and_surrogates():
    assert texts(rtf(r"\uc1\u8364?\u20013\'3f end\par")) == ["€中 end"]
    assert texts(rtf(r"{\uc2\u8364??}x\par")) == ["€x"]
    assert texts(rtf(r"\uc0\u-10179\u-8704  ok\par")) == ["😀 ok"]  # a surrogate pair
    assert texts(rtf(r"\uc0 a\u-10240  b\u-9216  c\par")) == ["a\ufffd b\ufffd c"]  # unpaired


def test_destinations_are_skipped_and_info_gives_title_and_author():
    data = rtf(
        r"{\info{\title Annual \'e9dition}{\author Ann Example}{\creatim\yr2024}}"
        r"{\colortbl;\red255\green0\blue0;}{\*\generator Writer}{\*\unknownthing hidden words}"
        r"{\pict\pngblip 89504e47}{\*\themedata 0102}{\*\datastore 0304}{\*\xmlnstbl {\xmlns1 x}}"
        r"{\*\listtable{\list{\listlevel{\leveltext \'01\u-3913 ?;}}}}"
        r"{\field{\*\fldinst HYPERLINK \"https://example.org\"}{\fldrslt link text}}"
        r" after\bin4 {}}x\par"
    )
    doc = parse_rtf(data, ParseContext())
    assert doc.title == "Annual édition"
    assert doc.metadata["author"] == "Ann Example"
    assert [b.text for b in doc.blocks] == ["link text after"]


def test_breaks_tabs_pages_and_special_characters():
    data = rtf(r"one\line two\tab three\page four\par \emdash\~\ldblquote q\rdblquote\par")
    assert texts(data) == ["one\ntwo three", "four", "— “q”"]


def test_headings_from_outline_level_and_style_names_and_lists():
    data = rtf(
        r"{\stylesheet{\s0 Normal;}{\s1\outlinelevel0 Heading 1;}{\s2 heading 2;}{\*\cs10 Emphasis;}}"
        r"\pard\s1 Top\par\pard\s2 Second\par\pard\outlinelevel2 Third\par\pard Body\par"
        r"{\listtext\'95\tab}first\par{\pntext 2.\tab}second\par\pard\ls1 marker from the list table\par"
    )
    blocks = parse_rtf(data, ParseContext()).blocks
    assert [(b.kind, b.text, b.level) for b in blocks[:3]] == [
        (BlockKind.HEADING, "Top", 1),
        (BlockKind.HEADING, "Second", 2),
        (BlockKind.HEADING, "Third", 3),
    ]
    assert blocks[3].heading_path == ["Top", "Second", "Third"]
    assert [(b.kind, b.text) for b in blocks[4:]] == [
        (BlockKind.LIST, "• first"),
        (BlockKind.LIST, "2. second"),
        (BlockKind.LIST, "marker from the list table"),
    ]


def test_tables_rows_and_cells_and_nested_tables_flattened():
    data = rtf(
        r"\pard before\par"
        r"\trowd\cellx1000\cellx2000\pard\intbl Name\cell Age\cell\row"
        r"\trowd\cellx1000\cellx2000\pard\intbl Ann\cell 41\cell\row"
        r"\pard after\par"
    )
    blocks = parse_rtf(data, ParseContext()).blocks
    assert [b.kind for b in blocks] == [BlockKind.PARAGRAPH, BlockKind.TABLE, BlockKind.PARAGRAPH]
    assert blocks[1].header == ["Name", "Age"] and blocks[1].rows == [["Ann", "41"]]
    nested = rtf(
        r"\trowd\cellx5000\pard\intbl\itap2 inner a\nestcell inner b\nestcell"
        r"{\*\nesttableprops\trowd\cellx4000\nestrow}{\nonesttables fallback\par}\pard\intbl outer\cell\row"
    )
    (table,) = parse_rtf(nested, ParseContext()).blocks
    assert table.rows == [["inner a\ninner b\nouter"]]


def test_headers_footers_and_footnotes_are_kept_once():
    data = rtf(
        r"{\headerl Company confidential\par}{\headerr Company confidential\par}{\footer Page footer\par}"
        r"Body text{\footnote\pard See the appendix.\par}\par"
    )
    blocks = parse_rtf(data, ParseContext()).blocks
    assert [(b.text, b.metadata.get("part")) for b in blocks] == [
        ("Body text", None),
        ("Company confidential", "headerl"),
        ("Page footer", "footer"),
        ("See the appendix.", "footnote"),
    ]


def test_hidden_text_is_left_out_and_fragments_without_header_are_read():
    assert texts(rtf(r"shown {\v hidden}\v0  too\par")) == ["shown too"]
    fragment = rb"{\pard Simple text\par}{\trowd\cellx100\pard\intbl A\cell B\cell\row}"
    assert texts(fragment) == ["Simple text", "A\tB"]


# --------------------------------------------------------------------------- bad input


def test_malformed_input_raises_typed_errors():
    with pytest.raises(ParseError) as err:
        parse_rtf(b"plain text, no rtf", ParseContext())
    assert err.value.code == ParseErrorCode.CORRUPT
    with pytest.raises(ParseError) as err:
        parse_rtf(rtf(r"{\*\generator only}{\colortbl;}"), ParseContext())
    assert err.value.code == ParseErrorCode.EMPTY
    # unbalanced braces and a truncated file still give the text that is there
    assert texts(rb"{\rtf1\ansi hello}}}} more") == ["hello"]
    assert texts(rb"{\rtf1\ansi {\b unfinished \'") == ["unfinished"]


def test_caps_depth_chars_and_time():
    with pytest.raises(ParseError) as err:
        parse_rtf(rtf("{" * 300 + "deep" + "}" * 300), ParseContext())
    assert err.value.code == ParseErrorCode.BOMB
    with pytest.raises(ParseError) as err:
        parse_rtf(rtf("x" * 5000 + r"\par"), ParseContext(options={"max_chars": 1000}))
    assert err.value.code == ParseErrorCode.TOO_LARGE
    with pytest.raises(ParseError) as err:
        parse_rtf(rtf(r"\b word\b0 " * 10_000), ParseContext(options={"time_budget_s": 0}))
    assert err.value.code == ParseErrorCode.TIMEOUT


# --------------------------------------------------------------------------- real files


def _chars(text: str) -> collections.Counter[str]:
    return collections.Counter(c for c in text if not c.isspace())


@pytest.fixture(scope="module")
def libreoffice_texts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if SOFFICE is None:
        pytest.skip("LibreOffice (soffice) not installed")
    out = tmp_path_factory.mktemp("lo-rtf")
    profile = tmp_path_factory.mktemp("lo-profile")
    files = sorted(str(p) for p in REALDOCS.glob("*.rtf"))
    subprocess.run(
        [
            *(SOFFICE, "--headless", "--norestore", f"-env:UserInstallation={profile.as_uri()}"),
            *("--convert-to", "txt:Text (encoded):UTF8", "--outdir", str(out), *files),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return {p.stem: p.read_text("utf-8", errors="replace").lstrip("\ufeff") for p in out.glob("*.txt")}


@pytest.mark.skipif(not REALDOCS.is_dir(), reason="../shared/realdocs/rtf not present")
def test_real_rtf_files_give_what_libreoffice_gives(libreoffice_texts: dict[str, str]):
    recalls: dict[str, float] = {}
    for path in sorted(REALDOCS.glob("*.rtf")):
        data = path.read_bytes()
        try:  # embedded objects aside: LibreOffice's text has none of them
            ours = parse_bytes(data, path.name, embed_max_files=0).text
        except ParseError as exc:
            assert exc.code == ParseErrorCode.EMPTY, (path.name, exc)
            ours = ""
        theirs = libreoffice_texts.get(path.stem, "")
        if "\\par" in theirs or not _chars(theirs):
            continue  # LibreOffice read it as plain text (a header-less fragment) or found nothing
        want = _chars(theirs)
        recalls[path.name] = sum((want & _chars(ours)).values()) / sum(want.values())
    print("RTF character recall vs LibreOffice:", {k: round(v, 3) for k, v in recalls.items()})
    assert len(recalls) >= 20
    # LibreOffice writes "?" for an unpaired surrogate where we write U+FFFD
    assert min(recalls.values()) >= 0.9
    assert sum(recalls.values()) / len(recalls) >= 0.99


@pytest.mark.skipif(not REALDOCS.is_dir(), reason="../shared/realdocs/rtf not present")
def test_real_rtf_structure():
    japanese = parse_bytes((REALDOCS / "0730_testRTF-ms932.rtf").read_bytes(), "x.rtf")
    assert japanese.title == "タイトル" and "こんにちは" in japanese.text and "テスト" in japanese.text
    headings = parse_bytes((REALDOCS / "0743_heading.rtf").read_bytes(), "x.rtf")
    assert [(b.text, b.level) for b in headings.blocks if b.kind == BlockKind.HEADING] == [
        ("Heading 1", 1),
        ("Heading 2", 2),
        ("Heading 3", 3),
    ]
    table = parse_bytes((REALDOCS / "0745_table_error_codes.rtf").read_bytes(), "x.rtf")
    (block,) = [b for b in table.blocks if b.kind == BlockKind.TABLE]
    assert block.header == ["Code", "Error"] and block.rows[0] == ["3", "PandocFailOnWarningError"]


# --------------------------------------------------------------------------- embedded objects


def _ole1_object(class_name: bytes, native: bytes, format_id: int = 2) -> str:
    """An OLE 1.0 EmbeddedObject ([MS-OLEDS] 2.2.4) as RTF's \\objdata hex, in 64-character lines."""

    def counted(value: bytes) -> bytes:
        return struct.pack("<I", len(value)) + value

    data = struct.pack("<II", 0x0501, format_id) + counted(class_name + b"\0") + counted(b"") + counted(b"")
    data += counted(native)
    hexed = data.hex()
    return "\n".join(hexed[i : i + 64] for i in range(0, len(hexed), 64))


def _packaged(label: str, content: bytes) -> bytes:
    """Object Packager native data: signature, label, source path, reserved, temp path, the file."""
    name = label.encode("cp1252") + b"\0"
    temp = b"C:\\Temp\\" + name
    return (
        b"\x02\x00"
        + name
        + b"C:\\src\\"
        + name
        + b"\x00\x00\x03\x00"
        + struct.pack("<I", len(temp))
        + temp
        + (struct.pack("<I", len(content)) + content)
    )


def test_embedded_packaged_files_are_parsed_linked_and_broken_ones_are_not():
    csv_object = _ole1_object(b"Package", _packaged("stock.csv", b"item,qty\nbolts,12\nnuts,30\n"))
    png_object = _ole1_object(b"Package", _packaged("logo.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 40))
    linked = _ole1_object(b"Word.Document.8", b"C:\\elsewhere.doc", format_id=1)
    broken = _ole1_object(b"Package", _packaged("cut.txt", b"x" * 100))[:80]
    body = "".join(
        r"{\object\objemb{\*\objclass Package}{\*\objdata " + hexed + r"}{\result {\pict\wmetafile8 00}}}"
        for hexed in (csv_object, png_object, linked, broken)
    )
    doc = parse_bytes(rtf(r"Before the objects.\par " + body + r"\par"), "with-objects.rtf")
    assert doc.blocks[0].text == "Before the objects."
    assert [item["name"] for item in doc.metadata["embedded"]] == ["stock.csv"]
    tables = [b for b in doc.blocks if b.kind == BlockKind.TABLE]
    assert tables and all(b.metadata["embedded_from"] == ["stock.csv"] for b in tables)
    assert "bolts" in doc.text and "nuts" in doc.text
    assert doc.metadata["embedded_skipped"] == [{"name": "object 4", "reason": "object data truncated or not OLE 1.0"}]
    assert "png" not in str(doc.metadata.get("embedded_failed", ""))  # images only with embedded_images: ocr
    capped = parse_rtf(rtf("x\\par " + body), ParseContext(options={"embed_max_total": 20}))
    assert {s["reason"] for s in capped.metadata["embedded_skipped"]} >= {"embedded objects exceed embed_max_total"}


@pytest.mark.skipif(not REALDOCS.is_dir(), reason="../shared/realdocs/rtf not present")
def test_real_embedded_office_objects():
    data = (REALDOCS / "0744_testRTFEmbeddedFiles.rtf").read_bytes()
    # its first objects: a Word 97 document (LibreOffice), an Excel 2007 workbook in an OLE wrapper
    # (the Word document carries Hw.txt: one allowance for the whole tree, so three files)
    doc = parse_bytes(data, "objects.rtf", embed_max_files=3 if SOFFICE else 1)
    parsed = {item["name"]: item["parser"] for item in doc.metadata["embedded"]}
    if SOFFICE:
        assert parsed == {"Word.Document.8": "legacy-office", "Excel.Sheet.12": "xlsx"}
    else:
        assert doc.metadata["embedded_failed"][0]["code"] == "unsupported"
    assert doc.metadata["embedded_skipped"]  # the other twelve, over embed_max_files


# --------------------------------------------------------------------------- fuzz

FUZZ_BUDGET_S = 5.0
_RTF_JUNK = [
    b"{",
    b"}",
    b"\\",
    b"\\'",
    b"\\'zz",
    b"\\u-",
    b"\\u99999999999",
    b"\\bin99999 ",
    b"{\\*",
    b"\\uc9",
    b"\xff",
]


def _rtf_seeds() -> list[bytes]:
    seeds = [
        rtf(r"{\info{\title T}}\pard\s1 Head\par body \'e9 \u8364?\par\trowd\pard\intbl a\cell b\cell\row"),
        rtf(r"{\stylesheet{\s1 heading 1;}}{\listtext 1.\tab}item\par{\footnote note\par}\bin3 abc end\par"),
    ]
    if REALDOCS.is_dir():
        seeds += [p.read_bytes() for p in sorted(REALDOCS.glob("*.rtf")) if p.stat().st_size < 64 * 1024][:8]
    return seeds


def test_fuzzed_rtf_raises_only_parse_errors_within_budget():
    import time

    from hypothesis import HealthCheck, given, settings

    seeds = _rtf_seeds()

    @settings(
        max_examples=300,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=mutated_bytes(seeds, _RTF_JUNK, 300))
    def run(data: bytes) -> None:
        started = time.monotonic()
        with contextlib.suppress(ParseError):
            parse_rtf(data, ParseContext(options={"time_budget_s": FUZZ_BUDGET_S}))
        assert time.monotonic() - started < FUZZ_BUDGET_S + 2

    run()
