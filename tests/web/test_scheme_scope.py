"""Issue 19 point 1, the scope half: an https source's crawl never goes down to plain http on
its own host (not by a link, not by a redirect), while an http source upgraded to https stays
in scope and keeps its credentials. One loopback address serves http on port 80 and https on
443 (real TLS, a self-signed certificate the fetcher is told to trust), so ``http://host/`` and
``https://host/`` differ by scheme alone, as on a real site."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from plugins.connectors.web.auth import CredentialScope
from plugins.connectors.web.cache import LinkCache
from plugins.connectors.web.crawler import Crawler, CrawlResult
from plugins.connectors.web.fetcher import Fetcher, FetcherConfig
from plugins.connectors.web.options import WebOptions
from plugins.connectors.web.ssrf import AddressGuard
from tests.support.server import serve_asgi
from tests.web.fault_server import FaultSite
from tests.web.tls import SelfSigned, loopback_with_default_ports, self_signed

_TOKEN = "s3cret-token"


@dataclass
class DualSite:
    host: str
    plain: FaultSite  # http://host/ (port 80)
    secure: FaultSite  # https://host/ (port 443)
    cert: SelfSigned


@pytest.fixture
def dual_site(tmp_path: Path) -> Iterator[DualSite]:
    try:
        host = loopback_with_default_ports()
    except PermissionError:
        pytest.skip("binding ports 80 and 443 needs root or CAP_NET_BIND_SERVICE")
    cert = self_signed(host, tmp_path)
    site = DualSite(host, FaultSite(), FaultSite(), cert)
    tls = {"ssl_certfile": str(cert.certfile), "ssl_keyfile": str(cert.keyfile)}
    with serve_asgi(site.plain.app(), 80, host), serve_asgi(site.secure.app(), 443, host, **tls):
        yield site


def _crawl(site: DualSite, seeds: list[str], cache_path: Path) -> CrawlResult:
    """A crawl wired as ``WebConnector`` wires it, with a Connection header as credential and
    the test certificate trusted."""
    options = WebOptions.model_validate(
        {"seeds": seeds, "allowlist": [site.host], "delay_seconds": 0, "use_sitemaps": False, "retries": 0}
    )

    async def run() -> CrawlResult:
        config = FetcherConfig(
            user_agent=options.user_agent,
            retries=0,
            headers={"X-Token": _TOKEN},
            credential_scope=CredentialScope(options.seeds, options.scope),
            verify=site.cert.client_context(),
        )
        fetcher = Fetcher(config, AddressGuard(allow=options.allowlist))
        cache = LinkCache(cache_path)
        try:
            crawler = Crawler(options, fetcher, cache, {}, None)
            fetcher.delay_for = crawler.delay_for
            return await crawler.run()
        finally:
            cache.close()
            await fetcher.aclose()

    return asyncio.run(run())


def test_https_seed_never_goes_down_to_plain_http_on_its_own_host(dual_site: DualSite, tmp_path: Path) -> None:
    # Before: http://host/... has the same host key as the https seed, so the crawl took it in
    # scope, followed the link and the redirect and indexed both pages from the plain server.
    h = dual_site.host
    dual_site.secure.links = [f"http://{h}/gbk.html", f"https://{h}/ok.html"]
    result = _crawl(
        dual_site,
        [f"https://{h}/links.html", f"https://{h}/redirect?to=http://{h}/gzip.html"],
        tmp_path / "links.sqlite",
    )
    assert dual_site.plain.hits == []  # not a request in clear text, not even for robots.txt
    crawled = {f"https://{h}{path}" for path in ("/links.html", "/ok.html", "/", "/private/page.html")}
    assert {c.item_key for c in result.changes} == crawled  # /ok.html links home, home links on
    assert result.stats["skipped_downgrade"] == 1  # the http link, not followed
    assert result.stats["errors"] == {"redirect_downgrade": 1}
    [refused] = result.stats["skipped"]
    assert refused["reason"] == "fetch:redirect_downgrade"
    assert f"to http://{h}/gzip.html refused" in refused["error"]
    assert result.complete  # a refusal is an answer: the crawl still saw all it may see
    assert {hit.headers.get("x-token") for hit in dual_site.secure.hits} == {_TOKEN}


def test_http_seed_upgraded_to_https_stays_in_scope_with_its_credentials(dual_site: DualSite, tmp_path: Path) -> None:
    # The other direction is safe and common (http:// -> https://). It must keep working
    # once downgrades are refused, and the crawl then continues over https.
    h = dual_site.host
    result = _crawl(dual_site, [f"http://{h}/redirect?to=https://{h}/ok.html"], tmp_path / "links.sqlite")
    crawled = {f"https://{h}{path}" for path in ("/ok.html", "/", "/private/page.html")}
    assert {c.item_key for c in result.changes} == crawled
    assert result.stats["errors"] == {} and result.complete
    assert dual_site.plain.paths() == ["/robots.txt", f"/redirect?to=https://{h}/ok.html"]
    assert {hit.headers.get("x-token") for hit in dual_site.secure.hits} == {_TOKEN}
