"""The live progress line of ``cli sync`` (issue 34 point 6): on a terminal it shows pages crawled
and batches through each stage with rates; it is silent with ``--json`` and when stderr is not a
terminal, so scripts and logs never see an escape code."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from plugins.engine.progress import TerminalProgress, progress_line, terminal_progress
from tests.support.airflow import write_sources
from tests.web.nginx import requires_nginx, serve_nginx

ERASE = "\r\x1b[K"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_line_counts_pages_batches_and_rates() -> None:
    line = progress_line(
        {"pages": 120, "fetched": 80},
        10,
        {"fetch": 4, "parse": 3, "chunk": 3, "embed": 2, "upsert": 2},
        {"chunks_embedded": 300, "upserted_items": 100},
        60.0,
    )
    assert line == (
        "crawled 120 pages (2.0/s), 80 fetched · batches 2/10: fetched 4, parsed 3, chunked 3, embedded 2, "
        "upserted 2 · 300 chunks embedded (5.0/s) · 100 items indexed (1.7/s) · 1:00"
    )


def test_partitions_add_up_and_close_erases_the_line() -> None:
    stream = _Tty()
    progress = TerminalProgress(stream, interval=0.0)
    progress.crawled({"pages": 3, "fetched": 3, "bytes": 10}, "a")
    progress.crawled({"pages": 4, "fetched": 1, "bytes": 10}, "b")
    assert stream.getvalue().rsplit(ERASE, 1)[1].startswith("crawled 7 pages")
    progress.step_done("discover", {"batches": 2})
    progress.step_done("upsert", {"items": 5})
    assert "batches 1/2: upserted 1 · 5 items indexed" in stream.getvalue().rsplit(ERASE, 1)[1]
    progress.close()
    assert stream.getvalue().endswith(ERASE)  # the summary that follows starts on a clean line


def test_no_line_off_a_terminal_or_with_json() -> None:
    assert terminal_progress(io.StringIO()) is None
    assert terminal_progress(_Tty(), enabled=False) is None
    assert isinstance(terminal_progress(_Tty()), TerminalProgress)


def _cli(args: list[str], env: dict[str, str], *, tty: bool) -> tuple[str, str]:
    """Run the CLI with stderr on a pseudo-terminal (``tty``) or a pipe; (stdout, stderr)."""
    command = [sys.executable, "-m", "plugins.engine.cli", *args]
    if not tty:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=True)
        return done.stdout, done.stderr
    leader, follower = pty.openpty()
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=follower, text=True) as proc:
        os.close(follower)
        err = bytearray()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # EIO: the child closed its end
                    break
                if not chunk:
                    break
                err += chunk
            elif proc.poll() is not None:
                break
        out = proc.stdout.read() if proc.stdout else ""
        assert proc.wait(timeout=60) == 0
    os.close(leader)
    return out, err.decode("utf-8", "replace")


@requires_nginx
def test_a_crawl_on_a_terminal_shows_progress_and_a_pipe_shows_none(tmp_path: Path, tributary_home: Path) -> None:
    root = tmp_path / "www"
    root.mkdir()
    links = " ".join(f'<a href="p{n}.html">p{n}</a>' for n in range(12))
    (root / "index.html").write_text(f"<html><body><h1>Home</h1>{links}</body></html>")
    for n in range(12):
        (root / f"p{n}.html").write_text(f"<html><body><h1>Page {n}</h1><p>River number {n}.</p></body></html>")
    with serve_nginx(root, tmp_path / "nginx") as server:
        options = {"seeds": [server.base + "/"], "delay_seconds": 0, "allowlist": ["127.0.0.1"], "retries": 0}
        sources = write_sources(
            tmp_path / "s.yaml", [{"kind": "web", "name": "rivers", "batch_size": 4, "options": options}]
        )
        env = {**os.environ, "TRIBUTARY_SOURCES": str(sources), "TERM": "xterm"}

        out, err = _cli(["sync", "web:rivers"], env, tty=True)
        lines = err.split(ERASE)
        assert any(line.startswith("crawled ") and " pages (" in line for line in lines), err
        assert any("batches 4/4: fetched 4" in line and "upserted 4" in line for line in lines), err
        assert "13 items indexed (" in err
        assert err.endswith(ERASE)  # erased before the summary
        assert out.startswith("web:rivers: success")

        out, err = _cli(["sync", "web:rivers", "--json"], env, tty=True)
        assert "\x1b" not in err and json.loads(out)["counts"]["unchanged"] == 13

        out, err = _cli(["sync", "web:rivers", "--full-resync"], env, tty=False)
        assert "\x1b" not in err and "\r" not in err
        assert out.startswith("web:rivers: success")


def test_progress_never_reaches_stdout(tmp_path: Path, tributary_home: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(5):
        (docs / f"d{n}.md").write_text(f"# Doc {n}\n\nLake number {n}.\n")
    sources = write_sources(
        tmp_path / "s.yaml", [{"kind": "files", "name": "lakes", "batch_size": 2, "options": {"root": str(docs)}}]
    )
    out, err = _cli(["sync", "files:lakes"], {**os.environ, "TRIBUTARY_SOURCES": str(sources)}, tty=True)
    assert "\x1b" not in out and "batches 3/3" in err  # files: no crawl, batches only
