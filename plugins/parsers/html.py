"""HTML parser (lxml): decoding, main-content extraction and structural blocks.

This is also the web crawler's page extractor, so it follows what a browser would show:

* decoding: BOM, the Content-Type charset, ``<meta charset>`` / ``http-equiv``, then detection;
* chrome removal: script/style/noscript/template, nav and aside everywhere, header/footer and
  the banner/contentinfo roles outside the main content (an article's own ``<header>`` usually
  holds its title);
* main content: ``article``, ``main``, ``[role=main]``, an element whose class/id looks like
  content and holds a good share of the page's text, then ``body``;
* blocks: headings with level and heading path, paragraphs, lists, tables (rows + header),
  code (``pre``), each with its element path as position;
* metadata: title, description, language, canonical URL (resolved against the page URL).

The tree is built by :mod:`plugins.parsers._html_tree` (push parser, plain paragraphs folded as
they end, huge text nodes kept, over-deep nesting flattened), within a few times the page's size;
the main content is turned into blocks by :mod:`plugins.parsers._html_blocks`.

The page's text is charged block by block against ``Limits.max_chars`` and a page past it is
refused (``too_large``), as every other parser's text is: a cut page indexed as if whole would
answer searches about its end with silence. An XHTML internal DTD subset is dropped before the
tree is built (:func:`plugins.parsers._html_tree.drop_internal_subset`): its entities never
expand and none of its text reaches the document.

A page whose body has no text but scripts (a single-page-app shell) raises
``ParseError(empty, "javascript shell")`` so the run records it as skipped with that reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urljoin

from lxml import etree

from include.contract import BlockKind, ParsedDocument, ParseError, ParseErrorCode
from plugins.parsers._common import BlockBuilder, Deadline, Limits, clean_text, decode_text
from plugins.parsers._html_blocks import BlockWalker
from plugins.parsers._html_blocks import tag_name as _tag
from plugins.parsers._html_tree import CONTENT_HINT as _CONTENT_HINT
from plugins.parsers._html_tree import build_tree, search_joined
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
_DROP_ROLES = ("navigation", "complementary", "search")
# The page's own banner/footer landmarks: dropped only outside the main content, like header and
# footer. WAI-ARIA 1.2 scopes banner and contentinfo to the page (HTML-AAM maps <header>/<footer>
# to them only when not inside article/main); sites also put role=contentinfo on each search
# result's caption inside <main> (Bing), which is the content itself.
_PAGE_ROLES = ("banner", "contentinfo")
_NOT_CONTENT_HINT = re.compile(
    r"(?:^|[\s_-])(comment|sidebar|footer|header|menu|nav|related|share|ad|ads)(?:$|[\s_-])", re.I
)
_SHELL_HINT = re.compile(r"enable javascript|javascript (?:is )?required|requires javascript|turn on javascript", re.I)
_SHELL_WORD = re.compile("javascript", re.I)  # in every shell hint: a much cheaper search first


def _sniff_meta_charset(data: bytes) -> str | None:
    head = data[:8192]
    m = _XML_DECL.match(head) or _META_CHARSET.search(head)
    if not m:
        return None
    label = m.group(1).decode("ascii", "ignore").lower()
    # A document that could be read far enough to find an ASCII meta tag is not UTF-16/32.
    return "utf-8" if label.startswith(("utf-16", "utf-32", "ucs")) else label


_WORD_BATCH = 1 << 16  # characters of text joined and split at once


def _text_len(el: etree._Element) -> int:
    """Words under ``el`` as ``str.split`` counts them in its joined text, ~64 K characters at a time.

    Neither the whole joined text nor one ``split`` of it is built: the join held every text
    node and the page's text at once, and the split a string per word. A word cut across two
    batches is counted once.
    """
    if el is None:
        return 0
    words = 0
    in_word = False  # the text counted so far ends inside a word
    batch: list[str] = []
    size = 0
    for text in el.itertext():
        batch.append(text)
        size += len(text)
        if size >= _WORD_BATCH:
            words, in_word = _count_batch("".join(batch), words, in_word)
            batch, size = [], 0
    if size:
        words, in_word = _count_batch("".join(batch), words, in_word)
    return words


def _count_batch(text: str, words: int, in_word: bool) -> tuple[int, bool]:
    for start in range(0, len(text), _WORD_BATCH):  # a long text node in slices, not one split
        piece = text[start : start + _WORD_BATCH]
        words += len(piece.split()) - (in_word and not piece[0].isspace())
        in_word = not piece[-1].isspace()
    return words, in_word


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


# Elements an attribute of which ``_strip_chrome`` reads (libxml2 finds them, not a Python test
# of every element); dropped tags are found by ``iter``'s tag filter (the parser lowercases them).
_WITH_CHROME_ATTRIBUTE = etree.XPath("descendant-or-self::*[@role or @hidden or @aria-hidden or @style]")
_WITH_ROLE = etree.XPath("descendant-or-self::*[@role]")
_WITH_ID_OR_CLASS = etree.XPath("descendant-or-self::*[@id or @class]")


def _strip_chrome(body: etree._Element) -> None:
    to_remove = []
    # removal order does not matter: a dropped element's tail joins whatever text precedes it
    candidates = dict.fromkeys(
        [
            *body.iter(etree.Comment, etree.ProcessingInstruction, *_DROP_ALWAYS, "header", "footer"),
            *_WITH_CHROME_ATTRIBUTE(body),
        ]
    )
    for el in candidates:
        if not isinstance(el.tag, str):  # comments, processing instructions
            to_remove.append(el)
            continue
        tag = _tag(el)
        role = (el.get("role") or "").lower()
        if (
            tag in _DROP_ALWAYS
            or role in _DROP_ROLES
            or _is_hidden(el)
            or ((tag in ("header", "footer") or role in _PAGE_ROLES) and not _inside_content(el))
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
    for el in _WITH_ROLE(body):
        if (el.get("role") or "").lower() == "main" and _text_len(el) > 0:
            return el
    best, best_len = None, 0
    for el in _WITH_ID_OR_CLASS(body):  # a hint needs an id or a class
        if _tag(el) in ("body", "html"):
            continue
        hint = f"{el.get('id') or ''} {el.get('class') or ''}"
        if _CONTENT_HINT.search(hint) and not _NOT_CONTENT_HINT.search(hint):
            n = _text_len(el)
            if n > best_len:
                best, best_len = el, n
    if best is not None and best_len >= 0.5 * total:
        return best
    return body


def _visible_texts(body: etree._Element) -> Iterator[str]:
    """The text nodes under ``body`` outside script and style, in document order.

    Empties body's script and style elements first (their tails kept): chrome, dropped by
    ``_strip_chrome`` right after, and then ``itertext`` (C) yields what a visitor sees.
    """
    for el in list(body.iter("script", "style")):
        tail = el.tail
        el.clear()
        el.tail = tail
    texts: Iterator[str] = body.itertext()
    return texts


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
    if payload == data:
        payload = data  # a UTF-8 page: parse the caller's bytes, not a copy kept through the parse
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
    asks_for_js = shell_hint_folded or search_joined(_SHELL_HINT, _visible_texts(body), _SHELL_WORD)
    _strip_chrome(body)
    main = _main_content(body)
    builder = BlockBuilder(limits.max_blocks, limits.max_chars)
    walker = BlockWalker(tree, builder, deadline)
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
