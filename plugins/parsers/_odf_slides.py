"""OpenDocument presentation and drawing pages (ODF 1.2/1.3 part 1, 9.1 ``draw:page``) into blocks.

Per page: a heading (the title frame's text, else the page's name when it is not LibreOffice's
generated ``pageN``, else "Slide N"), then the page's frames and shapes in reading order (top to
bottom, then left to right, as the PPTX parser orders shapes), then the speaker notes
(``presentation:notes``, 16.17) with ``metadata.notes``. Footers and headers declared once for
the document (``presentation:footer-decl``, 10.9.3) and used by pages follow the last page,
each text once. Empty layout placeholders (``presentation:placeholder="true"``) hold the
template's prompt text, not the author's, and are skipped.
"""

from __future__ import annotations

import re

from lxml import etree

from include.contract import ParseError, ParseErrorCode, Position
from plugins.parsers._common import Deadline, Limits, clean_text
from plugins.parsers._odf_text import OdfWalker, inline_text, qname

__all__ = ["slide_blocks"]

_PAGE, _NAME, _NOTES = qname("draw:page"), qname("draw:name"), qname("presentation:notes")
_CLASS, _PLACEHOLDER = qname("presentation:class"), qname("presentation:placeholder")
_X, _Y = qname("svg:x"), qname("svg:y")
_P, _H = qname("text:p"), qname("text:h")
# page furniture filled in by the application (numbers, dates), or declared once (footers)
_FURNITURE = frozenset({"page-number", "date-time", "footer", "header", "handout"})
_DECLS = {
    qname("presentation:footer-decl"): ("footer", qname("presentation:use-footer-name")),
    qname("presentation:header-decl"): ("header", qname("presentation:use-header-name")),
}
_DECL_NAME = qname("presentation:name")
# what a master page shows for a field filled per slide ("<number>", "<date/time>")
_FIELD_PROMPT = re.compile(r"<[\w/-]+>")
_GENERATED_NAME = re.compile(r"^(?:page|slide)\s*\d+$", re.I)
_LENGTH = re.compile(r"^\s*(-?[0-9.]+)\s*(cm|mm|in|pt|pc|px)?\s*$")
# centimetres per unit (ODF lengths, part 1, 18.3.18)
_CM = {"cm": 1.0, "mm": 0.1, "in": 2.54, "pt": 2.54 / 72, "pc": 2.54 / 6, "px": 2.54 / 96, None: 1.0}


def _length(value: str | None) -> float:
    m = _LENGTH.match(value or "")
    if not m:
        return 0.0
    try:
        return float(m.group(1)) * _CM[m.group(2)]
    except ValueError:
        return 0.0


def _reading_order(page: etree._Element) -> list[etree._Element]:
    shapes = [el for el in page if isinstance(el.tag, str) and el.tag != _NOTES]
    return sorted(shapes, key=lambda el: (_length(el.get(_Y)), _length(el.get(_X))))


def _frame_text(frame: etree._Element) -> str:
    return clean_text(" ".join(inline_text(p) for p in frame.iter(_P, _H)))


def _declarations(body: etree._Element) -> dict[tuple[str, str], str]:
    """(kind, name) -> text of the document's footer/header declarations."""
    decls: dict[tuple[str, str], str] = {}
    for el in body:
        if el.tag in _DECLS:
            decls[(_DECLS[el.tag][0], el.get(_DECL_NAME) or "")] = clean_text("".join(el.itertext()))
    return decls


def _page_heading(page: etree._Element, shapes: list[etree._Element], n: int) -> tuple[str, etree._Element | None]:
    for shape in shapes:
        if shape.get(_CLASS) == "title" and shape.get(_PLACEHOLDER) != "true":
            text = _frame_text(shape)
            if text:
                return text, shape
    name = clean_text(page.get(_NAME) or "")
    return (name if name and not _GENERATED_NAME.match(name) else ""), None


_MASTER_PAGE, _MASTER_NAME, _STYLE_NAME = (
    qname("style:master-page"),
    qname("draw:master-page-name"),
    qname("style:name"),
)
# master page frames that are layout prompts or filled per slide, not the author's text
_MASTER_SKIP = frozenset({"title", "outline", "subtitle", "page-number", "date-time", "notes", "page", "handout"})


def _master_texts(masters: etree._Element | None, used: set[str]) -> list[tuple[str, str]]:
    """(region, text) of fixed text on the master pages in use: a footer typed on the master."""
    out: list[tuple[str, str]] = []
    if masters is None:
        return out
    for master in masters.iter(_MASTER_PAGE):
        if master.get(_STYLE_NAME) not in used:
            continue
        for shape in master:
            kind = shape.get(_CLASS) or "master"
            if not isinstance(shape.tag, str) or shape.tag == _NOTES or kind in _MASTER_SKIP:
                continue
            text = _frame_text(shape)
            if shape.get(_PLACEHOLDER) != "true" and _FIELD_PROMPT.sub("", text).strip():
                out.append((kind, text))
    return out


def slide_blocks(
    body: etree._Element, walker: OdfWalker, deadline: Deadline, limits: Limits, masters: etree._Element | None = None
) -> int:
    """Append the blocks of every page of ``body`` (then the text of the ``masters`` they use,
    ``office:master-styles`` of styles.xml); returns the number of pages."""
    decls = _declarations(body)
    used: list[tuple[str, str]] = []
    used_masters: set[str] = set()
    n = 0
    for page in body:
        if page.tag != _PAGE:
            continue
        n += 1
        if n > limits.max_pages:
            raise ParseError(ParseErrorCode.TOO_LARGE, f"odp: more than {limits.max_pages} slides")
        deadline.check(f"slide {n}")
        pos = [Position(slide=n)]
        used_masters.add(page.get(_MASTER_NAME) or "")
        shapes = _reading_order(page)
        title, title_shape = _page_heading(page, shapes, n)
        walker.builder.heading(title or f"Slide {n}", 1, pos, slide_title=bool(title))
        for shape in shapes:
            if shape is title_shape or shape.get(_PLACEHOLDER) == "true" or shape.get(_CLASS) in _FURNITURE:
                continue
            walker.block(shape, pos)
        notes = page.find(_NOTES)
        if notes is not None:
            for shape in _reading_order(notes):
                if shape.get(_CLASS) == "notes" and shape.get(_PLACEHOLDER) != "true":
                    walker.block(shape, pos, notes=True)
        for kind, attr in _DECLS.values():
            key = (kind, page.get(attr) or "")
            if key[1] and key in decls and key not in used:
                used.append(key)
    texts = [(kind, decls[(kind, name)]) for kind, name in used] + _master_texts(masters, used_masters)
    for kind, text in dict.fromkeys(texts):
        walker.builder.paragraph(text, [], page_region=kind)
    return n
