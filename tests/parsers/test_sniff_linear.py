"""Sniffing hostile text takes linear time (issue 33, point 1).

Before: ``_HTML_START`` / ``_XML_START`` repeated a group holding a lazy ``.*?`` that could run past
its delimiter, so 40 empty comments before a stray byte (281 bytes) or a doctype with 40 ``[]``
(93 bytes) never returned (time doubled per comment: 24 comments took 6 s); the link pattern of the
Markdown sniffer scanned to the end of the sample from every ``[`` (64 KiB of ``[``: 2.4 s).
Each case runs in a child process with a generous join timeout, so a regression fails the test
instead of hanging the suite; nothing is timed.
"""

from __future__ import annotations

import pytest

from include.contract import RawDocument
from tests.support.forked import call_forked

HOSTILE = {
    "html comments": b"<!---->" * 40 + b"x",
    "html comments, spaced": (b"<!---->\n " * 40) + b"<x",
    "xml doctype subsets": b"<!DOCTYPE a [" + b"[]" * 40 + b"x",
    "xml comments and pis": b"<!-- a --><?p x?>" * 40 + b"<!-- unterminated",
    "markdown brackets": b"[" * 65536,
    "markdown link targets": b"[a](" * 16384,
}


def _sniff_and_parse(data: bytes, name: str) -> tuple[str | None, str]:
    from plugins.parsers.registry import load_builtins, parse_document, sniff_media_type

    load_builtins()
    media = sniff_media_type(data, name, "text/plain" if name else None)
    return media, parse_document(RawDocument("k", data, name)).media_type


@pytest.mark.parametrize("name", ["", "upload"])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_text_is_sniffed_and_parsed(case: str, name: str) -> None:
    # exponential before the fix: never returned
    media, parsed = call_forked(_sniff_and_parse, HOSTILE[case], name, timeout=60)
    assert media == "text/plain" and parsed == "text/plain"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"<!DOCTYPE html><html><p>x", "text/html"),
        (b"  <!-- a --> <!-- b -->\n<html><body>x", "text/html"),
        (b"<?xml version='1.0'?><html><b>x</b></html>", "text/html"),
        (b"<!DOCTYPE svg [<!ENTITY x 'y'>]>\n<svg:svg xmlns:svg='u'/>", "application/xml"),
        (b"<?xml version='1.0'?><!-- c --><?pi x?><feed><title>t</title></feed>", "application/xml"),
        (b"<!-- a comment only", "text/plain"),
        (b"# Title\n\nSee [the docs](http://x/y) and **this** and `that`.", "text/markdown"),
    ],
)
def test_prolog_scanner_still_tells_formats_apart(data: bytes, expected: str) -> None:
    from plugins.parsers.sniff import sniff_text

    assert sniff_text(data) == expected
