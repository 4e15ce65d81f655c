"""Building the HTML tree within a memory bound proportional to the page, deep nesting kept.

A page over a MiB is fed to libxml2's push parser a MiB at a time; a smaller one is parsed in
one call (the push parser costs ~1.8x that) and folded after. A paragraph-like element (``p``,
a heading, a list item, a table cell ...) whose content is only plain inline markup (``b``,
``a``, ``span`` ...) is folded, as soon as it ends, into its own text: the whole text
``itertext`` gives. Every consumer of such an element (``_ordered_text``, word counts, chrome
rules) reads that same text, while the tree no longer holds a node, an attribute and a string
per bold word or link. That fold is what keeps a 20 MB page's tree within a few times its size
(a block every ~80 bytes: 7.9x), where libxml2's full tree takes ~19x.

``huge_tree`` lifts libxml2's 10 MB text-node limit (which silently dropped a long text) and
its depth halt; the input is already capped at ``max_bytes``. Nesting deeper than
:data:`MAX_DEPTH` (which the recursive block walk could not follow, and at 2048 libxml2 stops
parsing and loses the rest of the page) is re-parsed with the excess tags removed and their
text kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from lxml import etree

from include.contract import ParseError, ParseErrorCode

__all__ = ["CONTENT_HINT", "MAX_DEPTH", "build_tree", "drop_internal_subset", "search_joined"]

MAX_DEPTH = 256
_FEED_STEP = 1 << 20
# elements whose text is read whole (never walked child by child when they have own text)
_FOLDABLE = frozenset(
    ["p", "h1", "h2", "h3", "h4", "h5", "h6", "dt", "summary", "figcaption", "caption", "li", "td", "th"]
)
# inline elements that add nothing but their text to ``_ordered_text`` and the chrome rules
_PLAIN_INLINE = frozenset(
    [
        "a",
        "abbr",
        "b",
        "bdi",
        "bdo",
        "big",
        "cite",
        "code",
        "data",
        "del",
        "dfn",
        "em",
        "font",
        "i",
        "img",
        "ins",
        "kbd",
        "mark",
        "nobr",
        "q",
        "s",
        "samp",
        "small",
        "span",
        "strike",
        "strong",
        "sub",
        "sup",
        "time",
        "tt",
        "u",
        "var",
        "wbr",
    ]
)
# class/id words of a main-content candidate (html._main_content picks among them)
CONTENT_HINT = re.compile(
    r"(?:^|[\s_-])(content|main|article|post|entry|body|text|document|markdown|prose|story)(?:$|[\s_-])", re.I
)
_VOID = frozenset(
    ["area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"]
)
_TAG = re.compile(rb"<(/?)([A-Za-z][A-Za-z0-9:-]*)(?:\s[^>]*)?>")
_SPACED = frozenset(
    b"p div li td th tr table ul ol dl dt dd h1 h2 h3 h4 h5 h6 section article main blockquote pre".split()
)


def _plain(el: etree._Element) -> bool:
    """No attribute or tag under ``el`` that any rule of the HTML parser reads."""
    for node in el.iterdescendants():
        tag = node.tag
        if not isinstance(tag, str) or tag not in _PLAIN_INLINE or (len(node.attrib) and _marked(node)):
            return False
    return True


def _marked(node: etree._Element) -> bool:
    """Hidden, a role (hiding, or ``main``), or a class/id that makes it a main-content candidate."""
    if node.get("hidden") is not None or node.get("aria-hidden") == "true" or node.get("role") is not None:
        return True
    if CONTENT_HINT.search(f"{node.get('id') or ''} {node.get('class') or ''}"):
        return True
    style = (node.get("style") or "").replace(" ", "").lower()
    return "display:none" in style or "visibility:hidden" in style


def _fold(el: etree._Element, shell_hint: re.Pattern[str], seen: list[bool]) -> None:
    # Only with own leading text: a walk of this element would start its paragraph at the
    # element itself either way, so no position path changes.
    if not len(el) or not (el.text and el.text.strip()) or not _plain(el):
        return
    full = "".join(el.itertext())
    # the visible-text check reads text nodes joined with spaces (every hint names JavaScript)
    if not seen[0] and "javascript" in full.lower() and shell_hint.search(" ".join(el.itertext())):
        seen[0] = True
    # the whole text as the element's own: ``_ordered_text`` reads the same characters (its
    # separators go around a block, never inside plain inline markup)
    for child in list(el):
        el.remove(child)
    el.text = full


# elements at depth MAX_DEPTH + 1 below the root element (found by libxml2: no event per element)
_TOO_DEEP = etree.XPath("boolean(" + "/".join(["*"] * MAX_DEPTH) + ")")


_PARSER_OPTIONS: dict[str, bool | str] = {
    "encoding": "utf-8",
    "remove_comments": True,
    "remove_pis": True,
    "no_network": True,
    "huge_tree": True,
    "recover": True,
}
# Up to this size a page is parsed in one call and folded after (libxml2's push parser costs
# ~1.8x its one-call parse); above, pushed a MiB at a time and folded as elements end. The
# unfolded tree of a dense page is ~20x its size: 20 MiB at most here.
_WHOLE_PARSE_MAX = _FEED_STEP


def _parse(payload: bytes, shell_hint: re.Pattern[str], seen: list[bool]) -> tuple[etree._Element | None, bool]:
    """The tree (foldable elements folded) and whether it nests deeper than MAX_DEPTH."""
    root = _parse_whole(payload, shell_hint, seen) if len(payload) <= _WHOLE_PARSE_MAX else None
    if root is None:
        root = _parse_pushed(payload, shell_hint, seen)
    # from the root element (depth 1), MAX_DEPTH steps of "*" reach depth MAX_DEPTH + 1
    return root, root is not None and bool(_TOO_DEEP(root))


def _parse_whole(payload: bytes, shell_hint: re.Pattern[str], seen: list[bool]) -> etree._Element | None:
    """The folded tree of a small page; None where the one-call parse refuses it (an empty page).

    Folding after the parse rather than as elements end gives the same tree: an element with a
    foldable one inside is never plain, so no fold depends on another.
    """
    try:
        root = etree.fromstring(payload, etree.HTMLParser(**_PARSER_OPTIONS))
    except etree.XMLSyntaxError:  # the push parser's answer (or error) is the reference
        return None
    if root is not None:
        for el in list(root.iter(*_FOLDABLE)):
            _fold(el, shell_hint, seen)
    return root


def _parse_pushed(payload: bytes, shell_hint: re.Pattern[str], seen: list[bool]) -> etree._Element | None:
    parser = etree.HTMLPullParser(events=("end",), tag=_FOLDABLE, **_PARSER_OPTIONS)
    view = memoryview(payload)
    for offset in range(0, max(len(payload), 1), _FEED_STEP):
        parser.feed(bytes(view[offset : offset + _FEED_STEP]))
        for _, el in parser.read_events():
            _fold(el, shell_hint, seen)
    return parser.close()


def cap_nesting(payload: bytes, max_depth: int) -> bytes:
    """Drop start and end tags nested deeper than ``max_depth``, keeping the text between them.

    A tag-level pass, approximate where HTML closes elements implicitly; used only for a page
    that nests too deep to walk, where it keeps the text that the tree would have lost.
    """
    depth = 0

    def replace(match: re.Match[bytes]) -> bytes:
        nonlocal depth
        name = match.group(2).lower()
        if name in _VOID or match.group(0).endswith(b"/>"):
            return match.group(0) if depth < max_depth else b" "
        if match.group(1):  # an end tag closes the element opened at this depth
            keep = depth <= max_depth
            depth = max(0, depth - 1)
        else:
            depth += 1
            keep = depth <= max_depth
        return match.group(0) if keep else (b" " if name in _SPACED else b"")

    return _TAG.sub(replace, payload)


# a doctype with an internal subset, after what may precede it (XML declaration, comments)
_SUBSET_OPEN = re.compile(rb"\A(?:\s++|<\?[^>]*+>|<!--.*?-->)*+<!DOCTYPE[^\[>]*+\[", re.I | re.S)
_SUBSET_TOKEN = re.compile(rb"[\]\"']|<!--")
_SUBSET_CLOSE = re.compile(rb"\s*+>")


def drop_internal_subset(payload: bytes) -> bytes:
    """``payload`` without its doctype's internal subset (``<!DOCTYPE html [ ... ]>``).

    libxml2's HTML parser ends a doctype at its first ``>``, so the rest of an XHTML internal
    subset (entity declarations, their values, the closing ``]>``) became page text. The subset
    is found by one forward scan that skips quoted values and comments (where ``]>`` may
    appear); an unterminated subset is left as it is.
    """
    opening = _SUBSET_OPEN.match(payload)
    if opening is None:
        return payload
    pos = opening.end()
    while (token := _SUBSET_TOKEN.search(payload, pos)) is not None:
        if token.group() == b"]":
            close = _SUBSET_CLOSE.match(payload, token.end())
            if close is not None:
                return payload[: opening.end() - 1] + b">" + payload[close.end() :]
            pos = token.end()
            continue
        ender = b"-->" if token.group() == b"<!--" else token.group()
        stop = payload.find(ender, token.end())
        if stop < 0:
            break
        pos = stop + len(ender)
    return payload


def build_tree(payload: bytes, shell_hint: re.Pattern[str]) -> tuple[etree._Element, bool]:
    """The page's root element and whether a folded element's text matched ``shell_hint``."""
    seen = [False]
    payload = drop_internal_subset(payload)
    try:
        root, too_deep = _parse(payload, shell_hint, seen)
        if too_deep:
            root = None  # free the deep tree before the second parse
            root, too_deep = _parse(cap_nesting(payload, MAX_DEPTH // 2), shell_hint, seen)
    except etree.XMLSyntaxError as exc:
        raise ParseError(ParseErrorCode.CORRUPT, f"html: {exc}") from exc
    if root is None:
        raise ParseError(ParseErrorCode.EMPTY, "empty document")
    if too_deep:
        raise ParseError(ParseErrorCode.BOMB, f"html: elements nested deeper than {MAX_DEPTH} levels")
    return root, seen[0]


_BATCH_CHARS = 1 << 16
_OVERLAP_CHARS = 64  # longer than any match of the shell hints (at most 22 characters)


def search_joined(pattern: re.Pattern[str], pieces: Iterator[str], needed: re.Pattern[str] | None = None) -> bool:
    """Whether ``pattern`` matches ``" ".join(pieces)``, joined a batch (~64 K characters) at a time.

    The whole join held the page's text twice at once (a list of every text node, then the
    string); each batch is searched with the end of the one before it, so a match across
    batches is found, for patterns no longer than :data:`_OVERLAP_CHARS`. ``needed`` matches
    wherever ``pattern`` does, and faster (a word every alternative contains): a batch without
    it is not searched with ``pattern``.
    """
    batch: list[str] = []
    size = 0
    carry: str | None = None  # the joined text's last characters so far; None before any piece
    for piece in pieces:
        batch.append(piece)
        size += len(piece) + 1
        if size < _BATCH_CHARS:
            continue
        carry = _search_batch(pattern, needed, carry, batch)
        if carry is None:
            return True
        batch, size = [], 0
    return bool(batch) and _search_batch(pattern, needed, carry, batch) is None


def _search_batch(
    pattern: re.Pattern[str], needed: re.Pattern[str] | None, carry: str | None, batch: list[str]
) -> str | None:
    """None on a match, else the new carry."""
    window = " ".join(batch) if carry is None else f"{carry} {' '.join(batch)}"
    if (needed is None or needed.search(window)) and pattern.search(window):
        return None
    return window[-_OVERLAP_CHARS:]
