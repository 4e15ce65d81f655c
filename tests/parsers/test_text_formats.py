"""Text-family formats of issue 23 point 4: plain text and source code with indentation kept, logs,
generic XML, concatenated JSON, and the text sniffer that tells them apart (RTF, notebooks, XML).

Real files: ``../shared/realdocs/{txt,json,md,csv}`` (other projects' test suites; skipped when
absent), the Python standard library's own ``json/decoder.py`` as source code, and Debian's
iso-codes XML (skipped when not installed). The fuzz at the end mutates seeds of the new formats
as ``tests/reliability/test_fuzz.py`` does (property: only ``ParseError``, within the budget).
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from include.contract import BlockKind, ParseError, ParseErrorCode
from plugins.parsers import sniff_media_type
from plugins.parsers.sniff import RTF
from tests.parsers.capped import MiB, run_capped
from tests.parsers.conftest import parse_bytes
from tests.parsers.test_notebook import CELLS, notebook_v4
from tests.parsers.test_structured import CONFIG, TOML

REALDOCS = Path(__file__).resolve().parents[2].parent / "shared" / "realdocs"
needs_realdocs = pytest.mark.skipif(not REALDOCS.is_dir(), reason=f"real documents not present at {REALDOCS}")
ISO_CODES = Path("/usr/share/xml/iso-codes/iso_4217.xml")

# --------------------------------------------------------------------------- plain text


def test_plain_text_keeps_leading_whitespace() -> None:
    data = b"Poem:\n    indented verse\n\tand a tab   \n\nname    qty\n  pear    2\n"
    doc = parse_bytes(data, "notes.txt")
    assert [(b.text, b.positions[0].line) for b in doc.blocks] == [
        ("Poem:\n    indented verse\n\tand a tab", 1),  # trailing spaces dropped, leading kept
        ("name    qty\n  pear    2", 5),
    ]
    assert doc.title == "Poem:"


@needs_realdocs
def test_real_text_keeps_its_code_indentation() -> None:
    # pandoc's test suite: indented code blocks in a .txt
    doc = parse_bytes((REALDOCS / "txt" / "0794_testsuite.txt").read_bytes(), "testsuite.txt")
    assert '    sub status {\n        print "working";\n    }' in doc.text
    assert "\tthis code block is indented by one tab" in doc.text


# --------------------------------------------------------------------------- source code and logs

PY = b'''"""Module doc."""
import os
import sys


def first(x):
    if x:
        return 1

    return 2


@decorator
def second():
    pass
class Back2Back:
    def method(self):
        return "inside"
'''


def test_python_source_blocks_at_top_level_definitions() -> None:
    doc = parse_bytes(PY, "tool.py")
    assert doc.parser == "source" and doc.metadata["language"] == "python"
    assert all(b.kind == BlockKind.CODE and b.metadata == {"language": "python"} for b in doc.blocks)
    assert [(b.positions[0].line, b.text.splitlines()[0]) for b in doc.blocks] == [
        (1, '"""Module doc."""'),
        (6, "def first(x):"),  # the blank line inside the function does not cut it
        (13, "@decorator"),  # a decorator stays with its function
        (16, "class Back2Back:"),  # a definition right after another one still starts a block
    ]
    assert doc.blocks[1].text == "def first(x):\n    if x:\n        return 1\n\n    return 2"


@pytest.mark.parametrize(
    ("name", "source", "language", "starts"),
    [
        (
            "main.go",
            b'package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println(1)\n\n\tfmt.Println(2)\n}\n',
            "go",
            [1, 5],
        ),
        (
            "lib.rs",
            b"use std::io;\nuse std::fs;\nuse std::env;\n\npub fn run() {\n    let x = 1;\n}\n\nimpl A {\n    fn b() {}\n}\n",
            "rust",
            [1, 5, 9],
        ),
        (
            "x.c",
            b"#include <stdio.h>\n#include <a.h>\n#include <b.h>\n\nint main(void)\n{\n    return 0;\n}\n",
            "c",
            [1, 5],
        ),
        (
            "app.ts",
            b"import a from 'a';\nimport b from 'b';\nimport c from 'c';\nexport function f(): number {\n  return 1;\n}\n",
            "typescript",
            [1, 4],
        ),
        ("q.sql", b"-- report\nSELECT a,\n       b\n  FROM t;\n\nCREATE TABLE x (\n  id int\n);\n", "sql", [1, 6]),
    ],
)
def test_source_languages_from_the_extension(name: str, source: bytes, language: str, starts: list[int]) -> None:
    doc = parse_bytes(source, name)
    assert doc.metadata["language"] == language
    assert [b.positions[0].line for b in doc.blocks] == starts
    # every line is kept exactly (indentation, tabs), only blank lines between blocks go
    assert [line for line in source.decode().splitlines() if line.strip()] == [
        line for b in doc.blocks for line in b.text.splitlines() if line.strip()
    ]


def test_real_source_file_from_the_standard_library() -> None:
    path = Path(json.__file__).with_name("decoder.py")
    data = path.read_bytes()
    doc = parse_bytes(data, path.name)
    assert doc.metadata["language"] == "python"
    assert all(b.kind == BlockKind.CODE for b in doc.blocks)
    heads = {b.text.splitlines()[0] for b in doc.blocks}
    assert "class JSONDecoder(object):" in heads and "def py_scanstring(s, end, strict=True," in heads
    assert max(len(b.text.splitlines()) for b in doc.blocks) <= 300
    # nothing lost, indentation included
    assert [ln.rstrip() for ln in data.decode().splitlines() if ln.strip()] == [
        ln for b in doc.blocks for ln in b.text.splitlines() if ln.strip()
    ]


def test_a_huge_class_is_cut_into_bounded_blocks() -> None:
    body = "".join(f"    def m{i}(self):\n        return {i}\n\n" for i in range(400))
    doc = parse_bytes(f"class Big:\n{body}".encode(), "big.py")
    sizes = [len(b.text.splitlines()) for b in doc.blocks]
    assert len(sizes) > 5 and max(sizes) <= 300
    assert doc.blocks[1].text.startswith("    def m")  # cut at a blank line, between methods


def test_logs_keep_lines_and_binary_named_source_is_refused() -> None:
    log = b"".join(b"2026-01-01 12:00:%02d INFO step %d\n    at frame %d\n" % (i % 60, i, i) for i in range(120))
    doc = parse_bytes(log, "worker.log")
    assert doc.parser == "log" and [len(b.text.splitlines()) for b in doc.blocks] == [100, 100, 40]
    assert doc.blocks[1].positions[0].line == 101 and "\n    at frame 50" in doc.blocks[1].text
    with pytest.raises(ParseError) as err:
        parse_bytes(b"G@\x00\x10\x00\x00\xb0\r\x00\x01" * 100, "video.ts")  # an MPEG transport stream
    assert err.value.code == ParseErrorCode.UNSUPPORTED


# --------------------------------------------------------------------------- XML

DOCBOOK = b"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE book PUBLIC "-//OASIS//DTD DocBook XML V4.5//EN" "http://www.oasis-open.org/docbook/xml/4.5/docbookx.dtd">
<book xmlns:xlink="http://www.w3.org/1999/xlink">
  <title>User Guide</title>
  <chapter id="c1">
    <title>Install</title>
    <para>Run the <command>setup</command> script, then <emphasis>restart</emphasis>.</para>
    <programlisting>make install
    sudo make check</programlisting>
    <section><title>Options</title><para>Two of them.</para><para>Really.</para></section>
    <figure><mediaobject><imageobject><imagedata fileref="a.png"/></imageobject>
      <textobject><phrase>unused</phrase></textobject></mediaobject></figure>
    <img alt="A diagram of the pipeline" src="p.png"/>
  </chapter>
  <!-- a comment is not text -->
  <?pi not text?>
</book>
"""


def test_xml_text_by_element_with_paths_and_headings() -> None:
    doc = parse_bytes(DOCBOOK, "guide.xml")
    assert doc.parser == "xml" and doc.title == "User Guide"
    got = [(b.kind, b.text, b.positions[0].path, b.level) for b in doc.blocks]
    assert got == [
        (BlockKind.HEADING, "User Guide", "/book/title", 1),
        (BlockKind.HEADING, "Install", "/book/chapter/title", 2),
        (BlockKind.PARAGRAPH, "Run the setup script, then restart.", "/book/chapter/para", None),
        (BlockKind.CODE, "make install\n    sudo make check", "/book/chapter/programlisting", None),
        (BlockKind.HEADING, "Options", "/book/chapter/section/title", 3),
        (BlockKind.PARAGRAPH, "Two of them.", "/book/chapter/section/para[1]", None),
        (BlockKind.PARAGRAPH, "Really.", "/book/chapter/section/para[2]", None),
        (BlockKind.PARAGRAPH, "unused", "/book/chapter/figure/mediaobject/textobject/phrase", None),
        (BlockKind.PARAGRAPH, "A diagram of the pipeline", "/book/chapter/img", None),
    ]
    assert doc.blocks[6].heading_path == ["User Guide", "Install", "Options"]
    assert "comment" not in doc.text and "pi not" not in doc.text


def test_rss_svg_and_namespaces() -> None:
    rss = b"""<?xml version="1.0"?><rss version="2.0"><channel><title>News</title>
      <item><title>First</title><description>&lt;p&gt;Body one&lt;/p&gt;</description></item>
      <item><title>Second</title><description>Body two</description></item></channel></rss>"""
    assert sniff_media_type(rss, "feed") == "application/xml"
    doc = parse_bytes(rss, "feed")
    assert [b.positions[0].path for b in doc.blocks][:3] == [
        "/rss/channel/title",
        "/rss/channel/item[1]/title",
        "/rss/channel/item[1]/description",
    ]
    assert doc.blocks[2].text == "<p>Body one</p>"  # escaped markup is the feed's text
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><title>Chart</title><g><text x="1">Q1 sales</text></g></svg>'
    doc = parse_bytes(svg, "chart.svg")
    assert [(b.text, b.positions[0].path) for b in doc.blocks] == [("Chart", "/svg/title"), ("Q1 sales", "/svg/g/text")]
    ns = b'<a:root xmlns:a="urn:a"><a:item>x</a:item><a:item>y</a:item></a:root>'
    assert [b.positions[0].path for b in parse_bytes(ns, "n.xml").blocks] == ["/a:root/a:item[1]", "/a:root/a:item[2]"]


def test_xhtml_declared_as_xml_goes_to_the_html_parser() -> None:
    xhtml = b'<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml"><body><h1>T</h1><p>x</p></body></html>'
    doc = parse_bytes(xhtml, "page.xml")
    assert [b.kind for b in doc.blocks] == [BlockKind.HEADING, BlockKind.PARAGRAPH]


@pytest.mark.skipif(not ISO_CODES.exists(), reason="Debian's iso-codes package is not installed")
def test_real_xml_with_text_in_attributes() -> None:
    doc = parse_bytes(ISO_CODES.read_bytes(), ISO_CODES.name)
    assert doc.blocks[0].positions[0].path == "/iso_4217_entries/iso_4217_entry[1]"
    assert "UAE Dirham" in doc.blocks[0].text and "784" not in doc.text  # names, not codes
    assert len(doc.blocks) > 150


def test_malformed_xml_is_recovered_and_hostile_xml_is_typed() -> None:
    doc = parse_bytes(b"<notes><n>kept text</n><n>cut off", "broken.xml")
    assert doc.metadata["recovered"] is True and doc.blocks[0].text == "kept text"
    laughs = b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "lol"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
    laughs += b"".join(b'<!ENTITY %c "%s">' % (99 + i, b"".join([b"&%c;" % (98 + i)] * 10)) for i in range(8))
    laughs += b"]><l>&j;</l>"
    cases = [
        (laughs, ParseErrorCode.EMPTY),  # entities are never expanded: nothing to say
        (b"<a>" * 10_000 + b"x" + b"</a>" * 10_000, ParseErrorCode.BOMB),  # libxml2's depth cap
        (b'<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><x>&e;</x>', ParseErrorCode.EMPTY),  # no XXE
        (b"", ParseErrorCode.EMPTY),
        (b"\x00\x01\x02", ParseErrorCode.CORRUPT),
    ]
    for data, code in cases:
        with pytest.raises(ParseError) as err:
            parse_bytes(data, "hostile.xml")
        assert err.value.code == code, data[:40]
    with pytest.raises(ParseError) as err:
        parse_bytes(b"<r>" + b"<i>x</i>" * 100, "cap.xml", xml_max_total=500)
    assert err.value.code == ParseErrorCode.TOO_LARGE


# --------------------------------------------------------------------------- concatenated JSON


def test_concatenated_json_is_a_stream_of_records() -> None:
    for name in ("stream.json", "stream.jsonl", "stream"):
        doc = parse_bytes(b'{"a":1}{"b":{"c":2}}\n[3, 4] {"d":"x"}', name)
        assert [(b.text, b.positions[0].line) for b in doc.blocks] == [
            ("a: 1", 1),
            ("b.c: 2", 1),
            (": 3, 4", 2),
            ("d: x", 2),
        ], name
    # pretty-printed objects back to back, "}{" on one line (six lines each)
    pretty = b"".join(json.dumps({"id": i, "tags": ["t"]}, indent=2).encode() for i in range(3))
    doc = parse_bytes(pretty, "pretty.json")
    assert [b.positions[0].line for b in doc.blocks] == [1, 6, 11]
    # RFC 7464 JSON text sequence
    doc = parse_bytes(b'\x1e{"a":1}\n\x1e{"a":2}\n', "seq.json")
    assert [b.text for b in doc.blocks] == ["a: 1", "a: 2"]


def test_concatenated_json_with_a_truncated_tail_keeps_the_good_records() -> None:
    doc = parse_bytes(b'{"a":1}{"a":2}{"a":', "cut.json")
    assert [b.text for b in doc.blocks] == ["a: 1", "a: 2"]
    assert doc.metadata == {"invalid_lines": 1, "first_invalid_line": 1}
    with pytest.raises(ParseError) as err:
        parse_bytes(b'{"a":', "only-cut.jsonl")
    assert err.value.code == ParseErrorCode.CORRUPT


def test_big_concatenated_json_is_sniffed_and_parsed() -> None:
    big = b"".join(b'{"n":%d,"text":"%s"}' % (i, b"x" * 50) for i in range(5_000))  # no newlines, 330 KB
    assert len(big) > 65536
    assert sniff_media_type(big, "") == "application/x-ndjson"
    assert sniff_media_type(big[:-10], "") == "application/x-ndjson"  # truncated
    doc = parse_bytes(big, "")
    assert len(doc.blocks) == 5_000 and doc.blocks[-1].text.startswith("n: 4999")
    assert sniff_media_type(b'{"a":1}{"b":2}', "") == "application/x-ndjson"
    assert sniff_media_type(b'{"a":1}\n{"b":', "") == "text/plain"  # one value and garbage: not a stream


def test_json_stream_limits() -> None:
    deep = b'{"ok":1}\n' + b"[" * 100_000 + b"]" * 100_000 + b'\n{"ok":2}\n'
    doc = parse_bytes(deep, "deep.jsonl")
    assert [b.text for b in doc.blocks] == ["ok: 1", "ok: 2"] and doc.metadata["invalid_lines"] == 1
    with pytest.raises(ParseError) as err:
        parse_bytes(b'{"a":1}' * 50, "many.json", max_rows=10)
    assert err.value.code == ParseErrorCode.TOO_LARGE
    huge_line = b'{"text":"' + b"y" * (8 * MiB) + b'"}{"b":1}'
    result, growth = run_capped(lambda: [len(b.text) for b in parse_bytes(huge_line, "huge.json").blocks], 1024 * MiB)
    assert result == [8 * MiB + len("text: "), len("b: 1")]
    assert growth < 400 * MiB


# --------------------------------------------------------------------------- sniffing


def test_rtf_over_64_kib_is_rtf_not_json() -> None:
    rtf = b"{\\rtf1\\ansi\\deff0{\\fonttbl{\\f0 Times;}}" + b"\\par Some text. " * 6_000 + b"}"
    assert len(rtf) > 65536
    for name, declared in (("", None), ("letter.rtf", None), ("upload", "application/octet-stream")):
        assert sniff_media_type(rtf, name, declared) == RTF
    assert sniff_media_type(b"\xef\xbb\xbf\r\n" + rtf, "") == RTF  # BOM and blank lines first


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'<?xml version="1.0"?><anything/>', "application/xml"),
        (b"<!-- c --><catalog><item>x</item></catalog>", "application/xml"),
        (b"<!DOCTYPE note [<!ELEMENT note (#PCDATA)>]>\n<note>hi</note>", "application/xml"),
        (b"<p>hello</p>", "text/plain"),  # an HTML fragment is not XML
        (b"<div>a<br>b</div><p>c</p><table></table>", "text/html"),
        (b'<?xml version="1.0"?><html><body>x</body></html>', "text/html"),
        (b"< not a tag", "text/plain"),
    ],
)
def test_sniff_xml(data: bytes, expected: str) -> None:
    assert sniff_media_type(data, "") == expected


# --------------------------------------------------------------------------- real files


@needs_realdocs
@pytest.mark.parametrize("fmt", ["json", "txt", "md", "csv"])
def test_real_text_family_files_parse_or_fail_typed(fmt: str) -> None:
    files = sorted((REALDOCS / fmt).iterdir())
    if not files:
        pytest.skip(f"no {fmt} files in {REALDOCS}")
    parsed = 0
    for path in files:
        try:
            doc = parse_bytes(path.read_bytes(), path.name)
        except ParseError:
            continue
        parsed += 1
        assert doc.blocks and all(b.text.strip() for b in doc.blocks), path.name
    assert parsed >= len(files) * 0.9


# --------------------------------------------------------------------------- fuzz

BUDGET_S = 5.0
FUZZ_OPTIONS: dict[str, object] = {"time_budget_s": BUDGET_S, "max_bytes": 4 << 20}
SEEDS: list[tuple[str, bytes]] = [
    ("n.ipynb", notebook_v4(CELLS)),
    ("c.yaml", CONFIG),
    ("c.toml", TOML),
    ("g.xml", DOCBOOK),
    ("t.py", PY),
    ("s.json", b'{"a":1}{"b":[1,2,{"c":null}]}\n{"d":"\\u00e9"}'),
    ("w.log", b"2026 INFO a\n  b\n\n2026 WARN c\n"),
    ("n.txt", b"  indented\n\ttab\n"),
]


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    name, data = draw(st.sampled_from(SEEDS))
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "repeat"]))
        pos = draw(st.integers(0, max(len(buf) - 1, 0)))
        if op == "flip" and buf:
            buf[pos] = draw(st.integers(0, 255))
        elif op == "cut":
            del buf[pos : pos + draw(st.integers(1, 64))]
        elif op == "insert":
            buf[pos:pos] = draw(st.sampled_from([b"{", b"[", b"&a", b"*a", b"<", b"\x00", b"\n", b'"', b"\x1e", b": "]))
        else:
            end = min(len(buf), pos + draw(st.integers(1, 32)))
            buf[pos:pos] = bytes(buf[pos:end]) * draw(st.integers(2, 50))
    # half the cases without a name: the sniffer routes them
    return (name if draw(st.booleans()) else ""), bytes(buf)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_fuzz_text_formats_only_raise_parse_error(case: tuple[str, bytes]) -> None:
    name, data = case
    started = time.monotonic()
    with contextlib.suppress(ParseError):  # anything else fails the test
        parse_bytes(data, name, None, **FUZZ_OPTIONS)
    assert time.monotonic() - started < BUDGET_S + 10
