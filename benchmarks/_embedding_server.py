"""A local OpenAI-compatible embeddings server for benchmarks: ``POST /v1/embeddings`` on
127.0.0.1, answering every request after a fixed latency with deterministic vectors.

Standard library only (``http.server``, one thread per connection, HTTP/1.1 keep-alive), so it
runs in the benchmark venv. A text's vector comes from its BLAKE2b digest (a seeded normal
draw, normalised) and is serialised once, then reused: the server spends its time sleeping, not
encoding, so what is measured is how the client overlaps the latency. It counts the requests it
was answering at once (:attr:`EmbeddingServer.most_in_flight`; ``GET /stats``, ``POST /reset``).

:class:`ServerProcess` runs it in a child process, as a real endpoint is: in the benchmark's own
process its threads would take the interpreter lock from the client being measured.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

__all__ = ["EmbeddingServer", "ServerProcess"]

_MAX_BODY = 64 << 20  # a benchmark's request; anything larger is refused


class EmbeddingServer:
    """``with EmbeddingServer(latency=0.05, dimensions=256) as server: server.port``."""

    def __init__(self, latency: float, dimensions: int) -> None:
        self.latency, self.dimensions = latency, dimensions
        self.requests = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()
        self._vectors: dict[str, str] = {}  # text -> its vector as JSON text
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="embedding-server", daemon=True)

    def __enter__(self) -> EmbeddingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def reset_counts(self) -> None:
        with self._lock:
            self.requests, self.most_in_flight = 0, 0

    def stats(self) -> bytes:
        with self._lock:
            return json.dumps({"requests": self.requests, "most_in_flight": self.most_in_flight}).encode()

    def vector_json(self, text: str) -> str:
        if (known := self._vectors.get(text)) is None:
            seed = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")
            vector = np.random.default_rng(seed).standard_normal(self.dimensions)
            known = self._vectors[text] = json.dumps([round(float(v), 7) for v in vector / np.linalg.norm(vector)])
        return known

    def answer(self, body: dict[str, Any]) -> bytes:
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = ",".join(
            f'{{"object":"embedding","index":{i},"embedding":{self.vector_json(t)}}}' for i, t in enumerate(inputs)
        )
        return f'{{"object":"list","model":{json.dumps(body["model"])},"data":[{data}]}}'.encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as an API endpoint would

            def do_GET(self) -> None:
                if self.path == "/stats":
                    self._reply(200, server.stats())
                else:
                    self._reply(404, b"{}")

            def do_POST(self) -> None:
                if self.path == "/reset":
                    server.reset_counts()
                    self._reply(200, b"{}")
                    return
                size = int(self.headers.get("content-length", "0"))
                if self.path != "/v1/embeddings" or not 0 < size <= _MAX_BODY:
                    self._reply(404 if self.path != "/v1/embeddings" else 413, b"{}")
                    return
                body = json.loads(self.rfile.read(size))
                with server._lock:
                    server.requests += 1
                    server.in_flight += 1
                    server.most_in_flight = max(server.most_in_flight, server.in_flight)
                try:
                    time.sleep(server.latency)
                    answer = server.answer(body)
                finally:
                    with server._lock:
                        server.in_flight -= 1
                self._reply(200, answer)

            def _reply(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler


def _serve(latency: float, dimensions: int, ports: multiprocessing.Queue[int]) -> None:
    with EmbeddingServer(latency, dimensions) as server:
        ports.put(server.port)
        server._thread.join()


class ServerProcess:
    """An :class:`EmbeddingServer` in a child process: ``port``, ``dimensions``, its counts."""

    def __init__(self, latency: float, dimensions: int) -> None:
        self.dimensions = dimensions
        context = multiprocessing.get_context("spawn")
        ports: multiprocessing.Queue[int] = context.Queue()
        self._process = context.Process(target=_serve, args=(latency, dimensions, ports), daemon=True)
        self._process.start()
        self.port = ports.get(timeout=60)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self._process.terminate()
        self._process.join(10)

    def _call(self, method: str, path: str) -> dict[str, int]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", method=method, data=b"" if method == "POST" else None
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            answer: dict[str, int] = json.loads(response.read())
        return answer

    def reset_counts(self) -> None:
        self._call("POST", "/reset")

    def counts(self) -> dict[str, int]:
        """``requests`` and ``most_in_flight`` since the last reset."""
        return self._call("GET", "/stats")
