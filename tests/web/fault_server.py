"""A misbehaving web site (FastAPI, served on 127.0.0.1 by ``tests.support.server.serve_asgi``).

Each route is one fault the crawler must survive. ``FaultSite`` records every request (path,
arrival time, headers) so tests assert on what reached the server, not on what the crawler
says it did.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import io
import struct
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, StreamingResponse

__all__ = ["FaultSite", "docx_bytes", "double_gzip_bomb", "pdf_bytes"]

GBK_TEXT = "中文页面：长江是中国最长的河流。"
SJIS_TEXT = "日本語のページ：富士山は日本一高い山です。"


def pdf_bytes(text: str = "Tributary PDF sample") -> bytes:
    """A minimal valid one-page PDF with ``text`` (hand-built, offsets computed)."""
    stream = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def docx_bytes(text: str = "Tributary DOCX sample") -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Sample", level=1)
    document.add_paragraph(text)
    buf = io.BytesIO()
    document.save(buf)
    return buf.getvalue()


@functools.lru_cache(maxsize=2)
def _zeros_gzip(mebibytes: int) -> bytes:
    """A gzip member of ``mebibytes`` MiB of zeros, built without compressing them all: after
    a full flush deflate restarts from an empty window, so every further MiB compresses to
    the same block and the block can be repeated."""
    chunk = b"\0" * (1 << 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    first = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    block = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    last = deflate.compress(chunk) + deflate.flush(zlib.Z_FINISH)
    crc = 0
    for _ in range(mebibytes):
        crc = zlib.crc32(chunk, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # RFC 1952: deflate, no name, no mtime
    trailer = struct.pack("<II", crc, (mebibytes << 20) & 0xFFFFFFFF)
    return header + first + block * (mebibytes - 2) + last + trailer


def double_gzip_bomb(mebibytes: int = 4096) -> bytes:
    """``Content-Encoding: gzip, gzip`` body: ~10 KB on the wire, ``mebibytes`` MiB decoded."""
    return gzip.compress(_zeros_gzip(mebibytes), 9)


@dataclass
class Hit:
    path: str
    at: float
    headers: dict[str, str]


@dataclass
class FaultSite:
    """Build with the robots.txt behaviour wanted: ``robots`` is a status code or a body."""

    robots: int | str = 404
    slow_seconds: float = 3.0
    robots_redirect: str | None = None  # robots.txt answers 301 to this URL
    trickle_seconds: float = 0.5  # /trickle.html sends one byte per this many seconds
    links: list[str] = field(default_factory=list)  # /links.html links to these (absolute) URLs
    hits: list[Hit] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)

    def paths(self) -> list[str]:
        return [h.path for h in self.hits]

    def times(self, path: str) -> list[float]:
        return [h.at for h in self.hits if h.path == path]

    def _count(self, key: str) -> int:
        self.counters[key] = self.counters.get(key, 0) + 1
        return self.counters[key]

    def app(self) -> FastAPI:
        app = FastAPI()
        site = self

        @app.middleware("http")
        async def record(request: Request, call_next: Any) -> Response:
            path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            site.hits.append(Hit(path, time.time(), {k.lower(): v for k, v in request.headers.items()}))
            return await call_next(request)

        self._site_routes(app)
        self._fault_routes(app)
        self._trap_routes(app)
        self._body_routes(app)
        return app

    def _site_routes(self, app: FastAPI) -> None:
        """The site itself: robots.txt, pages that link on, a members-only page."""
        site = self

        @app.get("/robots.txt")
        async def robots() -> Response:
            if site.robots_redirect:
                return RedirectResponse(site.robots_redirect, status_code=301)
            if isinstance(site.robots, int):
                return PlainTextResponse("no", status_code=site.robots)
            return PlainTextResponse(site.robots)

        @app.get("/")
        async def index() -> HTMLResponse:
            return HTMLResponse(
                "<html><head><title>Faults</title></head><body>"
                '<a href="/ok.html">ok</a> <a href="/private/page.html">private</a>'
                '<a href="/img/logo.png">logo</a></body></html>'
            )

        @app.get("/links.html")
        async def links() -> HTMLResponse:
            anchors = "".join(f'<a href="{url}">{url}</a> ' for url in site.links)
            return HTMLResponse(f"<html><body><p>Links.</p>{anchors}</body></html>")

        @app.get("/ok.html")
        async def ok() -> HTMLResponse:
            return HTMLResponse("<html><body><p>All fine here.</p><a href='/'>home</a></body></html>")

        @app.get("/private/page.html")
        async def private() -> HTMLResponse:
            return HTMLResponse("<html><body><p>Private area.</p></body></html>")

        @app.get("/login-only.html")
        async def login_only(request: Request) -> Response:
            if request.headers.get("x-token") != "s3cret-token" or request.cookies.get("sid") != "abc123":
                return PlainTextResponse("forbidden", status_code=403)
            return HTMLResponse("<html><body><p>Members only.</p></body></html>")

    def _fault_routes(self, app: FastAPI) -> None:
        """Servers in trouble: rate limits, 5xx, slowness, a body that trickles."""
        site = self

        @app.get("/ratelimited.html")
        async def ratelimited() -> Response:
            if site._count("ratelimited") == 1:
                return PlainTextResponse("slow down", status_code=429, headers={"Retry-After": "1"})
            return HTMLResponse("<html><body><p>Rate limit passed.</p></body></html>")

        @app.get("/flaky.html")
        async def flaky() -> Response:
            if site._count("flaky") == 1:
                return PlainTextResponse("busy", status_code=503)
            return HTMLResponse("<html><body><p>Flaky page recovered.</p></body></html>")

        @app.get("/broken.html")
        async def broken() -> Response:
            return PlainTextResponse("boom", status_code=500)

        @app.get("/slow.html")
        async def slow() -> HTMLResponse:
            await asyncio.sleep(site.slow_seconds)
            return HTMLResponse("<html><body><p>Too late.</p></body></html>")

        @app.get("/trickle.html")
        async def trickle() -> StreamingResponse:
            async def drip() -> Any:
                for _ in range(10_000):
                    yield b"."
                    await asyncio.sleep(site.trickle_seconds)

            return StreamingResponse(drip(), media_type="text/html")

    def _trap_routes(self, app: FastAPI) -> None:
        """Infinite URL spaces and redirects (chains, into private networks, anywhere)."""

        @app.get("/calendar")
        async def calendar(month: int = 0) -> HTMLResponse:
            # An infinite space: every month links to the next and the previous one.
            return HTMLResponse(
                f"<html><body><h1>Month {month}</h1>"
                f'<a href="/calendar?month={month + 1}">next</a> <a href="/calendar?month={month - 1}">prev</a>'
                "</body></html>"
            )

        @app.get("/loop/{rest:path}")
        async def loop(rest: str) -> HTMLResponse:
            # A relative link that nests forever: /loop/a/ -> /loop/a/a/ -> ...
            return HTMLResponse('<html><body><p>Loop</p><a href="a/">deeper</a></body></html>')

        @app.get("/hop/{n}")
        async def hop(n: int, end: int = 6) -> Response:
            if n < end:
                return RedirectResponse(f"/hop/{n + 1}?end={end}", status_code=302)
            return HTMLResponse(f"<html><body><p>Landed after {end} hops.</p></body></html>")

        @app.get("/to-private")
        async def to_private() -> Response:
            return RedirectResponse("http://10.0.0.1/admin", status_code=302)

        @app.get("/to-metadata")
        async def to_metadata() -> Response:
            return RedirectResponse("http://169.254.169.254/latest/meta-data/", status_code=301)

        @app.get("/redirect")
        async def redirect(to: str) -> Response:
            return RedirectResponse(to, status_code=302)

    def _body_routes(self, app: FastAPI) -> None:
        """Bodies: legacy charsets, content-codings and bombs, sizes, documents."""

        @app.get("/gbk.html")
        async def gbk() -> Response:
            body = f'<html><head><title>GBK</title></head><body><p>{GBK_TEXT}</p><a href="/链接.html">链接</a></body></html>'
            return Response(body.encode("gbk"), media_type="text/html; charset=gbk")

        @app.get("/sjis.html")
        async def sjis() -> Response:
            # No charset in the header: only <meta charset> says Shift_JIS.
            body = f'<html><head><meta charset="shift_jis"><title>SJIS</title></head><body><p>{SJIS_TEXT}</p></body></html>'
            return Response(body.encode("shift_jis"), media_type="text/html")

        @app.get("/gzip.html")
        async def gzipped() -> Response:
            body = gzip.compress(
                b"<html><body><p>Compressed page body.</p>" + b"<!-- pad -->" * 500 + b"</body></html>"
            )
            return Response(body, media_type="text/html", headers={"Content-Encoding": "gzip"})

        @app.get("/bomb/{encoding}")
        async def bomb(encoding: str) -> Response:
            # RFC 9110 8.4: codings are listed in the order they were applied.
            inner = _zeros_gzip(4096)
            if encoding == "gzip-gzip":
                return Response(
                    gzip.compress(inner, 9), media_type="text/html", headers={"Content-Encoding": "gzip, gzip"}
                )
            if encoding == "gzip-deflate":
                body = zlib.compress(inner, 9)
                return Response(body, media_type="text/html", headers={"Content-Encoding": "gzip, deflate"})
            return Response(inner, media_type="text/html", headers={"Content-Encoding": "gzip"})

        @app.get("/big.html")
        async def big() -> Response:
            return HTMLResponse("<html><body>" + "x" * 300_000 + "</body></html>")

        @app.get("/big-stream.html")
        async def big_stream() -> StreamingResponse:
            async def chunks() -> Any:
                for _ in range(100):
                    yield b"y" * 10_000

            return StreamingResponse(chunks(), media_type="text/html")

        @app.get("/files/report.pdf")
        async def pdf() -> Response:
            return Response(pdf_bytes(), media_type="application/pdf")

        @app.get("/files/notes.docx")
        async def docx_file() -> Response:
            return Response(
                docx_bytes(),
                media_type="application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            )

        @app.get("/files/setup-download")
        async def binary() -> Response:
            return Response(b"\x00" * 1000, media_type="application/x-msdownload")
