"""What a rendered page may hand back: a bounded DOM, its navigations as links, escaped text.

Real Chromium (Debian's /usr/bin/chromium) through Playwright, pages served on 127.0.0.1.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from include.contract import ChangeKind
from include.untrusted_text import UNTRUSTED_TEXT_LIMIT, escape_untrusted
from plugins.connectors.web.render import availability
from plugins.connectors.web.render.renderer import RenderFailed
from tests.web.helpers import Run, make_connector, serve_directory
from tests.web.test_render import _parse

UNAVAILABLE = availability()
needs_browser = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"rendering unavailable: {UNAVAILABLE}")
MIB = 1024 * 1024

PLAIN = "<!doctype html><html><head><title>{name}</title></head><body><p>{text}</p>{script}</body></html>"
# ~400 bytes that grow the DOM by 1 MiB every 5 ms: ten steps, ten times the cap
GROWING = PLAIN.format(
    name="grows",
    text="a page that grows",
    script="<script>let n = 0; const t = setInterval(() => { const p = document.createElement('p');"
    " p.textContent = 'x'.repeat(1048576); document.body.appendChild(p); if (++n === 10) clearInterval(t);"
    " }, 5);</script>",
)
# 100 MiB of DOM in one task, before the load event
HUGE = PLAIN.format(
    name="huge",
    text="a page that is huge",
    script="<script>document.body.appendChild(document.createElement('p')).textContent ="
    " 'y'.repeat(100 * 1048576);</script>",
)
# Main-frame navigations while the page loads; each target is a page of the site.
NAVIGATIONS = {
    "location": "<script>location = '/target/?from=location';</script>",
    "form": "<form id=f action='/target/' method=get><input name=from value=form></form>"
    "<script>document.getElementById('f').submit();</script>",
    "click": "<a id=a href='/target/?from=click'>go</a><script>document.getElementById('a').click();</script>",
}
FAKE = "FAKE LOG LINE tributary.web ERROR everything is fine"
# A page that replaces the globals the renderer's own scripts would use, each throwing a message
# built to pass for a log line of its own; it also moves its URL somewhere very long.
HOSTILE_GLOBALS = PLAIN.format(
    name="hostile",
    text="hostile globals page text",
    script="<script>const boom = function () { throw new Error('x\\n" + FAKE + "\\r\\n\\u001b[2J'); };"
    " window.MutationObserver = boom; window.XMLSerializer = boom; JSON.stringify = boom; Array.from = boom;"
    " Object.defineProperty(Element.prototype, 'outerHTML', {get: boom});"
    " history.replaceState({}, '', '/hostile/' + 'z'.repeat(20000));</script>",
)


def _site(root: Path, pages: dict[str, str]) -> Path:
    for name, html in pages.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "index.html").write_text(html)
    (root / "robots.txt").write_text("User-agent: *\nAllow: /\n")
    return root


def _connector(base: str, seeds: list[str], **extra: Any) -> Any:
    options = {"use_sitemaps": False, "render": "always", "render_timeout_seconds": 20, "concurrency": 1, **extra}
    return make_connector(seeds=[f"{base}/{s}/" for s in seeds], **options)


@contextmanager
def peak_browser_pss() -> Iterator[list[int]]:
    """Samples the summed PSS of every process under this one (driver, browser, renderers): RSS
    would count Chromium's shared pages once per process (a plain page: 1.27 GB RSS, 0.52 GB PSS)."""
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        me = psutil.Process(os.getpid())
        while not done.wait(0.05):
            total = 0
            for child in me.children(recursive=True):
                try:
                    total += child.memory_full_info().pss
                except psutil.Error:
                    continue
            peak[0] = max(peak[0], total)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        done.set()
        thread.join(timeout=5)


def _staged_sizes(stage_dir: Path) -> list[int]:
    return [p.stat().st_size for p in stage_dir.rglob("*") if p.is_file()]


def _records(run: Run) -> list[dict[str, Any]]:
    return [*run.discovery.stats["failed"], *run.discovery.stats["skipped"]]


# ---------------------------------------------------------------------------- point 4: DOM size


@needs_browser
def test_a_page_that_grows_its_dom_past_the_cap_is_refused_typed(tmp_path: Path) -> None:
    site = _site(tmp_path / "site", {"grows": GROWING, "fine": PLAIN.format(name="fine", text="fine", script="")})
    with serve_directory(site) as base:
        connector = _connector(base, ["grows", "fine"], max_body_bytes=MIB, render_max_bytes=MIB)
        run = Run(connector, tmp_path / "stage")
    assert {c.item_key for c in run.changes} == {f"{base}/fine/"}  # the crawl went on
    (record,) = _records(run)
    assert record["item_key"] == f"{base}/grows/" and record["reason"] == "render:too_large", record
    assert max(_staged_sizes(tmp_path / "stage")) <= MIB


@needs_browser
def test_a_page_of_100_mib_is_refused_before_it_is_transferred(tmp_path: Path) -> None:
    site = _site(tmp_path / "site", {"huge": HUGE})
    with serve_directory(site) as base, peak_browser_pss() as peak:
        run = Run(_connector(base, ["huge"], max_body_bytes=MIB, render_max_bytes=MIB), tmp_path / "stage")
    assert run.changes == [] and _staged_sizes(tmp_path / "stage") == []
    (record,) = _records(run)
    assert record["reason"] == "render:too_large", record
    # emptied before layout (which took the renderer past 4.7 GB) and never transferred: ~0.1 GB
    # over a plain page's 0.52 GB
    assert peak[0] < 1536 * MIB, peak[0] // MIB


# ---------------------------------------------------------------------------- point 6: navigations


@needs_browser
def test_navigations_during_load_become_links_and_the_render_completes(tmp_path: Path) -> None:
    pages = {name: PLAIN.format(name=name, text=f"source page {name}", script=js) for name, js in NAVIGATIONS.items()}
    site = _site(tmp_path / "site", {**pages, "target": PLAIN.format(name="target", text="the target", script="")})
    with serve_directory(site) as base:
        run = Run(_connector(base, list(NAVIGATIONS)), tmp_path / "stage")
    assert _records(run) == []  # no render:timeout
    indexed = {c.item_key: c for c in run.changes if c.kind == ChangeKind.NEW}
    for name in NAVIGATIONS:
        source = indexed[f"{base}/{name}/"]
        assert source.metadata["rendered"] and source.metadata["render_refused"]["navigation"] >= 1
        assert f"source page {name}" in " ".join(b.text for b in _parse(source).blocks)
        target = indexed[f"{base}/target/?from={name}"]  # crawled as a page of its own
        assert "the target" in " ".join(b.text for b in _parse(target).blocks)


# ---------------------------------------------------------------------------- point 7: page text


@needs_browser
def test_a_page_replacing_globals_neither_breaks_the_render_nor_writes_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    site = _site(tmp_path / "site", {"hostile": HOSTILE_GLOBALS})
    with serve_directory(site) as base, caplog.at_level(logging.DEBUG):
        run = Run(_connector(base, ["hostile"]), tmp_path / "stage")
    lines = [line for record in caplog.records for line in record.getMessage().splitlines()]
    assert not [line for line in lines if line.lstrip().startswith("FAKE")]
    assert _records(run) == []  # the renderer's scripts run where the page's globals are not
    (change,) = run.changes
    assert "hostile globals page text" in " ".join(b.text for b in _parse(change).blocks)
    assert len(change.metadata["rendered_url"]) <= UNTRUSTED_TEXT_LIMIT  # the page made it 20,000 long
    assert all(len(line) < 2000 for line in lines)


def test_page_controlled_detail_of_a_render_failure_is_escaped_and_capped() -> None:
    detail = f"Error: x\n{FAKE}\r\n\x1b[2J\u2028" + "y" * 100_000
    failure = RenderFailed("browser", "rendering http://127.0.0.1/p/ failed", detail)
    message = str(failure)
    assert failure.kind == "browser" and message.startswith("rendering http://127.0.0.1/p/ failed: Error: x\\n")
    assert not any(ch in message for ch in "\n\r\x1b\u2028") and FAKE in message
    assert len(message) <= len("rendering http://127.0.0.1/p/ failed: ") + UNTRUSTED_TEXT_LIMIT


def test_escape_untrusted_keeps_printable_text_and_escapes_the_rest() -> None:
    assert escape_untrusted("文档 café ok") == "文档 café ok"
    assert escape_untrusted("a\nb\tc\x00\x7f\x9b\u202e") == "a\\nb\\tc\\x00\\x7f\\x9b\\u202e"
    capped = escape_untrusted("\n" * 1000, limit=11)
    assert capped == "\\n" * 5 + "…" and len(capped) <= 11
