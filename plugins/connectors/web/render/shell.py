"""Does a fetched page need a browser? The ``render: auto`` test.

The HTML parser (``plugins/parsers/html.py``) is what skips a page as a "javascript shell":
no content blocks but scripts, or a short text asking for JavaScript. A connector may not import
a parser (docs/architecture.md section 2: components import the ground and themselves only), so
this is the same rule read off the crawler's own lxml tree: the body's visible text outside
script/style/noscript/template, and whether the page has scripts. When in doubt it says "render":
rendering a page that did not need it costs time, skipping one that did costs its text.
"""

from __future__ import annotations

import re

import lxml.html
from lxml import etree

__all__ = ["looks_like_shell"]

_SHELL_HINT = re.compile(r"enable javascript|javascript (?:is )?required|requires javascript|turn on javascript", re.I)
_INVISIBLE = ("script", "style", "noscript", "template")
_MIN_TEXT = 200  # the parser's threshold for a page that asks for JavaScript


def looks_like_shell(html: bytes) -> bool:
    try:
        root = lxml.html.document_fromstring(html)
    except (etree.ParserError, ValueError):
        return False
    scripts = sum(1 for _ in root.iter("script"))
    if scripts == 0:
        return False
    asks_for_js = bool(_SHELL_HINT.search(" ".join(root.itertext())))
    body = root.find("body")
    if body is None:
        return True
    etree.strip_elements(body, *_INVISIBLE, with_tail=False)
    text = " ".join(" ".join(body.itertext()).split())
    return not text or (asks_for_js and len(text) < _MIN_TEXT)
