"""Rendering JavaScript pages in headless Chromium, under the crawler's own rules.

``browser`` owns the browser process (launch, recycle, kill), ``guard`` decides which of a page's
requests may go out, ``renderer`` renders one page, ``shell`` is the ``render: auto`` test and
``step`` is what the crawler calls. :func:`make_render_step` wires them from a source's options.
"""

from __future__ import annotations

from collections.abc import Callable

from plugins.connectors.web.fetcher import Fetcher
from plugins.connectors.web.options import WebOptions
from plugins.connectors.web.render.browser import BrowserPool, BrowserSettings, availability
from plugins.connectors.web.render.guard import RequestGuard
from plugins.connectors.web.render.renderer import RenderedPage, Renderer, RenderLimits
from plugins.connectors.web.render.step import RenderStep
from plugins.connectors.web.robots import RobotsCache
from plugins.connectors.web.urls import Scope

__all__ = ["RenderStep", "RenderedPage", "Renderer", "availability", "make_render_step"]


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
        fetcher.guard,
        Scope(options.seeds, options.scope),
        robots if options.respect_robots else None,
        options.robots_agent,
    )
    limits = RenderLimits(
        timeout_seconds=options.render_timeout_seconds,
        max_requests=options.render_max_requests,
        max_bytes=options.render_max_bytes,
    )
    renderer = Renderer(pool, fetcher, guard, limits, hop_allowed)
    return RenderStep(options.render, renderer, pool, concurrency=options.render_concurrency)
