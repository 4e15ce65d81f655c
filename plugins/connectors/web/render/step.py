"""The crawler's render step: which fetched pages go through the browser, and what comes back.

``render: off`` builds no step (the crawler is what it was). ``always`` renders every HTML
page; ``auto`` renders a page the HTML parser would skip as a JavaScript shell
(:func:`.shell.looks_like_shell`), and remembers the page's directory (``/docs/`` of
``/docs/intro``): later pages under a remembered prefix are rendered without the test, since one
app serves them all; the crawler keeps these prefixes in its link cache, so the next crawl starts
with them. A 304 never reaches this step (nothing changed, nothing to render).
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from plugins.connectors.web.render.browser import BrowserPool, RenderUnavailable, availability
from plugins.connectors.web.render.renderer import RenderedPage, Renderer, RenderFailed
from plugins.connectors.web.render.shell import looks_like_shell

__all__ = ["RenderOutcome", "RenderStep"]

log = logging.getLogger("tributary.web")

_HTML_TYPES = ("text/html", "application/xhtml+xml")


# Failures that will be the same next run: the page is skipped, not retried and quarantined.
_REFUSALS = frozenset({"render_unavailable", "render_too_large"})


@dataclass(slots=True)
class RenderOutcome:
    """``page`` (its ``html``, the rendered DOM, is what is staged); or ``failure`` (kind, message)
    when the page could not be rendered: ``refused`` for a deliberate skip (``render_unavailable``,
    ``render_too_large``), else transient (``render_timeout``, ``render_script``,
    ``render_browser``). The message holds no page text but escaped and capped."""

    page: RenderedPage | None = None
    failure: tuple[str, str] | None = None

    @property
    def refused(self) -> bool:
        return self.failure is not None and self.failure[0] in _REFUSALS


def _prefix(url: str) -> str:
    parts = urlsplit(url)
    directory = posixpath.dirname(parts.path) if not parts.path.endswith("/") else parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{directory.rstrip('/')}/"


@dataclass(slots=True)
class RenderStep:
    mode: str  # "auto" | "always"
    renderer: Renderer
    pool: BrowserPool
    prefixes: set[str] = field(default_factory=set)
    unavailable: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    concurrency: int = 2
    _slots: asyncio.Semaphore | None = None

    def __post_init__(self) -> None:
        self.unavailable = availability(self.pool.settings.executable)

    def _wants(self, url: str, body: bytes, content_type: str) -> bool:
        if content_type.split(";")[0].strip().lower() not in _HTML_TYPES or not body:
            return False
        if self.mode == "always":
            return True
        if any(url.startswith(p) for p in self.prefixes):
            self._count("render_by_prefix")
            return True
        if looks_like_shell(body):
            self.prefixes.add(_prefix(url))
            return True
        return False

    async def apply(self, url: str, body: bytes, content_type: str) -> RenderOutcome | None:
        """None: stage the page as fetched. Otherwise the rendered page, or why there is none."""
        if not self._wants(url, body, content_type):
            return None
        if self.unavailable:
            self._count("render_unavailable")
            return RenderOutcome(failure=("render_unavailable", self.unavailable))
        if self._slots is None:  # made in the crawl's event loop
            self._slots = asyncio.Semaphore(self.concurrency)
        try:
            async with self._slots:
                page = await self.renderer.render(url, body, content_type)
        except RenderUnavailable as exc:
            self.unavailable = str(exc)
            self._count("render_unavailable")
            return RenderOutcome(failure=("render_unavailable", str(exc)))
        except RenderFailed as exc:
            self._count(f"render_{exc.kind}")
            log.warning("render %s failed (%s): %s", url, exc.kind, exc)
            return RenderOutcome(failure=(f"render_{exc.kind}", str(exc)))
        self._count("rendered")
        self._count("render_ms", page.ms)
        self._count("render_requests", page.requests)
        for reason, n in page.refused.items():
            self._count(f"render_refused_{reason}", n)
        log.info(
            "rendered %s in %d ms: %d requests, refused %s, final %s",
            url,
            page.ms,
            page.requests,
            page.refused or "none",
            page.final_url,
        )
        return RenderOutcome(page=page)

    def _count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    async def close(self) -> None:
        await self.pool.close()
