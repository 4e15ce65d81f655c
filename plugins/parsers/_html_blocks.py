"""HTML content subtree -> blocks: headings, paragraphs, lists, tables, code, each positioned.

:class:`BlockWalker` walks the element :func:`plugins.parsers.html.extract_html` picked as the
main content (chrome already stripped), flushing runs of inline text into paragraphs. Each
block's position is its element path, in ``getpath``'s form.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from collections.abc import Callable

from lxml import etree

from include.contract import BlockKind, Position
from plugins.parsers._common import BlockBuilder, Deadline, clean_text

__all__ = ["BLOCK_TAGS", "BlockWalker", "tag_name"]

_CHECK_EVERY = 2000  # elements walked between deadline checks (and returns of freed memory)

BLOCK_TAGS = frozenset(
    [
        "p",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "ul",
        "ol",
        "dl",
        "table",
        "pre",
        "blockquote",
        "div",
        "section",
        "article",
        "main",
        "header",
        "footer",
        "figure",
        "figcaption",
        "form",
        "fieldset",
        "details",
        "summary",
        "address",
        "center",
        "hr",
        "dt",
        "dd",
        "li",
        "tr",
        "td",
        "th",
        "caption",
        "tbody",
        "thead",
        "tfoot",
        "body",
        "html",
        "hgroup",
        "menu",
    ]
)


_NAMES: dict[str, str] = {}  # tag -> local name, remembered for the first _MAX_NAMES tags
_MAX_NAMES = 4096


def tag_name(el: etree._Element) -> str:
    """The element's local name in lower case; ``""`` for a comment or processing instruction."""
    tag = el.tag
    if not isinstance(tag, str):
        return ""
    name = _NAMES.get(tag)
    if name is None:
        name = tag.rsplit("}", 1)[-1].lower()
        if len(_NAMES) < _MAX_NAMES:
            _NAMES[tag] = name
    return name


class BlockWalker:
    """Turns the content subtree into blocks, flushing inline runs into paragraphs.

    Element paths are built on the way down (``tree.getpath`` recounts an element's siblings
    on every call, quadratic for a container with many children) in getpath's own form: a
    ``[n]`` index only where the parent has more than one child of that name.
    """

    def __init__(self, tree: etree._ElementTree, builder: BlockBuilder, deadline: Deadline) -> None:
        self.tree = tree
        self.b = builder
        self.deadline = deadline
        self._inline: list[str] = []
        self._inline_path: str | None = None
        self._count = 0

    def _flush(self) -> None:
        if self._inline:
            text = "".join(self._inline)
            path = self._inline_path
            self._inline, self._inline_path = [], None
            self.b.paragraph(text, _pos(path) if path is not None else None)

    def _add_inline(self, text: str | None, path: str) -> None:
        if text:
            if self._inline_path is None and text.strip():
                self._inline_path = path
            self._inline.append(text)

    def walk(self, el: etree._Element, path: str | None = None) -> None:
        path = path if path is not None else self.tree.getpath(el)
        self._add_inline(el.text, path)
        names = Counter(child.tag for child in el if isinstance(child.tag, str))
        seen: Counter[str] = Counter()
        child = el[0] if len(el) else None
        while child is not None:
            self._count += 1
            if self._count % _CHECK_EVERY == 0:
                self.deadline.check("html")
                _release_freed_memory()
            following = child.getnext()
            tag = tag_name(child)
            if tag:
                seen[child.tag] += 1
                index = f"[{seen[child.tag]}]" if names[child.tag] > 1 else ""
                self._child(child, tag, f"{path}/{child.tag}{index}")
            self._add_inline(child.tail, path)
            # read, so freed: the page's tree shrinks as its blocks grow (peak memory)
            el.remove(child)
            child = following

    def _child(self, child: etree._Element, tag: str, path: str) -> None:
        if tag in BLOCK_TAGS:
            self._block(child, tag, path)
        elif tag == "br":
            self._inline.append("\n")
        else:
            self._add_inline(_inline_text(child), path)

    def _block(self, el: etree._Element, tag: str, path: str) -> None:
        self._flush()
        if len(tag) == 2 and tag[0] == "h" and tag[1].isdigit():
            self.b.heading(_inline_text(el), int(tag[1]), _pos(path))
        elif tag == "p" or tag == "dt" or tag == "summary" or tag == "figcaption" or tag == "caption":
            self.b.paragraph(_inline_text(el), _pos(path))
        elif tag in ("ul", "ol", "menu"):
            lines: list[str] = []
            _list_lines(el, tag == "ol", 0, lines)
            self.b.add(BlockKind.LIST, "\n".join(lines), _pos(path), ordered=tag == "ol")
        elif tag == "table":
            rows, header = _table(el)
            self.b.table(rows, header, _pos(path))
        elif tag == "pre":
            text = "".join(el.itertext()).strip("\n")
            lang = _code_language(el)
            if lang:
                self.b.add(BlockKind.CODE, text, _pos(path), language=lang)
            else:
                self.b.add(BlockKind.CODE, text, _pos(path))
        elif tag == "hr":
            pass
        else:  # containers: div, section, blockquote, dd, li outside a list, ...
            self.walk(el, path)
            self._flush()

    def finish(self) -> None:
        self._flush()


def _libc_malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to call
        return None


_MALLOC_TRIM = _libc_malloc_trim()


def _release_freed_memory() -> None:
    """Give the C heap's free pages back to the system (glibc ``malloc_trim``; elsewhere nothing).

    The walker frees the page's tree while it builds blocks: libxml2 nodes in the middle of the
    heap, which glibc keeps; Python's own objects live in separate arenas and never reuse them,
    so without this the tree's memory stays counted to the end.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _pos(path: str) -> tuple[Position]:
    return (Position(path=path),)


def _inline_text(el: etree._Element) -> str:
    return _ordered_text(el)


def _ordered_text(el: etree._Element) -> str:
    """The text under ``el`` in document order, a space around each block-level element inside it.

    A block inside inline context (a ``<div>`` or ``<h2>`` in a link or a list item, as search
    result pages nest them) is rendered on a line of its own, so its words never run into the
    text before or after it ("…/wiki/Microsoft" + "Microsoft - Wikipedia").
    """
    out: list[str] = []

    def rec(node: etree._Element) -> None:
        tag = tag_name(node)
        block = tag in BLOCK_TAGS and node is not el
        if block and out:
            out.append(" ")
        if tag == "br":
            out.append("\n")
        elif node.text and tag:
            out.append(node.text)
        for child in node:
            rec(child)
            if child.tail:
                out.append(child.tail)
        if block:
            out.append(" ")

    rec(el)
    return "".join(out)


def _list_lines(el: etree._Element, ordered: bool, depth: int, out: list[str]) -> None:
    n = 0
    for li in el:
        if tag_name(li) != "li":
            # stray content directly inside the list
            text = clean_text(_ordered_text(li)) if tag_name(li) else ""
            if text:
                out.append("  " * depth + text)
            continue
        n += 1
        own: list[str] = [li.text or ""]
        nested: list[etree._Element] = []
        for child in li:
            if tag_name(child) in ("ul", "ol"):
                nested.append(child)
            else:
                own.append(_ordered_text(child) + " " if tag_name(child) in BLOCK_TAGS else _ordered_text(child))
            if child.tail:
                own.append(child.tail)
        marker = f"{n}." if ordered else "-"
        text = clean_text("".join(own))
        if text:
            out.append(f"{'  ' * depth}{marker} {text}")
        for sub in nested:
            _list_lines(sub, tag_name(sub) == "ol", depth + 1, out)


def _table(el: etree._Element) -> tuple[list[list[str]], list[str] | None]:
    header: list[str] | None = None
    rows: list[list[str]] = []
    for tr in _own_rows(el):
        cells: list[str] = []
        all_th = True
        in_thead = tag_name(tr.getparent()) == "thead"
        for cell in tr:
            tag = tag_name(cell)
            if tag not in ("td", "th"):
                continue
            all_th = all_th and tag == "th"
            text = clean_text(_ordered_text(cell))
            try:
                span = max(1, min(int(cell.get("colspan") or 1), 50))
            except ValueError:
                span = 1
            cells.append(text)
            cells.extend([text if (in_thead or tag == "th") else ""] * (span - 1))
        if not cells:
            continue
        if in_thead or (header is None and not rows and all_th):
            # several header rows (thead with two rows) merge column-wise
            header = cells if header is None else [_merge(a, b) for a, b in zip(header, cells, strict=False)]
            continue
        rows.append(cells)
    return rows, header


def _merge(a: str, b: str) -> str:
    return a if a == b or not b else (b if not a else f"{a} {b}")


def _own_rows(table: etree._Element) -> list[etree._Element]:
    """The table's rows, not those of tables nested in its cells."""
    out = []
    for child in table:
        tag = tag_name(child)
        if tag == "tr":
            out.append(child)
        elif tag in ("thead", "tbody", "tfoot"):
            out.extend(c for c in child if tag_name(c) == "tr")
    return out


def _code_language(el: etree._Element) -> str | None:
    for node in (el, *el.iterancestors()):
        for cls in (node.get("class") or "").split():
            for prefix in ("language-", "lang-", "highlight-"):
                if cls.startswith(prefix) and len(cls) > len(prefix):
                    return cls[len(prefix) :]
        if tag_name(node) in ("body", "article", "main"):
            break
    code = el.find("code")
    if code is not None:
        for cls in (code.get("class") or "").split():
            if cls.startswith("language-"):
                return cls[len("language-") :]
    return None
