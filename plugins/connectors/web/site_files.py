"""What a site says about itself: robots.txt (RFC 9309) and its sitemaps, fetched for a crawl.

``SiteFiles`` owns the crawl's ``RobotsCache`` (loaded through the crawl's fetcher, with the
host's ``Crawl-delay``) and reads the seeds' sitemaps (``/sitemap.xml`` and the ``Sitemap:``
lines of robots.txt, then their child sitemaps) into page URLs for the frontier. Requests are
accounted by the crawler's ``account`` callback; the counters are the crawler's own.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

from plugins.connectors.web.fetcher import Fetcher, FetchResult
from plugins.connectors.web.options import WebOptions
from plugins.connectors.web.robots import RobotsCache, RobotsUnavailable
from plugins.connectors.web.sitemap import parse_sitemap
from plugins.connectors.web.urls import Scope, resolve_link

__all__ = ["SiteFiles"]

log = logging.getLogger("tributary.web")

_MAX_SITEMAPS = 50
# A robots.txt redirect we will not follow: a permanent answer, not a struggling server.
_REDIRECT_REFUSALS = frozenset({"bad_redirect", "too_many_redirects"})


class SiteFiles:
    def __init__(
        self,
        options: WebOptions,
        fetcher: Fetcher,
        scope: Scope,
        account: Callable[[FetchResult], None],
        counts: Counter[str],
        errors: Counter[str],
    ) -> None:
        self.o = options
        self.fetcher = fetcher
        self.scope = scope
        self.account = account
        self.counts = counts
        self.errors = errors
        self.robots = RobotsCache(self._load_robots, options.robots_agent)

    def delay_for(self, host: str) -> float:
        """The host's delay between requests: the source's, raised by its ``Crawl-delay``."""
        for origin, entry in self.robots.loaded().items():
            if urlsplit(origin).netloc == host and entry.crawl_delay is not None:
                return max(self.o.delay_seconds, entry.crawl_delay)
        return self.o.delay_seconds

    async def _load_robots(self, url: str) -> tuple[int, bytes, str | None]:
        # RFC 9309 lets robots.txt redirect anywhere (up to five hops); the address guard
        # still checks every hop, and credentials go only to the hops their scope admits.
        result = await self.fetcher.fetch(url, hop_allowed=lambda hop: None)
        self.account(result)
        if result.error in _REDIRECT_REFUSALS or (result.error == "blocked_address" and result.redirects):
            self.errors[f"robots_{result.error}"] += 1
            raise RobotsUnavailable(f"redirect not followed ({result.error}): {result.message}")
        if result.error:
            self.errors[f"robots_{result.error}" if result.error.startswith("http_") else result.error] += 1
            return 0 if not result.error.startswith("http_") else result.status, b"", result.error
        return result.status, result.body, None

    async def sitemap_pages(self, hop_allowed: Callable[[str], str | None]) -> AsyncIterator[str]:
        """Page URLs listed by the seeds' sitemaps (at most ``_MAX_SITEMAPS`` files read, each
        in scope; ``hop_allowed`` vets their redirects)."""
        origins = list(dict.fromkeys(f"{urlsplit(s).scheme}://{urlsplit(s).netloc}" for s in self.o.seeds))
        # (url, base): sitemap URLs should be absolute, but relative ones are common enough.
        pending: list[tuple[str, str]] = []
        for origin in origins:
            pending.append(("/sitemap.xml", origin + "/"))
            if self.o.respect_robots:
                robots = await self.robots.for_url(origin + "/")
                pending.extend((s, origin + "/robots.txt") for s in robots.sitemaps)
        done: set[str] = set()
        while pending and len(done) < _MAX_SITEMAPS:
            loc, base = pending.pop(0)
            url = resolve_link(base, loc)
            if url is None or url in done or not self.scope.in_scope(url):
                continue
            done.add(url)
            result = await self.fetcher.fetch(url, hop_allowed=hop_allowed)
            self.account(result)
            if result.status != 200 or result.error:
                continue
            try:
                pages, children = parse_sitemap(result.body, self.o.max_body_bytes)
            except ValueError as exc:
                self.counts["sitemap_invalid"] += 1
                log.info("sitemap %s unusable: %s", url, exc)
                continue
            self.counts["sitemaps"] += 1
            pending.extend((child.loc, url) for child in children)
            for entry in pages:
                link = resolve_link(url, entry.loc)
                if link:
                    yield link
