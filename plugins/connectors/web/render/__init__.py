"""Rendering JavaScript pages in headless Chromium, under the crawler's own rules.

``browser`` owns the browser process (launch, recycle, kill), ``guard`` decides which of a page's
requests may go out, ``renderer`` renders one page, ``shell`` is the ``render: auto`` test and
``step`` is what the crawler calls. The package imports nothing of the crawler's: the crawler's
rules and fetcher are handed in as callables by ``plugins/connectors/web/rendering.py``.
"""

from __future__ import annotations

from plugins.connectors.web.render.browser import BrowserPool, BrowserSettings, availability
from plugins.connectors.web.render.guard import RequestGuard
from plugins.connectors.web.render.renderer import Fetched, RenderedPage, Renderer, RenderLimits
from plugins.connectors.web.render.step import RenderOutcome, RenderStep

__all__ = [
    "BrowserPool",
    "BrowserSettings",
    "Fetched",
    "RenderLimits",
    "RenderOutcome",
    "RenderStep",
    "RenderedPage",
    "Renderer",
    "RequestGuard",
    "availability",
]
