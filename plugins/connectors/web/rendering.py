"""Wires the renderer (``render/``) to this crawl: its fetcher, SSRF guard, scope and robots.txt.

``render/`` knows nothing of the crawler; here its request guard gets the crawler's own checks
and its fetch the crawler's ``Fetcher`` (address pinning, credentials only to the source's
origins, the host's politeness slot, redirects checked by the crawl's hop rules, size cap).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from plugins.connectors.web.fetcher import Fetcher
from plugins.connectors.web.options import WebOptions
from plugins.connectors.web.render import (
    BrowserPool,
    BrowserSettings,
    Fetched,
    Renderer,
    RenderLimits,
    RenderStep,
    RequestGuard,
)
from plugins.connectors.web.robots import RobotsCache
from plugins.connectors.web.ssrf import AddressGuard, BlockedAddress
from plugins.connectors.web.urls import Scope, canonicalize

__all__ = ["make_render_step"]


def _address_check(guard: AddressGuard) -> Callable[[str], Awaitable[str | None]]:
    async def refusal(url: str) -> str | None:
        parts = urlsplit(url)
        try:
            await guard.resolve(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
        except BlockedAddress:
            return "blocked_address"
        except (OSError, ValueError):
            return "dns"
        return None

    return refusal


def _site_check(scope: Scope, robots: RobotsCache | None, agent: str) -> Callable[[str], Awaitable[str | None]]:
    async def refusal(url: str) -> str | None:
        try:
            canonical = canonicalize(url)
        except ValueError:
            return "bad_url"
        reason = scope.refusal(canonical)  # "out_of_scope" or "downgrade"
        if reason:
            return reason
        if robots is not None:
            rules = await robots.for_url(canonical)
            if not rules.allows(canonical, agent):
                return "robots"
        return None

    return refusal


def _fetch(fetcher: Fetcher, hop_allowed: Callable[[str], str | None]) -> Callable[[str], Awaitable[Fetched]]:
    async def fetch(url: str) -> Fetched:
        result = await fetcher.fetch(url, hop_allowed=hop_allowed)
        return Fetched(result.status, result.headers, result.body, result.error)

    return fetch


def make_render_step(
    options: WebOptions,
    fetcher: Fetcher,
    robots: RobotsCache | None,
    hop_allowed: Callable[[str], str | None],
) -> RenderStep | None:
    """The crawl's render step, or None for ``render: off``."""
    if options.render == "off":
        return None
    pool = BrowserPool(
        BrowserSettings(recycle_after=options.render_recycle_pages, max_memory_mb=options.render_max_memory_mb)
    )
    guard = RequestGuard(
        _address_check(fetcher.guard),
        _site_check(
            Scope(options.seeds, options.scope), robots if options.respect_robots else None, options.robots_agent
        ),
    )
    limits = RenderLimits(
        timeout_seconds=options.render_timeout_seconds,
        max_requests=options.render_max_requests,
        max_bytes=options.render_max_bytes,
        # the DOM is staged in place of the fetched body: neither cap may be passed
        max_dom_bytes=min(options.render_max_bytes, options.max_body_bytes),
    )
    renderer = Renderer(pool, _fetch(fetcher, hop_allowed), guard, limits, canonicalize)
    return RenderStep(options.render, renderer, pool, concurrency=options.render_concurrency)
