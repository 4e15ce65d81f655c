"""Golden digests of the HTML parser's output, to show a rewrite produces the same documents.

Each page's digest is SHA-256 (16 hex) of its parsed document as canonical JSON
(``ParsedDocument.to_dict``), or of the ``ParseError`` it raised. The digests were written by
the parser as it was before the parse path was reworked (commit 'golden digests'), with::

    PYTHONPATH=. python -m tests.parsers.html_golden

Pages: the PostgreSQL 15 manual (Debian ``postgresql-doc-15``), the real-document corpus's HTML
pages (``../shared/realdocs/html``) and a few generated pages (dense, article-like, tables).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path

from include.contract import ParseError, RawDocument
from plugins.parsers import parse_document

PG_MANUAL = Path("/usr/share/doc/postgresql-doc-15/html")
REALDOCS_HTML = Path(__file__).resolve().parents[2].parent / "shared" / "realdocs" / "html"
GOLDEN = Path(__file__).resolve().parent / "golden" / "html_digests.json"


def dense_page(target: int) -> bytes:
    """A page of ``target`` bytes with a block every ~80 bytes: headings, short paragraphs, list items."""
    parts = ["<!doctype html><html><head><title>Dense</title></head><body><main>"]
    size, i = len(parts[0]), 0
    while size < target:
        if i % 10 == 0:
            piece = f"<h2>Part {i} of the reference</h2>\n"
        elif i % 10 == 5:
            piece = f"<ul><li>item {i} one</li><li>item {i} <b>two</b></li><li>item {i} three</li></ul>\n"
        else:
            piece = f"<p>Line {i} says <a href='/x/{i}'>something</a> about the <b>topic</b>.</p>\n"
        parts.append(piece)
        size += len(piece)
        i += 1
    parts.append("</main></body></html>")
    return "".join(parts).encode()


def _generated() -> Iterator[tuple[str, bytes]]:
    yield "generated/dense.html", dense_page(200_000)
    rows = "".join(f"<tr><td>r{i}</td><td colspan=2>v <i>{i}</i></td></tr>" for i in range(300))
    table = f"<html><body><article><h1>T</h1><table><thead><tr><th>a</th><th>b</th></tr></thead>{rows}</table>"
    yield "generated/table.html", (table + "<pre class='language-sql'>SELECT 1;</pre></article></body></html>").encode()
    nested = "<div><section>" * 40 + "<p>deep <em>text</em></p>" + "</section></div>" * 40
    yield "generated/nested.html", f"<html><body><div class='content'>{nested}<br>tail</div></body></html>".encode()


def golden_pages() -> Iterator[tuple[str, bytes]]:
    """``(name, bytes)`` of every page present on this machine, in a stable order."""
    for root, prefix in ((PG_MANUAL, "pg15"), (REALDOCS_HTML, "realdocs")):
        if root.is_dir():
            for path in sorted(root.glob("*.htm*")):
                yield f"{prefix}/{path.name}", path.read_bytes()
    yield from _generated()


def digest(name: str, data: bytes) -> str:
    """The digest of what the HTML parser makes of ``data``."""
    try:
        doc = parse_document(RawDocument("k", data, Path(name).name, media_type="text/html"), {})
        out: object = doc.to_dict()
    except ParseError as err:
        out = err.to_dict()
    blob = json.dumps(out, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def main() -> None:
    digests = {name: digest(name, data) for name, data in golden_pages()}
    GOLDEN.write_text(json.dumps(digests, indent=0, sort_keys=True) + "\n")
    print(f"{len(digests)} digests -> {GOLDEN}", file=sys.stderr)


if __name__ == "__main__":
    main()
