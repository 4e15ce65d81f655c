"""Responses whose body the fetcher does not want (a 304's none, a 404 page) leave the connection
open for the next request: closing such a response unread closed its connection, so a no-change
resync opened one TCP connection per page."""

from __future__ import annotations

import asyncio
import http.server
from collections.abc import Iterator

import pytest

from plugins.connectors.web.fetcher import Fetcher, FetcherConfig
from plugins.connectors.web.ssrf import AddressGuard
from tests.web.helpers import serve_handler


class _Counting(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    connections = 0

    def setup(self) -> None:
        super().setup()
        type(self).connections += 1

    def do_GET(self) -> None:
        if self.path == "/missing":
            body = b"<html>not here</html>"
            self.send_response(404)
        elif self.headers.get("If-None-Match") == '"v1"':
            self.send_response(304)
            self.send_header("ETag", '"v1"')
            self.end_headers()
            return
        else:
            body = b"<html><p>page</p></html>"
            self.send_response(200)
            self.send_header("ETag", '"v1"')
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def counting_server() -> Iterator[str]:
    _Counting.connections = 0
    with serve_handler(_Counting) as url:
        yield url


def test_304s_and_error_pages_keep_the_connection_for_the_next_request(counting_server: str) -> None:
    async def fetch_all() -> list[tuple[int, bytes]]:
        fetcher = Fetcher(FetcherConfig(user_agent="test"), AddressGuard(allow=["127.0.0.1"]))
        validators = lambda url: {"If-None-Match": '"v1"'}  # noqa: E731
        try:
            got = []
            for path in ("/a", "/b", "/missing", "/c", "/missing", "/d"):
                result = await fetcher.fetch(counting_server + path, conditional=validators)
                got.append((result.status, result.body))
            got.append(((await fetcher.fetch(counting_server + "/fresh")).status, b""))
            return got
        finally:
            await fetcher.aclose()

    got = asyncio.run(fetch_all())
    assert [status for status, _ in got] == [304, 304, 404, 304, 404, 304, 200]
    assert all(body == b"" for _, body in got)  # nothing of a 304 or a 404 page is handed on
    assert _Counting.connections == 1
