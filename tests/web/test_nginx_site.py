"""End to end against nginx: real ETag / Last-Modified / 304, through the real engine."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from include.config import SourceConfig
from include.index import open_index
from plugins.engine import run_pipeline
from tests.web.nginx import requires_nginx, serve_nginx

pytestmark = [requires_nginx, pytest.mark.slow]

PAGES = {
    "index.html": "<h1>Handbook</h1><p>Welcome to the handbook.</p>"
    '<a href="rivers.html">Rivers</a> <a href="guide/lakes.html">Lakes</a> <a href="guide/">Guide</a>',
    "rivers.html": "<h1>Rivers</h1><p>The Amberflow river carries silt to the delta.</p><a href='/'>home</a>",
    "guide/index.html": "<h1>Guide</h1><p>Guide overview page.</p><a href='lakes.html'>lakes</a>"
    "<a href='ponds.html'>ponds</a>",
    "guide/lakes.html": "<h1>Lakes</h1><p>Lake Morrow freezes every January.</p>",
    "guide/ponds.html": "<h1>Ponds</h1><p>Ponds host the heron colony.</p>",
}


def _write(root: Path, name: str, body: str, bump: float = 0.0) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<html><head><title>{name}</title></head><body><main>{body}</main></body></html>")
    if bump:
        # nginx's validators have one-second resolution; move the mtime on explicitly.
        stamp = time.time() + bump
        os.utime(path, (stamp, stamp))


def _search(source: SourceConfig, text: str) -> set[str]:
    index = open_index(source.index)
    try:
        return {hit.url or "" for hit in index.search(text, k=10, source=source.source_id)}
    finally:
        index.close()


def _pages(server) -> list:
    return [e for e in server.access_log() if e.path.endswith((".html", "/"))]


def test_nginx_incremental_cycle(tmp_path: Path, tributary_home: Path) -> None:
    root = tmp_path / "www"
    for name, body in PAGES.items():
        _write(root, name, body)
    with serve_nginx(root, tmp_path / "nginx") as server:
        base = server.base
        source = SourceConfig(
            kind="web",
            name="nginx_site",
            delete_after_missing_runs=2,
            mass_delete_threshold=0.5,  # one page of a five-page site is 20-25%
            options={"seeds": [base + "/"], "delay_seconds": 0, "allowlist": ["127.0.0.1"], "retries": 0},
        )
        # 1. First crawl: every page downloaded and indexed.
        first = run_pipeline(source)
        assert first.counts["new"] == 5 and first.counts["parsed"] == 5
        assert sorted(e.status for e in _pages(server)) == [200] * 5
        assert _search(source, "Amberflow silt") == {f"{base}/rivers.html"}
        first_bytes = sum(e.bytes_sent for e in server.access_log())
        server.clear_log()

        # 2. Nothing changed: nginx answers 304 to every page, nothing is parsed or written.
        second = run_pipeline(source)
        assert second.counts["unchanged"] == 5
        assert second.counts["fetched"] == second.counts["parsed"] == second.counts["chunked"] == 0
        log = _pages(server)
        assert sorted(e.status for e in log) == [304] * 5 and all(e.if_none_match for e in log)
        assert sum(e.bytes_sent for e in server.access_log()) < first_bytes
        server.clear_log()

        # 3. One page edited: only it is downloaded and re-indexed; the old text is gone.
        _write(root, "guide/lakes.html", "<h1>Lakes</h1><p>Lake Morrow now thaws in March.</p>", bump=5)
        third = run_pipeline(source)
        assert third.counts["changed"] == 1 and third.counts["parsed"] == 1 and third.counts["unchanged"] == 4
        assert sorted(e.status for e in _pages(server)) == [200, 304, 304, 304, 304]
        assert _search(source, "thaws March") == {f"{base}/guide/lakes.html"}
        assert _search(source, "freezes January") == set()
        server.clear_log()

        # 4. New bytes, same content (a build stamp in a comment): downloaded, not re-indexed.
        path = root / "rivers.html"
        path.write_text(path.read_text() + "<!-- build 2 -->")
        stamp = time.time() + 10
        os.utime(path, (stamp, stamp))
        fourth = run_pipeline(source)
        assert fourth.counts["fetched"] == 1 and fourth.counts["parsed"] == 1
        assert fourth.counts.get("chunks_written", 0) == 0 and fourth.counts["changed"] == 0

        # 5. A page removed from the server: 404 deletes it at once.
        (root / "guide" / "ponds.html").unlink()
        fifth = run_pipeline(source)
        assert fifth.counts["deleted"] == 1
        assert _search(source, "heron colony") == set()

        # 6. A page no longer linked (still on the server): deleted after two complete crawls.
        _write(
            root,
            "index.html",
            '<h1>Handbook</h1><a href="guide/lakes.html">Lakes</a> <a href="guide/">Guide</a>',
            bump=15,
        )
        sixth = run_pipeline(source)
        assert sixth.counts["deleted"] == 0 and sixth.counts["missing_not_deleted"] == 1
        seventh = run_pipeline(source)
        assert seventh.counts["deleted"] == 1
        assert _search(source, "Amberflow silt") == set()
        assert _search(source, "Morrow") == {f"{base}/guide/lakes.html"}
