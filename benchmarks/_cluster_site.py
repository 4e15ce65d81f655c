"""A deterministic N-page HTML site for the cluster benchmark, built from PostgreSQL's manual.

Every page is a distinct mix of real paragraphs (Debian ``postgresql-doc-15``; Python's HTML
docs as a fallback), 3-20 KB of HTML, and the pages form a ``FANOUT``-ary tree: page ``i``
links to pages ``FANOUT*i+1 .. FANOUT*i+FANOUT``, to its parent and to the index, so a
breadth-first crawl from ``index.html`` (page 0) reaches all of them in a few link hops.
The same ``pages`` always give byte-identical files (a fixed seed per page), so two runs
of the benchmark crawl the same site.
"""

from __future__ import annotations

import hashlib
import html
import random
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FANOUT", "TEXT_SOURCES", "SiteInfo", "build_site", "page_path", "paragraph_pool"]

TEXT_SOURCES = (Path("/usr/share/doc/postgresql-doc-15/html"), Path("/usr/share/doc/python3-doc/html"))
FANOUT = 10
MIN_TEXT, MAX_TEXT = 2_800, 18_000  # paragraph bytes per page; markup brings it to 3-20 KB
_PARA = re.compile(r"<p\b[^>]*>(.*?)</p>", re.S | re.I)
_TAG = re.compile(r"<[^>]+>")


@dataclass(frozen=True, slots=True)
class SiteInfo:
    root: Path
    pages: int
    total_bytes: int
    min_bytes: int
    max_bytes: int
    digest: str  # sha256 over every page's path and bytes, in page order


def paragraph_pool(limit_files: int | None = None) -> list[str]:
    """Paragraphs of >= 80 characters from the first installed manual, in file order."""
    for docs in TEXT_SOURCES:
        files = sorted(docs.rglob("*.html"))[:limit_files] if docs.is_dir() else []
        pool = [p for f in files for p in _paragraphs(f.read_text(encoding="utf-8", errors="replace"))]
        if len(pool) >= 200:
            return pool
    raise RuntimeError(f"no HTML manual to build pages from: apt-get install postgresql-doc-15 ({TEXT_SOURCES})")


def _paragraphs(text: str) -> list[str]:
    out = []
    for match in _PARA.finditer(text):
        para = " ".join(html.unescape(_TAG.sub("", match.group(1))).split())
        if len(para) >= 80:
            out.append(para)
    return out


def page_path(i: int) -> str:
    """The site-relative path of page ``i`` (page 0 is the index; 100 pages per directory)."""
    return "index.html" if i == 0 else f"p/{i // 100:03d}/page-{i}.html"


def _href(dst: int) -> str:
    # Root-relative links: the same from every directory depth.
    return "/" if dst == 0 else "/" + page_path(dst)


def _page_html(i: int, pages: int, pool: list[str]) -> str:
    rng = random.Random(i)  # the page's own seed: deterministic and independent of the others
    target = rng.randint(MIN_TEXT, MAX_TEXT)
    paras: list[str] = []
    size = 0
    while size < target:
        para = pool[rng.randrange(len(pool))]
        paras.append(f"<p>{html.escape(para, quote=False)}</p>")
        size += len(para) + 7
    children = range(FANOUT * i + 1, min(pages, FANOUT * i + FANOUT + 1))
    nav = [f'<a href="{_href(0)}">Index</a>']
    if i:
        nav.append(f'<a href="{_href((i - 1) // FANOUT)}">Up</a>')
    items = "".join(f'<li><a href="{_href(c)}">Section {c}</a></li>' for c in children)
    title = f"Section {i}: {pool[rng.randrange(len(pool))][:60]}"
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>\n'
        f"<body><nav>{' | '.join(nav)}</nav>\n<main><h1>{html.escape(title)}</h1>\n"
        + "\n".join(paras)
        + (f"\n<h2>Subsections</h2><ul>{items}</ul>" if items else "")
        + "\n</main></body></html>\n"
    )


def build_site(root: Path, pages: int, pool: list[str] | None = None) -> SiteInfo:
    """Write ``pages`` pages under ``root`` (created); returns their count, sizes and digest."""
    pool = pool if pool is not None else paragraph_pool()
    digest = hashlib.sha256()
    sizes = []
    for i in range(pages):
        rel = page_path(i)
        data = _page_html(i, pages, pool).encode("utf-8")
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        digest.update(rel.encode() + b"\0" + data)
        sizes.append(len(data))
    return SiteInfo(root, pages, sum(sizes), min(sizes), max(sizes), digest.hexdigest())
