"""Generic XML (data files, SVG, RSS/Atom, DocBook, TEI ...): text without tags, by element.

One block per element that holds text: an element with text of its own (a leaf, or mixed
content such as ``<para>Some <emphasis>bold</emphasis> words</para>``) is one block of all the
text inside it, inline markup dropped; an element with only child elements is walked into.
``Position.path`` is the element's path, ``/catalog/book[3]/title``, with the sibling index
(1-based, XPath's) only where siblings share a name, and names with their prefix.

Decisions:
* attributes that carry human text -- alt, caption, description, label, name, summary, text,
  title, and names ending in name/title/label/description (``currency_name``, ``displayName``)
  -- come first in their element's block, in document order (data XML such as ISO code lists
  keeps everything in attributes); other attributes (ids, codes, coordinates, URLs) are not text;
* ``title``/``head``/``heading``/``h1``-``h6`` elements (DocBook, TEI, RSS, XHTML-ish) are
  headings, one level deeper for each enclosing element that has a heading of its own;
* ``programlisting``/``screen``/``pre``/``code``/``literallayout`` keep their lines; elsewhere
  whitespace is folded, because XML indentation is layout, not text;
* entity references are not expanded (no DTD is loaded, nothing is fetched: ``_common``'s safe
  parser), so an entity bomb yields no text; libxml2 refuses nesting past 256 levels (``bomb``);
* a document that is not well-formed is read again in libxml2's recover mode (the well-formed
  part, ``metadata.recovered``) rather than refused; one with nothing readable is ``corrupt``;
* an XHTML document (root ``html``) goes to the HTML parser;
* paths are text the parse builds, so each block's path is charged against ``max_chars`` when
  it is built, and only for a block: an element holds a link to its parent's path, not a copy of
  it, so 100,000 leaves under 250 nested 2,000-character names share one chain instead of each
  holding a 500,000-character string (which ran a parse out of 4 GB before); an element name
  longer than ``_MAX_NAME_CHARS`` is cut to that many characters and ``…`` in paths and in
  ``metadata.element`` (a name is a label, not the document's text).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from lxml import etree

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits, clean_text, parse_xml, safe_xml_parser
from plugins.parsers.registry import ParseContext, get_parser, register_parser
from plugins.parsers.text import keep_lines

__all__ = ["parse_xml_document"]

XML = "application/xml"
_TEXT_ATTRIBUTES = frozenset({"title", "alt", "label", "caption", "summary", "description", "name", "text"})
# currency_name, displayName, official_name, shortTitle ...
_TEXT_ATTRIBUTE_SUFFIXES = ("_name", "name", "title", "label", "description")
_HEADINGS = frozenset({"title", "head", "heading", "h1", "h2", "h3", "h4", "h5", "h6"})
_VERBATIM = frozenset({"programlisting", "screen", "pre", "code", "literallayout", "verbatim"})
_SKIP = frozenset({"script", "style"})
_MAX_NAME_CHARS = 256


@lru_cache(maxsize=4096)  # a document repeats a few tag names thousands of times
def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _name(el: etree._Element) -> str:
    local = _local(el.tag)
    name = f"{el.prefix}:{local}" if el.prefix else local
    return name if len(name) <= _MAX_NAME_CHARS else f"{name[:_MAX_NAME_CHARS]}…"


@dataclass(frozen=True, slots=True)
class _Path:
    """An element's path as its last step and a link to its parent's path.

    Written out (:meth:`text`) only for a block, after charging its length: siblings share
    their parent's chain instead of each copying the prefix."""

    parent: _Path | None
    step: str  # "book[3]"
    chars: int  # length of the written-out path

    @classmethod
    def under(cls, parent: _Path | None, step: str) -> _Path:
        return cls(parent, step, (parent.chars if parent else 0) + 1 + len(step))

    def text(self, builder: BlockBuilder) -> str:
        builder.charge(self.chars)  # before the string exists
        steps: list[str] = []
        node: _Path | None = self
        while node is not None:
            steps.append(node.step)
            node = node.parent
        return "/" + "/".join(reversed(steps))


def _is_element(node: Any) -> bool:
    return isinstance(node.tag, str)  # not a comment, processing instruction or entity reference


def _has_own_text(el: etree._Element) -> bool:
    if el.text and el.text.strip():
        return True
    return any(child.tail and child.tail.strip() for child in el)


def _text_of(el: etree._Element) -> str:
    """All text inside ``el``: its text, its elements' text and the tails, no entity references."""
    parts = [el.text or ""]
    for child in el:
        if _is_element(child) and _local(child.tag) not in _SKIP:
            parts.append(_text_of(child))
        parts.append(child.tail or "")
    return "".join(parts)


def _is_text_attribute(name: str) -> bool:
    lowered = name.lower()
    return lowered in _TEXT_ATTRIBUTES or lowered.endswith(_TEXT_ATTRIBUTE_SUFFIXES)


def _attribute_text(el: etree._Element) -> list[str]:
    found = [v.strip() for k, v in el.attrib.items() if v.strip() and _is_text_attribute(_local(k))]
    return list(dict.fromkeys(found))  # name="Ari" ref_name="Ari": once


def _child_paths(el: etree._Element, path: _Path) -> list[tuple[etree._Element, _Path]]:
    children = [c for c in el if _is_element(c)]
    totals = Counter(_name(c) for c in children)
    seen: Counter[str] = Counter()
    out = []
    for child in children:
        name = _name(child)
        seen[name] += 1
        out.append((child, _Path.under(path, f"{name}[{seen[name]}]" if totals[name] > 1 else name)))
    return out


def _emit(el: etree._Element, path: _Path, level: int, builder: BlockBuilder) -> None:
    local = _local(el.tag).lower()
    attributes = _attribute_text(el)
    text = _text_of(el)
    if not attributes and not text.strip():
        return  # no block, so no path to write out
    where = [Position(path=path.text(builder))]
    if local in _HEADINGS and not attributes:
        builder.heading(text, level, where, element=_name(el))
    elif local in _VERBATIM:
        builder.add(BlockKind.CODE, keep_lines([*attributes, *text.strip("\n").splitlines()]), where)
    else:
        builder.paragraph("\n".join([*attributes, clean_text(text)]), where, element=_name(el))


def _walk(root: etree._Element, builder: BlockBuilder, deadline: Deadline, max_depth: int) -> None:
    # (element, path, heading level for a title found in it, depth); a list used as a stack
    # keeps the walk iterative whatever the nesting
    stack: list[tuple[etree._Element, _Path, int, int]] = [(root, _Path.under(None, _name(root)), 1, 1)]
    visited = 0
    while stack:
        el, path, level, depth = stack.pop()
        visited += 1
        if visited % 1000 == 0:
            deadline.check("xml")
        if depth > max_depth:
            raise ParseError(ParseErrorCode.BOMB, f"xml: nesting deeper than {max_depth} (limit xml_max_depth)")
        if _local(el.tag) in _SKIP:
            continue
        if _has_own_text(el) or len(el) == 0:
            _emit(el, path, level, builder)
            continue
        attributes = _attribute_text(el)
        if attributes:
            builder.paragraph("\n".join(attributes), [Position(path=path.text(builder))], element=_name(el))
        children = _child_paths(el, path)
        # the children of an element with a heading of its own are one section deeper
        deeper = level + 1 if any(_local(c.tag).lower() in _HEADINGS for c, _ in children) else level
        for child, child_path in reversed(children):
            is_heading = _local(child.tag).lower() in _HEADINGS
            stack.append((child, child_path, level if is_heading else deeper, depth + 1))


def _root(data: bytes, limits: Limits) -> tuple[etree._Element, bool]:
    """The document's root element, and whether recover mode was needed to get it."""
    if len(data) > limits.xml_max_total:
        raise ParseError(
            ParseErrorCode.TOO_LARGE, f"xml: {len(data)} bytes exceeds the {limits.xml_max_total}-byte tree cap"
        )
    if not data.strip():
        raise ParseError(ParseErrorCode.EMPTY, "xml: empty file")
    try:
        return parse_xml(data, "xml"), False
    except ParseError as exc:
        if exc.code != ParseErrorCode.CORRUPT:
            raise
        root = etree.fromstring(data, safe_xml_parser(recover=True))
        if root is None or not _is_element(root):
            raise
        return root, True


@register_parser(
    "xml",
    "1.0",
    (XML, "text/xml", "image/svg+xml", "application/rss+xml", "application/atom+xml"),
    ("xml", "svg", "rss", "atom", "dbk", "tei", "kml", "gpx", "opml", "xsd", "xsl", "xslt"),
)
def parse_xml_document(data: bytes, ctx: ParseContext) -> ParsedDocument:
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    root, recovered = _root(data, limits)
    if _local(root.tag).lower() == "html":
        html = get_parser("text/html")
        if html is not None:
            return html.fn(data, ctx)
    builder = BlockBuilder(limits.max_blocks, limits.max_chars)
    _walk(root, builder, deadline, limits.xml_max_depth)
    if not builder.blocks:
        raise ParseError(ParseErrorCode.EMPTY, "xml: no text in any element")
    title = next((b.text for b in builder.blocks if b.kind == BlockKind.HEADING), None)
    meta: dict[str, Any] = {"root": _name(root)}
    if recovered:
        meta["recovered"] = True
    return ParsedDocument(blocks=builder.blocks, title=title, media_type=XML, metadata=meta)
