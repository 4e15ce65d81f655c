"""Source faults not covered elsewhere (issue 10, item 2): quarantine after N failing runs, and
transport faults the fault server does not produce — a body shorter than its Content-Length and
a connection reset — served by a raw socket server on 127.0.0.1.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from include.config import SourceConfig
from include.index import open_index
from include.stores import open_state_store
from plugins.engine import RunParams, run_pipeline
from tests.parsers.pdfgen import build_pdf

# --------------------------------------------------------------------------- quarantine


def _files_source(root: Path, **options: object) -> SourceConfig:
    return SourceConfig(kind="files", name="q", options={"root": str(root), **options}, batch_size=2)


def test_item_failing_n_runs_is_quarantined_reported_and_retried_only_on_request(
    tributary_home: Path, tmp_path: Path
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "good.md").write_text("# Good\n\nA healthy document.\n", encoding="utf-8")
    (root / "bad.pdf").write_bytes(b"%PDF-1.7\n not really a pdf")
    src = _files_source(root, quarantine_after=3)
    store = open_state_store()

    for n in (1, 2, 3):  # three failing runs in a row: recorded with the reason each time
        summary = run_pipeline(src)
        assert summary.counts["failed"] == 1
        bad = store.get_item(src.source_id, "bad.pdf")
        assert bad.failure_count == n and bad.last_error_reason.startswith("parse:") and not bad.indexed

    fourth = run_pipeline(src)  # quarantined: not fetched again, reported with its reason
    assert fourth.counts["failed"] == 0 and fourth.counts.get("fetched", 0) == 0
    skipped = [i for i in store.run_items(fourth.run_id) if i["item_key"] == "bad.pdf"]
    assert skipped and "quarantined after 3 failures" in str(skipped[0])
    assert store.get_item(src.source_id, "bad.pdf").failure_count == 3  # the streak stops growing

    # an explicit re-sync of that key retries it; once fixed it is indexed and the streak clears
    (root / "bad.pdf").write_bytes(build_pdf([[(20, 30, 12, "Repaired quarterly report")]]))
    assert run_pipeline(src).counts.get("fetched", 0) == 0  # a plain run still leaves it alone
    retried = run_pipeline(src, RunParams(only_keys=["bad.pdf"]))
    assert retried.counts["failed"] == 0 and retried.counts["new"] == 1
    fixed = store.get_item(src.source_id, "bad.pdf")
    assert fixed.indexed and fixed.failure_count == 0
    index = open_index(src.index)
    try:
        docs = {c.rsplit("-", 1)[0] for c in index.chunk_ids(source=src.source_id)}
        assert len(docs) == 2  # good.md and the repaired bad.pdf, nothing doubled
        assert index.search("quarterly", k=5, source=src.source_id)
    finally:
        index.close()
    store.close()


# --------------------------------------------------------------------------- transport faults

_PAGE = b"<!doctype html><html><head><title>%s</title></head><body><h1>%s</h1><p>%s</p>%s</body></html>"


def _response(body: bytes, length: int | None = None) -> bytes:
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (len(body) if length is None else length)
    )
    return head + body


class _RawServer:
    """A tiny HTTP/1.1 server on 127.0.0.1 that can lie about lengths and reset connections."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(32)
        self.port = self.sock.getsockname()[1]
        self.hits: dict[str, int] = {}
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            request = conn.recv(65536).decode("latin-1")
            path = request.split(" ", 2)[1] if " " in request else "/"
            self.hits[path] = self.hits.get(path, 0) + 1
            if path == "/robots.txt":
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            elif path == "/":
                links = b'<a href="/ok">ok</a> <a href="/short">short</a> <a href="/reset">reset</a>'
                conn.sendall(_response(_PAGE % (b"Home", b"Home", b"Start page of the fault site.", links)))
            elif path == "/ok":
                conn.sendall(_response(_PAGE % (b"OK", b"OK", b"A complete page about healthy transfers.", b"")))
            elif path == "/short":  # promises 5000 bytes, sends ~150, closes: a truncated body
                body = _PAGE % (b"Short", b"Short", b"TRUNCATEDMARKER this body is cut", b"")
                conn.sendall(_response(body, length=5000))
            elif path == "/reset":  # RST instead of an answer
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        finally:
            conn.close()

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture
def raw_server() -> Iterator[_RawServer]:
    server = _RawServer()
    yield server
    server.close()


def _web_source(base: str) -> SourceConfig:
    return SourceConfig(
        kind="web",
        name="faults",
        options={
            "seeds": [base + "/"],
            "delay_seconds": 0,
            "allowlist": ["127.0.0.1"],
            "use_sitemaps": False,
            "retries": 1,
            "backoff_seconds": 0,
            "timeout_seconds": 5,
        },
        batch_size=2,
    )


def test_truncated_body_and_connection_reset_are_failures_not_content(
    tributary_home: Path, raw_server: _RawServer
) -> None:
    src = _web_source(raw_server.base)
    first = run_pipeline(src)
    assert first.status == "partial" and first.counts["new"] == 2  # the run completes: / and /ok
    assert raw_server.hits["/short"] == 2 and raw_server.hits["/reset"] == 2  # one retry each
    stats = first.counts["source_stats"]
    assert stats["errors"] == {"network": 2} and stats["retries"] == 2
    # the crawl saw failures, so its listing is incomplete: nothing may be deleted on its account
    assert first.counts["listing_complete"] is False
    index = open_index(src.index)
    try:
        assert index.search("TRUNCATEDMARKER", k=5, source=src.source_id) == []  # a cut body is never indexed
        assert index.search("healthy transfers", k=5, source=src.source_id)
    finally:
        index.close()

    second = run_pipeline(src)  # retried next run
    assert raw_server.hits["/short"] == 4 and raw_server.hits["/reset"] == 4
    assert second.status == "partial" and second.counts["unchanged"] == 2 and second.counts["deleted"] == 0


def test_failed_web_pages_are_recorded_per_item_with_reason(tributary_home: Path, raw_server: _RawServer) -> None:
    first = run_pipeline(_web_source(raw_server.base))
    store = open_state_store()
    try:
        failed = {i["item_key"] for i in store.run_items(first.run_id) if i["action"] == "failed"}
    finally:
        store.close()
    assert {raw_server.base + "/short", raw_server.base + "/reset"} <= failed
