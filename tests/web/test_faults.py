"""The crawler against a misbehaving server: rate limits, errors, traps, redirects, SSRF,
robots.txt variants, encodings, compression, size limits and non-HTML documents."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from include.contract import ChangeKind, VersionEvidence
from tests.support.server import serve_asgi
from tests.web.fault_server import GBK_TEXT, SJIS_TEXT, FaultSite
from tests.web.helpers import Run, make_connector


@pytest.fixture
def fault_site() -> Iterator[tuple[FaultSite, str]]:
    site = FaultSite()
    with serve_asgi(site.app()) as base:
        yield site, base


def _serve(site: FaultSite):
    return serve_asgi(site.app())


def test_429_retry_after_is_honoured(fault_site, tributary_home: Path, tmp_path: Path) -> None:
    site, base = fault_site
    run = Run(make_connector(seeds=[f"{base}/ratelimited.html"], retries=2, use_sitemaps=False), tmp_path / "s")
    assert run.keys(ChangeKind.NEW) == {f"{base}/ratelimited.html"}
    first, second = site.times("/ratelimited.html")
    assert second - first >= 0.95  # Retry-After: 1
    assert run.discovery.stats["retries"] == 1
    assert run.discovery.stats["errors"] == {}


def test_503_then_200_and_persistent_500_never_deletes(fault_site, tributary_home: Path, tmp_path: Path) -> None:
    site, base = fault_site
    known = {f"{base}/broken.html": VersionEvidence(etag='"old"')}
    connector = make_connector(
        seeds=[f"{base}/flaky.html", f"{base}/broken.html"], retries=1, backoff_seconds=0.05, use_sitemaps=False
    )
    run = Run(connector, tmp_path / "s", known)
    assert run.keys(ChangeKind.NEW) == {f"{base}/flaky.html"}
    assert site.paths().count("/broken.html") == 2  # retried once, then given up
    assert run.discovery.stats["errors"] == {"http_500": 1}
    assert not run.keys(ChangeKind.DELETED)
    # The failing page stays alive; having never read its links, the crawl is not complete.
    assert f"{base}/broken.html" in run.discovery.all_keys
    assert run.discovery.complete is False


def test_slow_response_times_out(fault_site, tributary_home: Path, tmp_path: Path) -> None:
    site, base = fault_site
    site.slow_seconds = 2.0
    known = {f"{base}/slow.html": VersionEvidence(etag='"v1"')}
    connector = make_connector(seeds=[f"{base}/slow.html"], timeout_seconds=0.3, use_sitemaps=False)
    run = Run(connector, tmp_path / "s", known)
    assert run.discovery.stats["errors"] == {"timeout": 1}
    assert not run.changes
    assert run.discovery.all_keys == {f"{base}/slow.html"}  # a timeout never deletes


def test_calendar_trap_is_bounded_by_max_pages(fault_site, tributary_home: Path, tmp_path: Path) -> None:
    site, base = fault_site
    run = Run(make_connector(seeds=[f"{base}/calendar?month=0"], max_pages=25, use_sitemaps=False), tmp_path / "s")
    assert len(run.changes) == 25
    assert run.discovery.complete is False  # cut by max_pages: no deletions may follow
    assert run.discovery.stats["truncated"] is True
    assert sum(1 for p in site.paths() if p.startswith("/calendar")) == 25


def test_calendar_trap_with_max_depth_is_complete(fault_site, tributary_home: Path, tmp_path: Path) -> None:
    _, base = fault_site
    run = Run(make_connector(seeds=[f"{base}/calendar?month=0"], max_depth=3, use_sitemaps=False), tmp_path / "s")
    months = sorted(int(c.item_key.split("=")[1]) for c in run.changes)
    assert months == [-3, -2, -1, 0, 1, 2, 3]
    assert run.discovery.complete is True
    assert run.discovery.stats["skipped_depth"] == 2


def test_repeated_path_segments_are_cut(fault_site, tributary_home: Path, tmp_path: Path) -> None:
    _, base = fault_site
    run = Run(make_connector(seeds=[f"{base}/loop/"], use_sitemaps=False), tmp_path / "s")
    assert [c.item_key for c in run.changes] == [
        f"{base}/loop/",
        f"{base}/loop/a/",
        f"{base}/loop/a/a/",
        f"{base}/loop/a/a/a/",
    ]
    assert run.discovery.stats["skipped_trap"] == 1
    assert run.discovery.complete is True


def test_redirect_chains(fault_site, tributary_home: Path, tmp_path: Path) -> None:
    site, base = fault_site
    connector = make_connector(seeds=[f"{base}/hop/0?end=5", f"{base}/hop/0?end=6"], use_sitemaps=False)
    run = Run(connector, tmp_path / "s")
    # Five hops are followed; the page is filed under its final address.
    assert run.keys(ChangeKind.NEW) == {f"{base}/hop/5?end=5"}
    assert run.discovery.stats["errors"] == {"too_many_redirects": 1}
    # The sixth hop was refused, never requested.
    assert "/hop/6?end=6" not in site.paths()
    assert "/hop/5?end=6" in site.paths()


def test_redirects_into_private_networks_are_refused_without_connecting(
    fault_site, tributary_home: Path, tmp_path: Path
) -> None:
    site, base = fault_site
    # With the redirect targets outside the source's scope, the scope check refuses them.
    out_of_scope = Run(
        make_connector(seeds=[f"{base}/to-private", f"{base}/to-metadata"], use_sitemaps=False), tmp_path / "a"
    )
    assert out_of_scope.discovery.stats["errors"] == {"redirect_out_of_scope": 2}
    # Put the targets in scope (as seeds) so that only the address guard stands in the way.
    connector = make_connector(
        seeds=[f"{base}/to-private", f"{base}/to-metadata", "http://10.0.0.1/", "http://169.254.169.254/"],
        use_sitemaps=False,
        respect_robots=False,
        retries=2,
    )
    run = Run(connector, tmp_path / "b")
    # Refused before any connection attempt: a connect to 10.0.0.1 would have been a
    # timeout/connect error (and retried), not "blocked_address".
    assert run.discovery.stats["errors"] == {"blocked_address": 4}
    assert run.discovery.stats["retries"] == 0
    assert not run.changes
    assert site.paths().count("/to-private") == 2  # once per run, never retried


def test_ssrf_guard_blocks_loopback_unless_allowlisted(tributary_home: Path, tmp_path: Path) -> None:
    site = FaultSite()
    with _serve(site) as base:
        port = base.rsplit(":", 1)[1]
        blocked = Run(make_connector(seeds=[f"http://localhost:{port}/ok.html"], allowlist=[]), tmp_path / "a")
        assert blocked.discovery.stats["errors"]["blocked_address"] >= 1
        assert site.hits == []  # nothing reached the server
        allowed = Run(
            make_connector(seeds=[f"http://localhost:{port}/ok.html"], allow_private_networks=True, max_depth=0),
            tmp_path / "b",
        )
        assert allowed.keys(ChangeKind.NEW) == {f"http://localhost:{port}/ok.html"}
        assert site.hits[-1].headers["host"] == f"localhost:{port}"  # pinned address, original Host


@pytest.mark.parametrize(
    ("robots", "expect_new", "complete"),
    [
        (404, {"/", "/ok.html", "/private/page.html"}, True),
        (500, set(), False),
        ("User-agent: *\nDisallow: /private/\n", {"/", "/ok.html"}, True),
        ("User-agent: Tributary\nDisallow: /\n\nUser-agent: *\nAllow: /\n", set(), True),
        ("User-agent: *\nDisallow: /*.html$\nAllow: /ok.html$\n", {"/", "/ok.html"}, True),
    ],
    ids=["404-allow-all", "500-disallow-all", "disallow-dir", "agent-group", "wildcards-longest-match"],
)
def test_robots_txt(robots, expect_new, complete, tributary_home: Path, tmp_path: Path) -> None:
    site = FaultSite(robots=robots)
    with _serve(site) as base:
        known = {f"{base}/": VersionEvidence(etag='"x"')} if robots == 500 else {}
        run = Run(make_connector(seeds=[f"{base}/"], use_sitemaps=False), tmp_path / "s", known)
        assert {c.item_key.removeprefix(base) for c in run.changes if c.kind == ChangeKind.NEW} == expect_new
        assert run.discovery.complete is complete
        if robots == 500:
            assert site.paths() == ["/robots.txt"]  # disallow all: nothing else requested
            assert run.discovery.all_keys == {f"{base}/"}  # known page kept alive, not deleted
            assert run.discovery.stats["skipped_robots_unreachable"] == 1
        if robots not in (404, 500):
            assert run.discovery.stats.get("skipped_robots", 0) >= 1
            assert "/private/page.html" not in site.paths()


def test_robots_crawl_delay_spaces_requests(tributary_home: Path, tmp_path: Path) -> None:
    site = FaultSite(robots="User-agent: *\nCrawl-delay: 0.4\n")
    with _serve(site) as base:
        Run(make_connector(seeds=[f"{base}/"], use_sitemaps=False, concurrency=4), tmp_path / "s")
    pages = [h.at for h in site.hits if h.path != "/robots.txt"]
    assert len(pages) == 3
    gaps = [b - a for a, b in itertools.pairwise(pages)]
    assert min(gaps) >= 0.35


def test_encodings_and_gzip(fault_site, tributary_home: Path, tmp_path: Path) -> None:
    from plugins.parsers.registry import parse_document

    _, base = fault_site
    connector = make_connector(
        seeds=[f"{base}/gbk.html", f"{base}/sjis.html", f"{base}/gzip.html"], use_sitemaps=False, max_depth=0
    )
    run = Run(connector, tmp_path / "s")
    by_key = {c.item_key: c for c in run.changes}
    # The GBK page's non-ASCII link was read and percent-encoded canonically.
    assert run.discovery.stats["skipped_depth"] == 1
    gbk = connector.fetch(by_key[f"{base}/gbk.html"])
    assert gbk.media_type == "text/html; charset=gbk"
    assert GBK_TEXT in parse_document(gbk).text
    sjis = connector.fetch(by_key[f"{base}/sjis.html"])
    assert SJIS_TEXT in parse_document(sjis).text
    gz = connector.fetch(by_key[f"{base}/gzip.html"])
    assert b"Compressed page body." in gz.data  # decoded transparently
    assert run.discovery.stats["bytes"] < run.discovery.stats["bytes_body"]  # wire bytes stayed compressed


def test_gbk_link_is_canonicalised(fault_site, tributary_home: Path, tmp_path: Path) -> None:
    site, base = fault_site
    run = Run(make_connector(seeds=[f"{base}/gbk.html"], use_sitemaps=False), tmp_path / "s")
    assert "/%E9%93%BE%E6%8E%A5.html" in site.paths() or "/链接.html" in site.paths()
    assert run.discovery.stats["errors"] == {"http_404": 1}


def test_body_size_limit(fault_site, tributary_home: Path, tmp_path: Path) -> None:
    _, base = fault_site
    connector = make_connector(
        seeds=[f"{base}/big.html", f"{base}/big-stream.html", f"{base}/ok.html"],
        max_body_bytes=100_000,
        use_sitemaps=False,
        max_depth=0,
    )
    run = Run(connector, tmp_path / "s")
    assert run.keys(ChangeKind.NEW) == {f"{base}/ok.html"}
    assert run.discovery.stats["errors"] == {"too_large": 2}


def test_documents_other_than_html(tributary_home: Path, tmp_path: Path) -> None:
    site = FaultSite()
    app = site.app()
    from fastapi.responses import HTMLResponse

    @app.get("/docs.html")
    async def docs() -> HTMLResponse:
        return HTMLResponse(
            '<html><body><a href="/files/report.pdf">pdf</a> <a href="/files/notes.docx">docx</a>'
            '<a href="/files/setup-download">bin</a> <a href="/img/logo.png">png</a></body></html>'
        )

    with serve_asgi(app) as base:
        connector = make_connector(seeds=[f"{base}/docs.html"], use_sitemaps=False)
        run = Run(connector, tmp_path / "s")
        keys = run.keys(ChangeKind.NEW)
        assert keys == {f"{base}/docs.html", f"{base}/files/report.pdf", f"{base}/files/notes.docx"}
        pdf = connector.fetch(next(c for c in run.changes if c.item_key.endswith(".pdf")))
        assert pdf.data.startswith(b"%PDF") and pdf.file_name == "report.pdf"
        assert pdf.media_type == "application/pdf"
        docx = connector.fetch(next(c for c in run.changes if c.item_key.endswith(".docx")))
        assert docx.file_name == "notes.docx" and docx.data.startswith(b"PK")
        # Handed to the parser registry, which picks the parser by sniffed type.
        from plugins.parsers.registry import parse_document

        assert "Tributary DOCX sample" in parse_document(docx).text
        assert "Tributary PDF sample" in parse_document(pdf).text
        # The binary was refused on its Content-Type (body not read); the image never requested.
        assert run.discovery.stats["skipped_type"] == 2
        assert "/img/logo.png" not in site.paths()


def test_login_headers_and_cookies_from_airflow_connection(
    fault_site, tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from include.config import SourceConfig
    from plugins.connectors.web.connector import WebConnector

    site, base = fault_site
    conn = {
        "conn_type": "http",
        "extra": {"headers": {"X-Token": "s3cret-token"}, "cookies": {"sid": "abc123"}},
    }
    monkeypatch.setenv("AIRFLOW_CONN_WEB_MEMBERS", json.dumps(conn))
    source = SourceConfig(
        kind="web",
        name="members",
        conn_id="web_members",
        options={
            "seeds": [f"{base}/login-only.html"],
            "allowlist": ["127.0.0.1"],
            "delay_seconds": 0,
            "use_sitemaps": False,
        },
    )
    with WebConnector(source) as connector:
        run = Run(connector, tmp_path / "s")
    assert run.keys(ChangeKind.NEW) == {f"{base}/login-only.html"}
    assert site.hits[-1].headers["x-token"] == "s3cret-token"
    assert "Tributary" in site.hits[-1].headers["user-agent"]


def test_server_error_on_a_hub_page_uses_cached_links(tributary_home: Path, tmp_path: Path) -> None:
    """A 5xx page keeps its document and, through the link cache, the pages behind it."""
    from fastapi import FastAPI
    from fastapi.responses import HTMLResponse, PlainTextResponse

    state = {"hub_broken": False}
    app = FastAPI()

    @app.get("/")
    async def home() -> HTMLResponse:
        return HTMLResponse('<html><body><a href="/hub.html">hub</a></body></html>')

    @app.get("/hub.html")
    async def hub():  # type: ignore[no-untyped-def]
        if state["hub_broken"]:
            return PlainTextResponse("down", status_code=502)
        return HTMLResponse('<html><body><a href="/leaf.html">leaf</a></body></html>')

    @app.get("/leaf.html")
    async def leaf() -> HTMLResponse:
        return HTMLResponse("<html><body><p>Leaf</p></body></html>")

    with serve_asgi(app) as base:
        connector = make_connector(seeds=[base + "/"], use_sitemaps=False)
        first = Run(connector, tmp_path / "a")
        assert first.discovery.all_keys == {f"{base}/", f"{base}/hub.html", f"{base}/leaf.html"}
        state["hub_broken"] = True
        second = Run(connector, tmp_path / "b", first.known())
    assert second.discovery.stats["errors"] == {"http_502": 1}
    assert second.discovery.all_keys == first.discovery.all_keys  # nothing looks missing
    assert second.discovery.complete is True  # the hub's links came from the cache
    assert not second.keys(ChangeKind.DELETED)


def test_progress_is_logged(fault_site, tributary_home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _, base = fault_site
    caplog.set_level("INFO", logger="tributary.web")
    Run(
        make_connector(seeds=[f"{base}/calendar?month=0"], max_depth=2, log_every=2, use_sitemaps=False), tmp_path / "s"
    )
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("crawl progress")]
    final = [r.getMessage() for r in caplog.records if r.getMessage().startswith("crawl finished")]
    assert len(progress) == 2  # 5 pages, a line every 2
    assert len(final) == 1 and "fetched=5" in final[0] and "skipped={'skipped_depth': 2}" in final[0]


def test_redirect_into_robots_disallowed_path_is_refused(tributary_home: Path, tmp_path: Path) -> None:
    from fastapi.responses import RedirectResponse

    site = FaultSite(robots="User-agent: *\nDisallow: /private/\n")
    app = site.app()

    @app.get("/moved.html")
    async def moved() -> RedirectResponse:
        return RedirectResponse("/private/page.html", status_code=301)

    with serve_asgi(app) as base:
        run = Run(make_connector(seeds=[f"{base}/moved.html"], use_sitemaps=False), tmp_path / "s")
    assert run.discovery.stats["errors"] == {"redirect_disallowed_by_robots": 1}
    assert "/private/page.html" not in site.paths()
    assert not run.changes
