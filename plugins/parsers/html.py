"""HTML parser (lxml): decoding, main-content extraction and structural blocks.

This is also the web crawler's page extractor, so it follows what a browser would show:

* decoding: BOM, the Content-Type charset, ``<meta charset>`` / ``http-equiv``, then detection;
* chrome removal: script/style/noscript/template, nav and aside everywhere, header/footer
  outside the main content (an article's own ``<header>`` usually holds its title);
* main content: ``article``, ``main``, ``[role=main]``, an element whose class/id looks like
  content and holds a good share of the page's text, then ``body``;
* blocks: headings with level and heading path, paragraphs, lists, tables (rows + header),
  code (``pre``), each with its element path as position;
* metadata: title, description, language, canonical URL (resolved against the page URL).

The tree is built by :mod:`plugins.parsers._html_tree` (push parser, plain paragraphs folded as
they end, huge text nodes kept, over-deep nesting flattened), within a few times the page's size.

A page whose body has no text but scripts (a single-page-app shell) raises
``ParseError(empty, "javascript shell")`` so the run records it as skipped with that reason.
"""

from __future__ import annotations

import re
from collections import Counter
from urllib.parse import urljoin

from lxml import etree

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode, Position
from plugins.parsers._common import BlockBuilder, Deadline, Limits, clean_text, decode_text
from plugins.parsers._html_tree import CONTENT_HINT as _CONTENT_HINT
from plugins.parsers._html_tree import build_tree, visible_texts
from plugins.parsers.registry import ParseContext, register_parser

__all__ = ["extract_html", "parse_html"]

_META_CHARSET = re.compile(rb"""<meta[^>]+?charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]+)""", re.I)
_XML_DECL = re.compile(rb"""^\s*<\?xml[^>]*encoding\s*=\s*["']([A-Za-z0-9_.:\-]+)""", re.I)

_DROP_ALWAYS = (
    "script",
    "style",
    "noscript",
    "template",
    "nav",
    "iframe",
    "object",
    "embed",
    "svg",
    "canvas",
    "button",
    "select",
    "input",
    "textarea",
    "map",
    "dialog",
)
_DROP_ROLES = ("navigation", "complementary", "search", "banner", "contentinfo")
_BLOCK_TAGS = frozenset(
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
_NOT_CONTENT_HINT = re.compile(
    r"(?:^|[\s_-])(comment|sidebar|footer|header|menu|nav|related|share|ad|ads)(?:$|[\s_-])", re.I
)
_SHELL_HINT = re.compile(r"enable javascript|javascript (?:is )?required|requires javascript|turn on javascript", re.I)


def _sniff_meta_charset(data: bytes) -> str | None:
    head = data[:8192]
    m = _XML_DECL.match(head) or _META_CHARSET.search(head)
    if not m:
        return None
    label = m.group(1).decode("ascii", "ignore").lower()
    # A document that could be read far enough to find an ASCII meta tag is not UTF-16/32.
    return "utf-8" if label.startswith(("utf-16", "utf-32", "ucs")) else label


def _tag(el: etree._Element) -> str:
    tag = el.tag
    if not isinstance(tag, str):
        return ""
    return tag.rsplit("}", 1)[-1].lower()


_WORD_SLICE = 1 << 20


def _text_len(el: etree._Element) -> int:
    """Words under ``el`` as ``str.split`` counts them, a MiB slice at a time.

    One ``split`` of a whole page's text would hold a string object per word at once.
    """
    if el is None:
        return 0
    text = "".join(el.itertext())
    words = 0
    for start in range(0, len(text), _WORD_SLICE):
        piece = text[start : start + _WORD_SLICE]
        words += len(piece.split())
        if start and not piece[:1].isspace() and not text[start - 1].isspace():
            words -= 1  # a word cut in two by the slice boundary was counted twice
    return words


def _remove_element(el: etree._Element) -> None:
    parent = el.getparent()
    if parent is None:
        return
    tail = el.tail
    if tail:
        prev = el.getprevious()
        if prev is not None:
            prev.tail = (prev.tail or "") + tail
        else:
            parent.text = (parent.text or "") + tail
    parent.remove(el)


def _is_hidden(el: etree._Element) -> bool:
    if el.get("hidden") is not None or el.get("aria-hidden") == "true":
        return True
    style = (el.get("style") or "").replace(" ", "").lower()
    return "display:none" in style or "visibility:hidden" in style


def _metadata(root: etree._Element, base_url: str | None) -> dict[str, str]:
    meta: dict[str, str] = {}
    title = root.find(".//title")
    if title is not None:
        t = clean_text("".join(title.itertext()))
        if t:
            meta["title"] = t
    for m in root.iter("meta"):
        name = (m.get("name") or m.get("property") or "").lower()
        content = clean_text(m.get("content") or "")
        if not content:
            continue
        if name in ("description", "og:description") and "description" not in meta:
            meta["description"] = content
        elif name == "og:title" and "title" not in meta:
            meta["title"] = content
        elif name in ("author", "article:author") and "author" not in meta:
            meta["author"] = content
        elif (m.get("http-equiv") or "").lower() == "content-language" and "language" not in meta:
            meta["language"] = content.split(",")[0].strip()
    lang = root.get("lang") or root.get("{http://www.w3.org/XML/1998/namespace}lang")
    if lang:
        meta["language"] = lang.strip()
    for link in root.iter("link"):
        rels = (link.get("rel") or "").lower().split()
        href = (link.get("href") or "").strip()
        if "canonical" in rels and href:
            meta["canonical_url"] = urljoin(base_url, href) if base_url else href
            break
    return meta


def _strip_chrome(body: etree._Element) -> None:
    to_remove = []
    for el in body.iter():
        if not isinstance(el.tag, str):  # comments, processing instructions
            to_remove.append(el)
            continue
        tag = _tag(el)
        role = (el.get("role") or "").lower()
        if (
            tag in _DROP_ALWAYS
            or role in _DROP_ROLES
            or _is_hidden(el)
            or (tag in ("header", "footer") and not _inside_content(el))
        ):
            to_remove.append(el)
    for el in to_remove:
        if el.getparent() is not None:
            _remove_element(el)


def _inside_content(el: etree._Element) -> bool:
    for anc in el.iterancestors():
        if _tag(anc) in ("article", "main") or (anc.get("role") or "").lower() == "main":
            return True
    return False


def _main_content(body: etree._Element) -> etree._Element:
    total = _text_len(body)
    if total == 0:
        return body
    articles = [a for a in body.iter("article") if _text_len(a) > 0]
    # Several articles (a blog index) or one nested in another: take the first top-level only
    # when it holds most of the text; otherwise fall through to main/body.
    top_articles = [a for a in articles if not any(_tag(x) == "article" for x in a.iterancestors())]
    if len(top_articles) == 1 and _text_len(top_articles[0]) >= 0.3 * total:
        return top_articles[0]
    for el in body.iter("main"):
        if _text_len(el) > 0:
            return el
    for el in body.iter():
        if isinstance(el.tag, str) and (el.get("role") or "").lower() == "main" and _text_len(el) > 0:
            return el
    best, best_len = None, 0
    for el in body.iter():
        if not isinstance(el.tag, str) or _tag(el) in ("body", "html"):
            continue
        hint = f"{el.get('id') or ''} {el.get('class') or ''}"
        if _CONTENT_HINT.search(hint) and not _NOT_CONTENT_HINT.search(hint):
            n = _text_len(el)
            if n > best_len:
                best, best_len = el, n
    if best is not None and best_len >= 0.5 * total:
        return best
    return body


class _Walker:
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
        for child in el:
            self._count += 1
            if self._count % 2000 == 0:
                self.deadline.check("html")
            tag = _tag(child)
            if not tag:
                self._add_inline(child.tail, path)
                continue
            seen[child.tag] += 1
            index = f"[{seen[child.tag]}]" if names[child.tag] > 1 else ""
            child_path = f"{path}/{child.tag}{index}"
            if tag in _BLOCK_TAGS:
                self._block(child, tag, child_path)
            elif tag == "br":
                self._inline.append("\n")
            else:
                self._add_inline(_inline_text(child), child_path)
            self._add_inline(child.tail, path)

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


def _pos(path: str) -> list[Position]:
    return [Position(path=path)]


def _inline_text(el: etree._Element) -> str:
    return _ordered_text(el)


def _ordered_text(el: etree._Element) -> str:
    out: list[str] = []

    def rec(node: etree._Element) -> None:
        tag = _tag(node)
        if tag == "br":
            out.append("\n")
        elif node.text and tag:
            out.append(node.text)
        if tag in ("p", "div", "li", "tr", "dt", "dd") and out and node is not el:
            out.append(" ")
        for child in node:
            rec(child)
            if child.tail:
                out.append(child.tail)
        if tag in ("td", "th"):
            out.append(" ")

    rec(el)
    return "".join(out)


def _list_lines(el: etree._Element, ordered: bool, depth: int, out: list[str]) -> None:
    n = 0
    for li in el:
        if _tag(li) != "li":
            # stray content directly inside the list
            text = clean_text(_ordered_text(li)) if _tag(li) else ""
            if text:
                out.append("  " * depth + text)
            continue
        n += 1
        own: list[str] = [li.text or ""]
        nested: list[etree._Element] = []
        for child in li:
            if _tag(child) in ("ul", "ol"):
                nested.append(child)
            else:
                own.append(_ordered_text(child) + " " if _tag(child) in _BLOCK_TAGS else _ordered_text(child))
            if child.tail:
                own.append(child.tail)
        marker = f"{n}." if ordered else "-"
        text = clean_text("".join(own))
        if text:
            out.append(f"{'  ' * depth}{marker} {text}")
        for sub in nested:
            _list_lines(sub, _tag(sub) == "ol", depth + 1, out)


def _table(el: etree._Element) -> tuple[list[list[str]], list[str] | None]:
    header: list[str] | None = None
    rows: list[list[str]] = []
    for tr in _own_rows(el):
        cells: list[str] = []
        all_th = True
        in_thead = _tag(tr.getparent()) == "thead"
        for cell in tr:
            tag = _tag(cell)
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
        tag = _tag(child)
        if tag == "tr":
            out.append(child)
        elif tag in ("thead", "tbody", "tfoot"):
            out.extend(c for c in child if _tag(c) == "tr")
    return out


def _code_language(el: etree._Element) -> str | None:
    for node in (el, *el.iterancestors()):
        for cls in (node.get("class") or "").split():
            for prefix in ("language-", "lang-", "highlight-"):
                if cls.startswith(prefix) and len(cls) > len(prefix):
                    return cls[len(prefix) :]
        if _tag(node) in ("body", "article", "main"):
            break
    code = el.find("code")
    if code is not None:
        for cls in (code.get("class") or "").split():
            if cls.startswith("language-"):
                return cls[len("language-") :]
    return None


def _looks_like_shell(n_scripts: int, asks_for_js: bool) -> bool:
    """No content blocks: a shell if scripts exist (they would render the page)."""
    return n_scripts > 0 or asks_for_js


def extract_html(data: bytes, ctx: ParseContext) -> ParsedDocument:
    """Parse HTML bytes into a :class:`ParsedDocument` (see the module docstring)."""
    limits = Limits.from_options(ctx.options)
    limits.check_size(data)
    deadline = Deadline(limits.time_budget_s)
    text, encoding = decode_text(data, ctx.declared_type, (_sniff_meta_charset(data),))
    # Re-encode so lxml never guesses the charset; strip an XML declaration that would lie.
    payload = text.encode("utf-8", errors="replace")
    del text  # the page's decoded copy is not needed past this point
    root, shell_hint_folded = build_tree(payload, _SHELL_HINT)
    del payload
    tree = root.getroottree()
    meta = _metadata(root, ctx.url)
    body = root.find("body")
    if body is None:
        body = root
    n_scripts = sum(1 for _ in root.iter("script"))
    # Text a visitor sees without scripts (noscript included: "please enable JavaScript").
    # (or in an element folded while the tree was built)
    asks_for_js = shell_hint_folded or bool(_SHELL_HINT.search(" ".join(visible_texts(body))))
    _strip_chrome(body)
    main = _main_content(body)
    builder = BlockBuilder(limits.max_blocks)
    walker = _Walker(tree, builder, deadline)
    walker.walk(main)
    walker.finish()
    if not builder.blocks:
        if _looks_like_shell(n_scripts, asks_for_js):
            raise ParseError(ParseErrorCode.EMPTY, "javascript shell: the page renders its content with scripts")
        raise ParseError(ParseErrorCode.EMPTY, "no text content")
    body_text = sum(len(b.text) for b in builder.blocks)
    if n_scripts and body_text < 200 and asks_for_js:
        raise ParseError(ParseErrorCode.EMPTY, "javascript shell: the page asks for JavaScript to show content")
    meta["encoding"] = encoding
    title = meta.get("title")
    if not title:
        first = next((b for b in builder.blocks if b.kind == BlockKind.HEADING), None)
        title = first.text if first else None
    return ParsedDocument(blocks=builder.blocks, title=title, media_type="text/html", metadata=meta)


@register_parser("html", "1.0", ("text/html", "application/xhtml+xml"), ("html", "htm", "xhtml", "shtml"))
def parse_html(data: bytes, ctx: ParseContext) -> ParsedDocument:
    return extract_html(data, ctx)
