"""Render one fetched HTML page in the browser: ``render(url, html) -> RenderedPage``.

The page's own document is not fetched again: the crawler already did (conditional GET
included), so the browser's navigation to ``url`` is answered with those bytes. Every other
request the page makes is intercepted on the page (its iframes included; a popup is closed and
its requests refused by the browser context), checked by
:class:`~.guard.RequestGuard` and, if allowed, fetched with the crawler's ``Fetcher``; the browser
opens no connection of its own. Navigations of the main frame away from the page (``location =
...``, ``form.submit()``, ``a.click()``) are refused and the page stays; their targets are kept
as links for the frontier. The renderer's own scripts run in an isolated world
(:mod:`.probe`), so the page's globals cannot fool them. The page is done when its load event
has fired and neither requests nor DOM changes happened for ``settle_ms``; the DOM may not grow
past ``max_dom_bytes`` (a typed ``too_large``); the whole render is bounded by
``timeout_seconds``, after which the browser is killed (a script may never yield).

Playwright's ``goto(wait_until="load")`` is not used: it waits for the load of whatever
navigation came last, and a refused one never loads, so an inline ``location = ...`` hung the
render until its timeout. ``goto`` returns at commit and the probe reports the load itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from include.untrusted_text import escape_untrusted
from plugins.connectors.web.render.browser import BrowserPool, Lease
from plugins.connectors.web.render.guard import PageBudget, RequestGuard
from plugins.connectors.web.render.probe import PageProbe, ProbeError

__all__ = ["Fetch", "Fetched", "RenderFailed", "RenderLimits", "RenderedPage", "Renderer"]

_HEADERS_KEPT = ("content-type", "content-language", "last-modified")
_POLL_S = 0.025
# Navigation targets kept per page, and their longest URL (Chromium takes up to 2 MiB; the
# crawler's trap guard would refuse anything near that anyway).
_MAX_NAVIGATIONS = 100
_MAX_NAVIGATION_URL = 4096


@dataclass(slots=True)
class Fetched:
    """What the crawler's fetcher answered for one of the page's requests."""

    status: int = 0
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    error: str | None = None  # the fetcher's failure kind ("blocked_address", "timeout" ...)


# (url) -> the answer, fetched with the crawler's fetcher (SSRF pinning, credentials scope,
# politeness slot, redirects checked by the crawler's hop rules, size cap)
Fetch = Callable[[str], Awaitable[Fetched]]


class RenderFailed(Exception):
    """``kind`` is a fixed reason (``timeout``, ``too_large``, ``script``, ``browser``); the message
    is the renderer's own words, then ``detail`` (the browser's or the page's: escaped, capped)."""

    def __init__(self, kind: str, message: str, detail: object = None) -> None:
        super().__init__(message if detail is None else f"{message}: {escape_untrusted(detail)}")
        self.kind = kind


@dataclass(slots=True)
class RenderLimits:
    timeout_seconds: float = 30.0
    max_requests: int = 100
    max_bytes: int = 20 * 1024 * 1024  # the page's requests' response bytes
    max_dom_bytes: int = 20 * 1024 * 1024  # the rendered DOM, serialised (what is staged)
    settle_ms: int = 150


@dataclass(slots=True)
class RenderedPage:
    final_url: str  # the page may set it (pushState): escaped and capped like any page text
    html: bytes
    ms: int
    requests: int
    refused: dict[str, int] = field(default_factory=dict)
    bytes: int = 0
    # main-frame navigations the page tried (refused), for the frontier
    navigations: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _PageState:
    url: str
    html: bytes
    content_type: str
    budget: PageBudget
    served: bool = False
    inflight: int = 0
    last_activity: float = field(default_factory=time.monotonic)
    navigations: list[str] = field(default_factory=list)
    tasks: set[asyncio.Future[Any]] = field(default_factory=set)  # popup closes, dialog dismissals

    def later(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def touch(self) -> None:
        self.last_activity = time.monotonic()


class Renderer:
    def __init__(
        self,
        pool: BrowserPool,
        fetch: Fetch,
        guard: RequestGuard,
        limits: RenderLimits,
        canonical: Callable[[str], str] = lambda url: url,
    ) -> None:
        self.pool = pool
        self.fetch = fetch
        self.guard = guard
        self.limits = limits
        self.canonical = canonical  # the crawler's canonical URL form (raises ValueError)

    async def render(self, url: str, html: bytes, content_type: str = "text/html") -> RenderedPage:
        """Raises :class:`RenderFailed` (``timeout``, ``too_large``, ``script``, ``browser``) or
        ``RenderUnavailable``."""
        state = _PageState(
            url, html, content_type or "text/html", PageBudget(self.limits.max_requests, self.limits.max_bytes)
        )
        started = time.monotonic()
        async with self.pool.lease() as lease:
            try:
                async with asyncio.timeout(self.limits.timeout_seconds):
                    final_url, dom = await self._drive(lease, state)
            except TimeoutError:
                lease.kill()  # the page's script may never yield: no protocol call would return
                raise RenderFailed(
                    "timeout", f"rendering {url} took more than {self.limits.timeout_seconds} s"
                ) from None
            except RenderFailed:
                raise
            except ProbeError as exc:  # the renderer's script failed: the page is odd, the browser fine
                raise RenderFailed("script", f"rendering {url} failed", exc) from exc
            except Exception as exc:  # the browser crashed or was killed under this page
                lease.kill()  # "memory": the pool's watchdog killed the page's renderer (render/memory.py)
                kind = lease.failure_kind or "browser"
                raise RenderFailed(kind, f"rendering {url} failed", f"{type(exc).__name__}: {exc}") from exc
        b = state.budget
        return RenderedPage(
            escape_untrusted(final_url), dom, _ms(started), b.requests, dict(b.refused), b.bytes, state.navigations
        )

    async def _drive(self, lease: Lease, state: _PageState) -> tuple[str, bytes]:
        page, slot = lease.page, lease.slot
        slot["state"] = state
        if not slot.get("routed"):  # a page's handlers serve every render that reuses it
            await page.route("**/*", lambda route, request: self._route(route, request, page, slot["state"]))
            await page.route_web_socket("**/*", lambda ws: _refuse_socket(ws, slot["state"]))
            page.on("popup", lambda popup: _close_popup(popup, page, slot["state"]))
            page.on("dialog", lambda dialog: slot["state"].later(dialog.dismiss()))
            slot["routed"] = True
        probe = await PageProbe.attach(page, self.limits.max_dom_bytes)
        try:
            await page.goto(state.url, wait_until="commit")  # the load is the probe's to tell
            await self._settle(probe, state)
            final = page.url if page.url.startswith(("http://", "https://")) else state.url
            html, size = await probe.finish()
        finally:
            await probe.detach()
        # the length was counted in UTF-16 code units; the bytes staged are UTF-8 (never fewer).
        # A lone surrogate (legal in a JS string) becomes "?" rather than failing the encoding.
        dom = html.encode("utf-8", "replace") if html is not None else b""
        if html is None or len(dom) > self.limits.max_dom_bytes:
            raise self._too_large(state.url, size if html is None else len(dom))
        return final, dom

    def _too_large(self, url: str, size: int) -> RenderFailed:
        return RenderFailed(
            "too_large", f"the rendered DOM of {url} is over {self.limits.max_dom_bytes} bytes (at least {size})"
        )

    async def _settle(self, probe: PageProbe, state: _PageState) -> None:
        """Until the document has loaded, no request is in flight and the DOM has not changed for
        ``settle_ms``; refused as soon as the DOM is over the cap."""
        quiet = self.limits.settle_ms / 1000
        seen = None
        while True:
            snapshot = await probe.poll()
            if snapshot.too_large:
                raise self._too_large(state.url, snapshot.too_large)
            if (snapshot.ready, snapshot.mutations) != seen:
                seen = (snapshot.ready, snapshot.mutations)
                state.touch()
            if snapshot.ready and state.inflight == 0 and time.monotonic() - state.last_activity >= quiet:
                return
            await asyncio.sleep(_POLL_S)

    async def _route(self, route: Any, request: Any, page: Any, state: _PageState) -> None:
        state.inflight += 1
        state.touch()
        try:
            await self._answer(route, request, page, state)
        except Exception:  # the page or browser went away while answering: nothing to tell
            with contextlib.suppress(Exception):
                await route.abort("failed")
        finally:
            state.inflight -= 1
            state.touch()

    async def _answer(self, route: Any, request: Any, page: Any, state: _PageState) -> None:
        if request.is_navigation_request() and request.frame == page.main_frame:
            if not state.served and self._same(request.url, state.url):
                state.served = True
                await route.fulfill(status=200, headers={"content-type": state.content_type}, body=state.html)
                return
            state.budget.refuse("navigation")
            if len(state.navigations) < _MAX_NAVIGATIONS and len(request.url) <= _MAX_NAVIGATION_URL:
                state.navigations.append(request.url)
            await route.abort("aborted")  # "aborted" keeps the current document, no error page
            return
        reason = await self.guard.refusal(request.url, request.method, request.resource_type, state.budget)
        if reason:
            await route.abort("blockedbyclient")
            return
        await self._fetch_for(route, request.url, state)

    def _same(self, a: str, b: str) -> bool:
        try:
            return self.canonical(a) == self.canonical(b)
        except ValueError:
            return False

    async def _fetch_for(self, route: Any, url: str, state: _PageState) -> None:
        try:
            result = await self.fetch(self.canonical(url))
        except ValueError:
            result = Fetched(error="bad_url")
        budget = state.budget
        if result.error:
            budget.refuse(f"fetch_{result.error}")
            await route.abort(
                "blockedbyclient" if result.error.startswith(("blocked", "redirect", "bad_url")) else "failed"
            )
            return
        budget.bytes += len(result.body)
        if budget.bytes > budget.max_bytes:
            budget.refuse("max_bytes")
            await route.abort("blockedbyclient")
            return
        headers = {k: v for k, v in result.headers.items() if k in _HEADERS_KEPT}
        await route.fulfill(status=result.status, headers=headers, body=result.body)


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


async def _refuse_socket(ws: Any, state: _PageState) -> None:
    state.budget.refuse("websocket")
    with contextlib.suppress(Exception):
        await ws.close()


def _close_popup(popup: Any, page: Any, state: _PageState) -> None:
    if popup is page:
        return
    state.budget.refuse("popup")
    state.later(popup.close())
