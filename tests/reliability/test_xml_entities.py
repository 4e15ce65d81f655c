"""XML external entities, external DTDs and remote references in every XML-based format (issue 10,
item 3).

Each case is a real document with a hostile prologue put into one XML member: external general
entities pointing at ``file:///etc/passwd``, at a marker file of this test, and at a live HTTP
server on 127.0.0.1; a parameter entity and an external DTD subset on that server; the entity
references placed in a text node the parser extracts. Every XML member of every OOXML package
(docx, xlsx, pptx: document, styles, numbering, shared strings, sheets, slides, layouts, themes,
core properties, content types, relationships) gets its turn; HTML, XHTML and Markdown (inline
HTML) get the same prologue plus sub-resources (img, link, script, iframe, object, base, XInclude).
OOXML packages also get external relationships (a linked image, an attached template, a hyperlink,
an external workbook link).

Properties: the parse ends in a document or a ``ParseError``; neither the passwd content nor the
marker appears anywhere in the result (text, title, metadata) or the error; the HTTP server
receives **zero** requests over the whole module.

tests/parsers/test_hostile.py::test_entity_expansion_not_performed (internal "billion laughs" in a
docx) and tests/parsers/test_html.py::test_no_network_no_entities (file entity in HTML) cover two
single cases; this module covers the rest.
"""

from __future__ import annotations

import io
import json
import re
import threading
import uuid
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from include.contract import ParseError, RawDocument
from plugins.parsers import parse_document
from tests.reliability.test_fuzz import _HTML, _MD, DOCX, PPTX, XLSX, _docx_seeds, _pptx_seed, _xlsx_seed

OPTIONS = {"time_budget_s": 10.0}
PASSWD = Path("/etc/passwd")


class _Server:
    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                hits.append(f"{self.command} {self.path}")
                # a DTD (external subset, parameter entity) or the text of a general entity
                body = b'<!ENTITY leak "FETCHED">' if self.path.endswith(".dtd") else b"FETCHED-OVER-HTTP"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_HEAD = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)


@pytest.fixture(scope="module")
def server() -> Iterator[_Server]:
    srv = _Server()
    srv.thread.start()
    try:
        yield srv
    finally:
        srv.httpd.shutdown()
        srv.thread.join(timeout=10)


@pytest.fixture(scope="module")
def marker(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    secret = f"XXE-MARKER-{uuid.uuid4().hex}"
    path = tmp_path_factory.mktemp("xxe") / "marker.txt"
    path.write_text(secret)
    return path, secret


def _prologue(url: str, marker_path: Path, root: str = "r") -> str:
    return (
        f'<!DOCTYPE {root} SYSTEM "{url}/external-subset.dtd" ['
        f'<!ENTITY % remote SYSTEM "{url}/parameter.dtd"> %remote;'
        f'<!ENTITY passwd SYSTEM "file://{PASSWD}">'
        f'<!ENTITY marker SYSTEM "file://{marker_path}">'
        f'<!ENTITY web SYSTEM "{url}/general-entity">'
        "]>"
    )


_REFS = "[&passwd;|&marker;|&web;]"
_TEXT_NODE = re.compile(rb"<(?:\w+:)?t(?:\s[^>]*)?>")  # <w:t>, <a:t>, <t>: text the parsers extract
_ROOT_START = re.compile(rb"<(?![?!])([\w:.-]+)[^>]*?(/?)>")


def _poison_xml(xml: bytes, url: str, marker_path: Path) -> bytes:
    """Put the hostile DOCTYPE after the XML declaration and the entity references in a text node
    (or, failing one, in the root element; an empty root ``<x/>`` is opened up for them)."""
    root = _ROOT_START.search(xml)
    assert root is not None
    decl_end = xml.index(b"?>") + 2 if xml.lstrip().startswith(b"<?xml") else 0
    prologue = _prologue(url, marker_path, root.group(1).decode()).encode()
    refs = _REFS.encode()
    if root.group(2):  # <root .../> -> <root ...>refs</root>
        opened = root.group(0)[:-2] + b">" + refs + b"</" + root.group(1) + b">"
        return xml[:decl_end] + prologue + xml[decl_end : root.start()] + opened + xml[root.end() :]
    text = _TEXT_NODE.search(xml, root.end())
    at = text.end() if text else root.end()
    return xml[:decl_end] + prologue + xml[decl_end:at] + refs + xml[at:]


def _rebuild(package: bytes, replace: dict[str, bytes], add: dict[str, bytes] | None = None) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(package)) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, replace.get(info.filename, zin.read(info)))
        for name, data in (add or {}).items():
            zout.writestr(name, data)
    return out.getvalue()


_OOXML = {
    "docx": (DOCX, "x.docx", _docx_seeds()[0]),
    "xlsx": (XLSX, "x.xlsx", _xlsx_seed()),
    "pptx": (PPTX, "x.pptx", _pptx_seed()),
}
_MEMBERS = [
    (fmt, name)
    for fmt, (_, _, seed) in _OOXML.items()
    for name in zipfile.ZipFile(io.BytesIO(seed)).namelist()
    if name.endswith((".xml", ".rels"))
]


def _check(data: bytes, file_name: str, media_type: str, server: _Server, marker: tuple[Path, str]) -> str:
    """Parse; assert nothing leaked in and nothing was fetched. Returns the outcome."""
    try:
        doc = parse_document(RawDocument("xxe", data, file_name, media_type=media_type), OPTIONS)
        seen, outcome = json.dumps(doc.to_dict(), ensure_ascii=False), "parsed"
    except ParseError as exc:
        seen, outcome = f"{exc.code.value} {exc.message}", exc.code.value
    assert "root:x:0:0" not in seen and marker[1] not in seen and "FETCHED-OVER-HTTP" not in seen
    assert server.hits == [], f"the parser fetched {server.hits}"
    return outcome


@pytest.mark.parametrize(("fmt", "member"), _MEMBERS, ids=[f"{f}:{m}" for f, m in _MEMBERS])
def test_external_entities_in_every_ooxml_member_are_never_resolved(
    fmt: str, member: str, server: _Server, marker: tuple[Path, str]
) -> None:
    assert "root:x:0:0" in PASSWD.read_text()  # the file the entity points at is really there
    media_type, file_name, seed = _OOXML[fmt]
    with zipfile.ZipFile(io.BytesIO(seed)) as zf:
        poisoned = _poison_xml(zf.read(member), server.url, marker[0])
    assert b"&passwd;" in poisoned
    _check(_rebuild(seed, {member: poisoned}), file_name, media_type, server, marker)


def test_the_main_parts_still_parse_with_the_entities_left_unexpanded(
    server: _Server, marker: tuple[Path, str]
) -> None:
    """Not only refusals: with the prologue in the main part, a docx and a pptx still parse (the
    references stay unexpanded), so the no-leak assertion is about real extracted text."""
    outcomes = {}
    for fmt, member in (("docx", "word/document.xml"), ("pptx", "ppt/slides/slide1.xml")):
        media_type, file_name, seed = _OOXML[fmt]
        with zipfile.ZipFile(io.BytesIO(seed)) as zf:
            poisoned = _poison_xml(zf.read(member), server.url, marker[0])
        outcomes[fmt] = _check(_rebuild(seed, {member: poisoned}), file_name, media_type, server, marker)
    assert outcomes == {"docx": "parsed", "pptx": "parsed"}


_EXTERNAL_RELS = {
    # relationship parts naming remote targets: a linked picture, an attached template, a hyperlink
    "docx": (
        "word/_rels/document.xml.rels",
        '<Relationship Id="rIdX1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/image" '
        'Target="{url}/linked.png" TargetMode="External"/>'
        '<Relationship Id="rIdX2" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/attachedTemplate" '
        'Target="{url}/template.dotx" TargetMode="External"/>'
        '<Relationship Id="rIdX3" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/hyperlink" '
        'Target="{url}/link" TargetMode="External"/>',
    ),
    "xlsx": (
        "xl/_rels/workbook.xml.rels",
        '<Relationship Id="rIdX1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/externalLink" '
        'Target="{url}/book.xlsx" TargetMode="External"/>',
    ),
    "pptx": (
        "ppt/slides/_rels/slide1.xml.rels",
        '<Relationship Id="rIdX1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/image" '
        'Target="{url}/linked.png" TargetMode="External"/>'
        '<Relationship Id="rIdX2" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/video" '
        'Target="{url}/clip.mp4" TargetMode="External"/>',
    ),
}


@pytest.mark.parametrize("fmt", sorted(_EXTERNAL_RELS))
def test_external_relationship_targets_are_never_fetched(fmt: str, server: _Server, marker: tuple[Path, str]) -> None:
    media_type, file_name, seed = _OOXML[fmt]
    member, extra = _EXTERNAL_RELS[fmt]
    with zipfile.ZipFile(io.BytesIO(seed)) as zf:
        rels = zf.read(member)
    rels = rels.replace(b"</Relationships>", extra.format(url=server.url).encode() + b"</Relationships>")
    assert _check(_rebuild(seed, {member: rels}), file_name, media_type, server, marker) == "parsed"


def _html_cases(url: str, marker_path: Path) -> dict[str, tuple[str, str, bytes]]:
    subresources = (
        f'<img src="{url}/img.png"><link rel="stylesheet" href="{url}/style.css">'
        f'<script src="{url}/app.js"></script><iframe src="{url}/frame"></iframe>'
        f'<object data="{url}/obj"></object><video src="{url}/v.mp4"></video>'
        f'<xi:include xmlns:xi="http://www.w3.org/2001/XInclude" href="{url}/xi.xml" parse="text"/>'
        f'<xi:include xmlns:xi="http://www.w3.org/2001/XInclude" href="file://{marker_path}" parse="text"/>'
    )
    prologue = _prologue(url, marker_path, "html")
    html = _HTML.decode().replace("<!doctype html>", prologue)
    html = html.replace("<head>", f'<head><base href="{url}/">').replace("<p>Para", f"<p>{_REFS} {subresources} Para")
    xhtml = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        + prologue
        + '<html xmlns="http://www.w3.org/1999/xhtml"><head><title>T</title></head>'
        + f"<body><h1>标题</h1><p>{_REFS}</p>{subresources}<p>正文</p></body></html>"
    )
    md = (
        f"{prologue}\n\n"
        + _MD.decode()
        + f"\n\nText {_REFS}\n\n<div>{_REFS} {subresources}</div>\n\n![i]({url}/md.png)\n"
    )
    return {
        "html": ("text/html; charset=utf-8", "x.html", html.encode()),
        "xhtml": ("application/xhtml+xml", "x.xhtml", xhtml.encode()),
        "markdown": ("text/markdown", "x.md", md.encode()),
    }


@pytest.mark.parametrize("case", ["html", "xhtml", "markdown"])
def test_html_and_markdown_entities_and_subresources_are_never_resolved(
    case: str, server: _Server, marker: tuple[Path, str]
) -> None:
    media_type, file_name, data = _html_cases(server.url, marker[0])[case]
    assert _check(data, file_name, media_type, server, marker) == "parsed"


def test_the_server_was_reachable_and_never_contacted(server: _Server) -> None:
    """The zero above is meaningful: the server answers a real request (made here, then forgotten)."""
    import httpx

    assert server.hits == []
    assert httpx.get(f"{server.url}/probe").text == "FETCHED-OVER-HTTP"
    assert server.hits == ["GET /probe"]
    server.hits.clear()


def test_the_payload_is_live_against_an_unsafe_parser(server: _Server, marker: tuple[Path, str]) -> None:
    """Control: the same prologue, given to lxml with entity resolution and DTD loading on, reads
    /etc/passwd and the marker, and asks for the three remote URLs. This lxml's libxml2 (2.14) has
    no HTTP client of its own, so a resolver that fetches them stands in for one — and the server
    sees the requests: the parsers' zero above is their settings' doing, not a dead payload."""
    import urllib.request

    from lxml import etree

    class _Fetching(etree.Resolver):
        def resolve(self, url, pubid, context):  # type: ignore[no-untyped-def]
            if url and url.startswith("http://127.0.0.1"):
                with urllib.request.urlopen(url, timeout=5) as answer:
                    return self.resolve_string(answer.read(), context)
            return None

    with zipfile.ZipFile(io.BytesIO(_OOXML["docx"][2])) as zf:
        poisoned = _poison_xml(zf.read("word/document.xml"), server.url, marker[0])
    unsafe = etree.XMLParser(resolve_entities=True, load_dtd=True, no_network=False)
    unsafe.resolvers.add(_Fetching())
    try:
        text = "".join(etree.fromstring(poisoned, unsafe).itertext())
        assert "root:x:0:0" in text and marker[1] in text and "FETCHED-OVER-HTTP" in text
        paths = {hit.split()[1] for hit in server.hits}
        assert {"/external-subset.dtd", "/parameter.dtd", "/general-entity"} <= paths, paths
    finally:
        server.hits.clear()
