"""A query embedding that fails is a 502/503 beside the form, and hybrid falls back to BM25 with a note;
45 searches against a trickling endpoint leave the app answering (issue 32, points 14 and 15).

The embeddings endpoint is this file's own small HTTP server on 127.0.0.1 (one behaviour at a
time: a good answer, NaN, a 400-digit integer, JSON nested 20,000 deep, a vector of the wrong
size, a connection reset, a body trickled a byte at a time); the audit app is served by uvicorn
on 127.0.0.1 over a real SQLite index whose chunks carry 4-dimension vectors.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np
import pytest

from include.index.sqlite_fts import SqliteFtsIndex
from include.settings import get_settings
from include.vectors import VectorSet
from plugins.engine.query_embedding import THREAD_PREFIX
from plugins.tributary_airflow.ui import create_app
from tests.index.helpers import make_write
from tests.support.airflow import write_sources
from tests.support.server import serve_asgi
from tests.ui.cdp import Browser, chromium_binary

SOURCE = "files:vec"
QUESTION = "who approves production access"
GOOD = b'{"data": [{"index": 0, "embedding": [1.0, 0.0, 0.0, 0.0]}]}'
ANSWERS = {
    "nan": b'{"data": [{"index": 0, "embedding": [NaN, 0.0, 0.0, 0.0]}]}',
    "huge_integer": b'{"data": [{"index": 0, "embedding": [1' + b"0" * 400 + b", 0.0, 0.0, 0.0]}]}",
    "nested": b'{"data": ' + b"[" * 20_000 + b"]" * 20_000 + b"}",
    "wrong_dimension": b'{"data": [{"index": 0, "embedding": [1.0, 0.0, 0.0]}]}',
}
FAILURES = {**{kind: 502 for kind in ANSWERS}, "reset": 503}


class _Endpoint(BaseHTTPRequestHandler):
    behaviour = "good"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        kind = type(self).behaviour
        if kind == "reset":  # RST instead of an answer (SO_LINGER 0, RFC 9293 s3.6)
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            return
        body = ANSWERS.get(kind, GOOD)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if kind != "trickle":
            self.wfile.write(body)
            return
        for byte in body:  # a byte every 0.2 s: the answer would take ~12 s
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:
                return
            time.sleep(0.2)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("search-failures")
    endpoint = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
    endpoint.daemon_threads = True
    threading.Thread(target=endpoint.serve_forever, daemon=True).start()
    conn = {"conn_type": "http", "host": "127.0.0.1", "port": endpoint.server_address[1], "schema": "http"}
    embedding = {"provider": "openai", "conn_id": "qemb", "model": "m", "dimensions": 4, "timeout_seconds": 3}
    entries = [{"kind": "files", "name": "vec", "options": {"root": str(tmp)}, "embedding": embedding}]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRIBUTARY_HOME", str(tmp / "home"))
        for var in ("TRIBUTARY_STATE_URL", "TRIBUTARY_INDEX_PATH", "TRIBUTARY_STAGING_DIR", "TRIBUTARY_REDIS_URL"):
            mp.delenv(var, raising=False)
        mp.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp / "s.yaml", entries)))
        mp.setenv("AIRFLOW_CONN_QEMB", json.dumps(conn))
        mp.setenv("TRIBUTARY_QUERY_EMBED_TIMEOUT_SECONDS", "5")
        _index_with_vectors(get_settings().index_path)
        with serve_asgi(create_app(require_auth=False)) as url:
            yield url
    endpoint.shutdown()


def _index_with_vectors(path: Path) -> None:
    write = make_write(SOURCE, "access.md", ["Production access is approved by your team lead.", "Salmon swim."])
    ids = [c.chunk_id for c in write.chunks]
    write.vectors = VectorSet("openai:m:4", 4, ids, np.eye(4, dtype=np.float32)[:2])
    index = SqliteFtsIndex(path, "tributary")
    assert index.upsert([write])[0].ok
    index.close()


def _search(url: str, mode: str, page: bool = False, timeout: float = 30) -> httpx.Response:
    path = "/search" if page else "/api/search"
    return httpx.get(f"{url}{path}", params={"q": QUESTION, "mode": mode, "source": SOURCE}, timeout=timeout)


def test_a_good_query_embedding_still_searches_by_vector(served: str) -> None:
    _Endpoint.behaviour = "good"
    resp = _search(served, "vector")
    assert resp.status_code == 200, resp.text
    assert "approved by your team lead" in resp.json()[0]["text"] and "degraded" not in resp.json()[0]


@pytest.mark.parametrize("kind", sorted(FAILURES))
def test_a_failing_query_embedding_is_502_or_503_and_hybrid_falls_back_to_bm25(served: str, kind: str) -> None:
    _Endpoint.behaviour = kind
    vector = _search(served, "vector")
    assert vector.status_code == FAILURES[kind], vector.text
    body = vector.json()
    assert set(body) == {"error", "detail"} and body["detail"].startswith("vector search unavailable")
    page = _search(served, "vector", page=True)
    assert page.status_code == FAILURES[kind] and 'id="search-error"' in page.text
    hybrid = _search(served, "hybrid")
    assert hybrid.status_code == 200 and hybrid.headers["X-Search-Degraded"] == "bm25_only"
    [top, *_] = hybrid.json()
    assert top["degraded"] == "bm25_only" and top["mode"] == "bm25" and "showing BM25" in top["note"]
    assert "approved by your team lead" in top["text"]
    assert "showing BM25" in _search(served, "hybrid", page=True).text


def test_chromium_shows_the_message_beside_the_form_and_the_fallback_note(served: str) -> None:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no chromium binary on this machine")
    _Endpoint.behaviour = "nan"
    browser = Browser(binary)
    try:
        query = f"q={quote(QUESTION)}&source={quote(SOURCE)}"
        browser.goto(f"{served}/search?{query}&mode=vector")
        error = browser.wait_for("document.querySelector('#search-error')?.innerText")
        assert error.startswith("vector search unavailable") and "form" in browser.eval(
            "document.querySelector('#search-error').previousElementSibling.tagName.toLowerCase()"
        )
        browser.goto(f"{served}/search?{query}&mode=hybrid")
        note = browser.wait_for("document.querySelector('#search-note-1')?.innerText")
        assert "showing BM25" in note and "approved by your team lead" in browser.text()
    finally:
        browser.close()


def _embedding_threads() -> int:
    return sum(t.name.startswith(THREAD_PREFIX) for t in threading.enumerate())


def test_45_searches_against_a_trickling_endpoint_leave_the_app_answering(served: str) -> None:
    _Endpoint.behaviour = "trickle"
    with ThreadPoolExecutor(max_workers=45) as clients:
        hung = [clients.submit(_search, served, "vector", False, 60) for _ in range(45)]
        time.sleep(0.5)  # the 45 are in the server by now
        runs = httpx.get(f"{served}/api/runs", timeout=20)
        bm25 = _search(served, "bm25", timeout=20)
        statuses = [f.result().status_code for f in hung]
    assert runs.status_code == 200 and bm25.status_code == 200 and bm25.json()
    assert set(statuses) <= {502, 503} and statuses.count(503) >= 45 - 8  # the bound's 8, the rest busy
    deadline = time.monotonic() + 30  # the trickled calls end by the embedder's own deadline
    while _embedding_threads() > 8 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _embedding_threads() <= 8
