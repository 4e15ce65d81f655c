"""Outlinks, ``<link rel=canonical>`` and robots directives of an HTML page.

Only what the crawler needs to walk the site; text extraction belongs to the HTML parser
(``plugins/parsers/html.py``). Links are read from the whole page (navigation included),
because navigation is how a crawler reaches the rest of a site.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import lxml.html
from lxml import etree

from plugins.connectors.web.urls import resolve_link

__all__ = ["PageLinks", "charset_from_content_type", "extract_links"]

_CHARSET = re.compile(r"charset\s*=\s*[\"']?([\w.:-]+)", re.IGNORECASE)
# (tag, attribute) pairs that point at documents worth crawling.
_LINK_ATTRS = (("a", "href"), ("area", "href"), ("iframe", "src"), ("frame", "src"))


def charset_from_content_type(content_type: str | None) -> str | None:
    if not content_type:
        return None
    match = _CHARSET.search(content_type)
    return match.group(1).lower() if match else None


@dataclass(slots=True)
class PageLinks:
    links: list[str] = field(default_factory=list)
    canonical: str | None = None
    noindex: bool = False
    nofollow: bool = False
    title: str | None = None


def _parse(data: bytes, charset: str | None) -> etree._Element | None:
    # lxml reads <meta charset> itself; an explicit header charset wins when Python knows it.
    # Link URLs are nearly always ASCII, so a wrong guess rarely matters here.
    try:
        parser = lxml.html.HTMLParser(encoding=charset, recover=True) if charset else None
        if parser is not None:
            return lxml.html.document_fromstring(data, parser=parser)
        return lxml.html.document_fromstring(data)
    except (LookupError, etree.ParserError, ValueError):
        if charset:
            return _parse(data, None)
        return None


def _robots_directives(root: etree._Element, header: str | None) -> set[str]:
    values: list[str] = [header or ""]
    for meta in root.iter("meta"):
        name = (meta.get("name") or "").strip().lower()
        if name in ("robots", "tributary"):
            values.append(meta.get("content") or "")
    directives: set[str] = set()
    for value in values:
        directives.update(d.strip().lower() for d in value.split(",") if d.strip())
    if "none" in directives:
        directives.update({"noindex", "nofollow"})
    return directives


def extract_links(data: bytes, url: str, content_type: str | None = None, x_robots_tag: str | None = None) -> PageLinks:
    """Absolute canonical outlinks of the page at ``url`` (in document order, deduplicated),
    its declared canonical URL and whether robots directives forbid indexing / following."""
    root = _parse(data, charset_from_content_type(content_type))
    if root is None:
        return PageLinks()
    base = url
    for el in root.iter("base"):
        href = el.get("href")
        if href:
            base = resolve_link(url, href) or url
        break
    out = PageLinks()
    directives = _robots_directives(root, x_robots_tag)
    out.noindex = "noindex" in directives
    out.nofollow = "nofollow" in directives
    title = root.find(".//title")
    if title is not None and title.text:
        out.title = " ".join(title.text.split()) or None
    for el in root.iter("link"):
        rels = {r.lower() for r in (el.get("rel") or "").split()}
        if "canonical" in rels and el.get("href"):
            out.canonical = resolve_link(base, el.get("href") or "")
            break
    seen: set[str] = set()
    hrefs: set[str] = set()
    for el in root.iter(*(tag for tag, _ in _LINK_ATTRS)):
        attr = "href" if el.tag in ("a", "area") else "src"
        href = el.get(attr)
        if not href or href in hrefs:
            continue
        hrefs.add(href)
        link = resolve_link(base, href)
        if link and link not in seen:
            seen.add(link)
            out.links.append(link)
    return out
