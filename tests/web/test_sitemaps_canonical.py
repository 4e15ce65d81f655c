"""Sitemaps (robots.txt ``Sitemap:``, index, gzip) seed the crawl; ``rel=canonical`` deduplicates;
meta robots noindex/nofollow are honoured."""

from __future__ import annotations

import gzip
from pathlib import Path

from fastapi import FastAPI, Response
from fastapi.responses import HTMLResponse, PlainTextResponse

from include.contract import ChangeKind
from tests.support.server import serve_asgi
from tests.web.helpers import Run, make_connector


def _app(hits: list[str]) -> FastAPI:
    app = FastAPI()

    @app.middleware("http")
    async def record(request, call_next):  # type: ignore[no-untyped-def]
        hits.append(request.url.path)
        return await call_next(request)

    @app.get("/robots.txt")
    async def robots() -> PlainTextResponse:
        return PlainTextResponse("User-agent: *\nAllow: /\nSitemap: /sitemap_index.xml\n")

    @app.get("/sitemap_index.xml")
    async def index() -> Response:
        body = (
            '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            "<sitemap><loc>/pages.xml.gz</loc></sitemap></sitemapindex>"
        )
        return Response(body, media_type="application/xml")

    @app.get("/pages.xml.gz")
    async def pages() -> Response:
        body = (
            b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            b"<url><loc>/orphan.html</loc><lastmod>2026-01-01</lastmod></url>"
            b"<url><loc>https://elsewhere.example/x</loc></url></urlset>"
        )
        return Response(gzip.compress(body), media_type="application/gzip")

    @app.get("/")
    async def home() -> HTMLResponse:
        return HTMLResponse(
            '<html><body><a href="/dup.html?ref=nav">dup 1</a> <a href="/dup.html">dup 2</a>'
            '<a href="/hidden.html">hidden</a> <a href="/nofollow.html">nf</a></body></html>'
        )

    @app.get("/dup.html")
    async def dup() -> HTMLResponse:
        return HTMLResponse(
            '<html><head><link rel="canonical" href="/dup.html"></head><body><p>One page, two URLs.</p></body></html>'
        )

    @app.get("/orphan.html")
    async def orphan() -> HTMLResponse:
        return HTMLResponse("<html><body><p>Only the sitemap knows me.</p></body></html>")

    @app.get("/hidden.html")
    async def hidden() -> HTMLResponse:
        return HTMLResponse(
            '<html><head><meta name="robots" content="noindex"></head>'
            '<body><a href="/behind-hidden.html">x</a></body></html>'
        )

    @app.get("/behind-hidden.html")
    async def behind() -> HTMLResponse:
        return HTMLResponse("<html><body><p>Reached through a noindex page.</p></body></html>")

    @app.get("/nofollow.html")
    async def nofollow() -> HTMLResponse:
        return HTMLResponse(
            '<html><head><meta name="robots" content="nofollow"></head>'
            '<body><a href="/not-followed.html">x</a></body></html>'
        )

    return app


def test_sitemaps_canonical_and_meta_robots(tributary_home: Path, tmp_path: Path) -> None:
    hits: list[str] = []
    with serve_asgi(_app(hits)) as base:
        run = Run(make_connector(seeds=[base + "/"], concurrency=1), tmp_path / "s")
    keys = run.keys(ChangeKind.NEW)
    assert keys == {
        f"{base}/",
        f"{base}/dup.html",
        f"{base}/orphan.html",
        f"{base}/behind-hidden.html",
        f"{base}/nofollow.html",
    }
    stats = run.discovery.stats
    assert stats["sitemaps"] == 2  # the index and its gzipped child
    assert stats["skipped_noindex"] == 1
    # /dup.html?ref=nav declared /dup.html canonical: one document, the second URL not fetched
    assert stats["duplicate_canonical"] == 1
    assert hits.count("/dup.html") == 1
    assert sum(1 for c in run.changes if c.item_key == f"{base}/dup.html") == 1
    assert "/not-followed.html" not in hits
    assert run.discovery.complete
