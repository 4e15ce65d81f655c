"""sitemap.xml and sitemap index parsing (plain or gzipped).

Sitemaps seed the frontier; entries are ordered by ``lastmod`` (newest first) so that a crawl
cut by ``max_pages`` spends its budget on recently changed pages.
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass

from lxml import etree

__all__ = ["SitemapEntry", "parse_sitemap"]

_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True, slots=True)
class SitemapEntry:
    loc: str
    lastmod: str | None = None


def _gunzip_capped(data: bytes, limit: int) -> bytes:
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
        out = fh.read(limit + 1)
    if len(out) > limit:
        raise ValueError(f"sitemap over {limit} bytes once decompressed")
    return out


def parse_sitemap(data: bytes, max_bytes: int = 50 * 1024 * 1024) -> tuple[list[SitemapEntry], list[SitemapEntry]]:
    """Return ``(pages, child_sitemaps)`` from a ``<urlset>`` or ``<sitemapindex>`` document.

    Gzipped input is detected by its magic bytes (servers label ``.xml.gz`` inconsistently).
    Raises ValueError for anything that is not a sitemap.
    """
    if data[:2] == _GZIP_MAGIC:
        data = _gunzip_capped(data, max_bytes)
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False, recover=True)
    try:
        root = etree.fromstring(data, parser=parser)
    except etree.XMLSyntaxError as exc:
        raise ValueError(f"not XML: {exc}") from exc
    if root is None:
        raise ValueError("empty sitemap")
    kind = etree.QName(root).localname
    if kind not in ("urlset", "sitemapindex"):
        raise ValueError(f"not a sitemap (root element {kind!r})")
    entries: list[SitemapEntry] = []
    for node in root:
        if not isinstance(node.tag, str) or etree.QName(node).localname not in ("url", "sitemap"):
            continue
        loc = lastmod = None
        for child in node:
            if not isinstance(child.tag, str):
                continue
            name = etree.QName(child).localname
            if name == "loc" and child.text:
                loc = child.text.strip()
            elif name == "lastmod" and child.text:
                lastmod = child.text.strip()
        if loc:
            entries.append(SitemapEntry(loc, lastmod))
    # Newest first; entries without lastmod keep their order after the dated ones.
    entries.sort(key=lambda e: e.lastmod or "", reverse=True)
    return (entries, []) if kind == "urlset" else ([], entries)
