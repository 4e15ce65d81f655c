"""``render: auto|always``: single-page apps rendered in headless Chromium under the crawler's rules.

Real Chromium (Debian's /usr/bin/chromium) through Playwright, real local servers on 127.0.0.1.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest

from include.config import SourceConfig
from include.contract import ChangeKind, ParseError
from include.staging import StagingArea
from include.stores import open_state_store
from plugins.connectors.web.render import availability
from plugins.engine import run_pipeline
from plugins.engine.lineage import run_report
from plugins.parsers.html import extract_html
from plugins.parsers.registry import ParseContext
from tests.web.helpers import Run, make_connector, serve_directory
from tests.web.spa import LOOP_SHELL, write_spa

UNAVAILABLE = availability()
needs_browser = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"rendering unavailable: {UNAVAILABLE}")
ROUTES = ["home", "intro", "guide", "api-ref"]


class _Counting(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).hits.append(self.path)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def off_scope_server() -> Iterator[tuple[str, list[str]]]:
    """Another 127.0.0.1 port: not the source's host, so no rendered page may reach it."""
    hits: list[str] = []
    handler = type("Handler", (_Counting,), {"hits": hits})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def _options(**extra: Any) -> dict[str, Any]:
    return {"use_sitemaps": False, "render_timeout_seconds": 20, **extra}


def _parse(change: Any) -> Any:
    data = StagingArea.read_bytes(change.staged_path)
    return extract_html(data, ParseContext(url=change.url, declared_type=change.metadata["content_type"]))


@needs_browser
def test_spa_pages_are_rendered_with_fetched_text_and_script_links(tmp_path: Path) -> None:
    with off_scope_server() as (elsewhere, hits):
        write_spa(
            tmp_path / "site",
            ROUTES,
            hostile=[
                "http://10.0.0.1/admin",
                "http://169.254.169.254/latest/meta-data/",
                f"{elsewhere}/steal",
                "/private/secret.json",  # same origin, disallowed by robots.txt
            ],
        )
        with serve_directory(tmp_path / "site") as base:
            run = Run(make_connector(seeds=[f"{base}/"], **_options(render="auto")), tmp_path / "stage")
    pages = {c.item_key: c for c in run.changes}
    # the links exist only after the script ran: the frontier got them from the rendered DOM
    assert set(pages) == {f"{base}/", *(f"{base}/{r}/" for r in ROUTES[1:])}
    for key, change in pages.items():
        assert change.kind == ChangeKind.NEW and change.metadata["rendered"] is True
        assert change.metadata["render_ms"] > 0 and change.metadata["rendered_url"].endswith("#rendered")
        refused = change.metadata["render_refused"]
        assert refused["blocked_address"] == 2 and refused["out_of_scope"] == 1 and refused["robots"] == 1, refused
        doc = _parse(change)
        route = key.rstrip("/").rsplit("/", 1)[-1] if key != f"{base}/" else "home"
        assert f"rendered text {route}-0" in " ".join(b.text for b in doc.blocks)
        assert "rendered" not in doc.metadata  # lineage takes it from the crawler, not the page
    assert hits == []  # the off-scope host never saw a request
    stats = run.discovery.stats["render"]
    assert stats["rendered"] == len(ROUTES) and stats["render_by_prefix"] >= 1


@needs_browser
def test_a_304_on_recrawl_means_no_render(tmp_path: Path) -> None:
    write_spa(tmp_path / "site", ROUTES[:2])
    with serve_directory(tmp_path / "site") as base:
        connector = make_connector(
            seeds=[f"{base}/"], cache_path=str(tmp_path / "cache.sqlite"), **_options(render="always")
        )
        first = Run(connector, tmp_path / "stage1")
        assert first.discovery.stats["render"]["rendered"] == 2
        second = Run(connector, tmp_path / "stage2", known=first.known())
    assert second.keys(ChangeKind.UNCHANGED) == {f"{base}/", f"{base}/intro/"}
    assert second.discovery.stats["render"].get("rendered", 0) == 0


@needs_browser
def test_auto_remembers_across_crawls_where_rendering_was_needed(tmp_path: Path) -> None:
    """The directory of a page found to be a shell is kept in the link cache: the next crawl
    renders its pages without fetching the shell through the test first."""
    write_spa(tmp_path / "site", ROUTES[:2])
    with serve_directory(tmp_path / "site") as base:
        connector = make_connector(
            seeds=[f"{base}/"], cache_path=str(tmp_path / "cache.sqlite"), **_options(render="auto", concurrency=1)
        )
        first = Run(connector, tmp_path / "stage1")
        second = Run(connector, tmp_path / "stage2")  # nothing known: every page fetched in full again
    assert first.discovery.stats["render"]["render_by_prefix"] == 1  # the seed was tested, its subpage was not
    assert second.discovery.stats["render"]["render_by_prefix"] == 2  # no page needed the test
    assert second.discovery.stats["render"]["rendered"] == 2


@needs_browser
def test_a_page_that_never_yields_is_killed_and_the_crawl_goes_on(tmp_path: Path) -> None:
    write_spa(tmp_path / "site", ROUTES[:2])
    (tmp_path / "site" / "loop").mkdir()
    (tmp_path / "site" / "loop" / "index.html").write_text(LOOP_SHELL)
    with serve_directory(tmp_path / "site") as base:
        connector = make_connector(
            seeds=[f"{base}/loop/", f"{base}/"], **_options(render="auto", render_timeout_seconds=4, concurrency=1)
        )
        run = Run(connector, tmp_path / "stage")
    failed = run.discovery.stats["failed"]
    assert [f["reason"] for f in failed] == ["render:timeout"] and failed[0]["item_key"] == f"{base}/loop/"
    assert {c.item_key for c in run.changes} == {f"{base}/", f"{base}/intro/"}
    assert all(c.metadata["rendered"] for c in run.changes)
    assert run.discovery.complete is False  # the hung page could not be expanded


def test_render_off_keeps_the_javascript_shell_skip(tmp_path: Path) -> None:
    write_spa(tmp_path / "site", ROUTES[:2])
    with serve_directory(tmp_path / "site") as base:
        run = Run(make_connector(seeds=[f"{base}/"], **_options()), tmp_path / "stage")
    (change,) = run.changes
    assert "rendered" not in change.metadata and "render" not in run.discovery.stats
    with pytest.raises(ParseError, match="javascript shell"):
        _parse(change)


def test_render_unavailable_skips_the_page_with_a_typed_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_spa(tmp_path / "site", ROUTES[:2])
    with serve_directory(tmp_path / "site") as base:
        connector = make_connector(seeds=[f"{base}/"], **_options(render="always"))
        monkeypatch.setattr(
            "plugins.connectors.web.render.step.availability", lambda executable: "no Chromium at /nowhere"
        )
        run = Run(connector, tmp_path / "stage")
    assert run.changes == []
    skipped = run.discovery.stats["skipped"]
    assert [s["reason"] for s in skipped] == ["render_unavailable"] and "no Chromium" in skipped[0]["error"]


@needs_browser
def test_run_pipeline_indexes_the_spa_text_and_lineage_says_rendered(tributary_home: Path, tmp_path: Path) -> None:
    write_spa(tmp_path / "site", ROUTES)
    with serve_directory(tmp_path / "site") as base:
        source = SourceConfig.model_validate(
            {
                "kind": "web",
                "name": "spa",
                "options": {
                    "seeds": [f"{base}/"],
                    "delay_seconds": 0,
                    "allowlist": ["127.0.0.1"],
                    **_options(render="auto"),
                },
            }
        )
        summary = run_pipeline(source)
    assert summary.counts["new"] == len(ROUTES) and summary.counts["failed"] == 0
    report = run_report(open_state_store(), summary.run_id)
    assert report is not None and report["warnings"] == {"rendered": len(ROUTES)}
    assert all(i["warnings"]["rendered"].startswith("chromium ") for i in report["items"])
