"""Rendered pages per second: Tributary's renderer in a crawl vs Playwright's own naive loop.

A generated single-page docs site of N pages on 127.0.0.1 (Python's threaded static server): each
page is the same shell; its script fetches the page's text from ``/api/<n>.json`` and adds the
links to the next pages, so without a browser there is neither text nor a link to follow.

- **Tributary**: ``WebConnector.discover`` with ``render: always`` (the whole crawl: fetching
  each shell with conditional GET support, robots.txt, the render with every request of the page
  intercepted and fetched through the crawler's SSRF guard, scope, robots and politeness rules,
  links from the rendered DOM, staging), ``render_concurrency`` 2 pages at once;
- **Playwright naive loop**: one browser (the same ``/usr/bin/chromium``, same flags), for each
  URL of the site ``page.goto(url); page.content()``, sequential, no interception, and the URL
  list given (it discovers nothing).

Both in this process, one after the other, each timed with ``time.perf_counter()`` including its
browser launch. "pages with their text" counts rendered HTML holding the page's fetched paragraph:
``goto`` returns at the load event, which may come before the script's ``fetch()`` answered.

    .venv-bench/bin/python -m benchmarks render [--quick] [--no-readme]
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from include.config import SourceConfig
from include.staging import StagingArea
from plugins.connectors.base import DiscoveryRequest
from plugins.connectors.web.connector import WebConnector
from plugins.connectors.web.render import availability
from plugins.connectors.web.render.browser import CHROMIUM, BrowserSettings
from tests.web.helpers import serve_directory

SHELL = """<!doctype html><html><head><title>page {n}</title></head><body><div id="app"></div>
<script src="/app.js"></script></body></html>"""
APP_JS = """(async () => {
  const n = location.pathname.match(/p(\\d+)/)?.[1] ?? '0';
  const page = await (await fetch('/api/' + n + '.json')).json();
  const app = document.getElementById('app');
  for (const link of page.links) { const a = document.createElement('a'); a.href = link; a.textContent = link; app.appendChild(a); }
  const main = document.createElement('main');
  for (const t of page.text) { const p = document.createElement('p'); p.textContent = t; main.appendChild(p); }
  app.appendChild(main);
})();"""


def _marker(n: int) -> str:
    return f"text of page {n} arrived by fetch"


def build_site(root: Path, pages: int) -> list[str]:
    """Pages ``/p<n>/``: page n links to 2n+1 and 2n+2 (a tree, every page reachable)."""
    (root / "api").mkdir(parents=True)
    (root / "app.js").write_text(APP_JS)
    paths = []
    for n in range(pages):
        folder = root / f"p{n}"
        folder.mkdir()
        (folder / "index.html").write_text(SHELL.format(n=n))
        links = [f"/p{k}/" for k in (2 * n + 1, 2 * n + 2) if k < pages]
        text = [_marker(n), *(f"Paragraph {i} of page {n}: words for the index." for i in range(5))]
        (root / "api" / f"{n}.json").write_text(json.dumps({"links": links, "text": text}))
        paths.append(f"/p{n}/")
    return paths


def run_tributary(base: str, pages: int, work: Path) -> dict[str, Any]:
    options = {
        "seeds": [f"{base}/p0/"],
        "render": "always",
        "render_concurrency": 2,
        "concurrency": 4,
        "delay_seconds": 0,
        "allowlist": ["127.0.0.1"],
        "use_sitemaps": False,
        "retries": 0,
        "max_pages": pages,
        "cache_path": str(work / "cache.sqlite"),
    }
    connector = WebConnector(SourceConfig(kind="web", name="render_bench", options=options))
    stage = StagingArea.at(work / "stage").stage_raw
    started = time.perf_counter()
    discovery = connector.discover(DiscoveryRequest(known={}, stage=stage))
    wall = time.perf_counter() - started
    with_text = 0
    for change in discovery.changes:
        n = int(change.item_key.rstrip("/").rsplit("p", 1)[-1])
        with_text += _marker(n) in StagingArea.read_bytes(change.staged_path or "").decode()
    render = discovery.stats.get("render", {})
    return {"pages": len(discovery.changes), "wall": wall, "with_text": with_text, "refused": render}


async def _naive(urls: list[str]) -> tuple[float, int]:
    from playwright.async_api import async_playwright  # the peer under test

    started = time.perf_counter()
    with_text = 0
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=BrowserSettings().args()[:8])
        page = await browser.new_page()
        for n, url in enumerate(urls):
            await page.goto(url)
            with_text += _marker(n) in await page.content()
        await browser.close()
    return time.perf_counter() - started, with_text


def _row(name: str, pages: int, wall: float, with_text: int, note: str) -> dict[str, Any]:
    return {
        "renderer": name,
        "pages": pages,
        "seconds": round(wall, 2),
        "pages/s": round(pages / wall, 2) if wall else 0.0,
        "pages with their text": with_text,
        "what it does": note,
    }


def run(quick: bool) -> dict[str, Any]:
    reason = availability()
    if reason:
        return {
            "title": "JavaScript rendering",
            "peer": "Playwright naive loop",
            "rows": [],
            "summary": f"skipped: {reason}",
        }
    pages = 20 if quick else 100
    with tempfile.TemporaryDirectory(prefix="render-bench-") as tmp:
        work = Path(tmp)
        paths = build_site(work / "site", pages)
        with serve_directory(work / "site") as base:
            ours = run_tributary(base, pages, work)
            naive_wall, naive_text = asyncio.run(_naive([base + p for p in paths]))
    rows = [
        _row(
            "Tributary crawl, render: always",
            ours["pages"],
            ours["wall"],
            ours["with_text"],
            "crawl + discover links + every request checked and fetched by the crawler, 2 pages at once",
        ),
        _row(
            "Playwright naive loop",
            pages,
            naive_wall,
            naive_text,
            "goto + content per known URL, sequential, no checks",
        ),
    ]
    ratio = rows[0]["pages/s"] / rows[1]["pages/s"] if rows[1]["pages/s"] else 0.0
    summary = (
        f"{pages}-page local SPA. Tributary {rows[0]['pages/s']} pages/s ({ours['with_text']}/{ours['pages']} with "
        f"their fetched text), naive loop {rows[1]['pages/s']} pages/s ({naive_text}/{pages} with their text): "
        f"{ratio:.2f}x. Render counters: {ours['refused']}."
    )
    return {
        "title": "JavaScript rendering: rendered pages/s",
        "peer": "Playwright naive loop (page.goto + content)",
        "rows": rows,
        "summary": summary,
    }
