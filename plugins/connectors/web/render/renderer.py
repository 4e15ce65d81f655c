"""Render one fetched HTML page in the browser: ``render(url, html) -> RenderedPage``.

The page's own document is not fetched again: the crawler already did (conditional GET
included), so the browser's navigation to ``url`` is answered with those bytes. Every other
request the page makes is intercepted on the page (its iframes included; a popup is closed and
its requests refused by the browser context), checked by
:class:`~.guard.RequestGuard` and, if allowed, fetched with the crawler's ``Fetcher``; the browser
opens no connection of its own. Navigations of the main frame away from the page (``location =
...``) are refused, their targets kept as links for the frontier. The page is done when its load
event has fired and neither requests nor DOM changes happened for ``settle_ms``; the whole render
is bounded by ``timeout_seconds``, after which the browser is killed (a script may never yield).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from plugins.connectors.web.render.browser import BrowserPool, Lease
from plugins.connectors.web.render.guard import PageBudget, RequestGuard

__all__ = ["Fetch", "Fetched", "RenderFailed", "RenderLimits", "RenderedPage", "Renderer"]

# Links as the browser resolved them (against the URL the page routed itself to). That the page
# was rendered reaches lineage from the crawler's item metadata (``rendered``, ``render_ms``), not
# from the DOM, which the page's own script controls.
_FINISH_JS = """() => {
  for (const a of document.querySelectorAll('a[href], area[href]')) a.setAttribute('href', a.href);
  for (const f of document.querySelectorAll('iframe[src], frame[src]')) f.setAttribute('src', f.src);
}"""
_MUTATIONS_JS = """() => {
  if (window.__tributaryMutations === undefined) {
    window.__tributaryMutations = 0;
    new MutationObserver(() => { window.__tributaryMutations++; })
      .observe(document, {subtree: true, childList: true, characterData: true, attributes: true});
  }
  return window.__tributaryMutations;
}"""
_HEADERS_KEPT = ("content-type", "content-language", "last-modified")
_POLL_S = 0.025


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
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(slots=True)
class RenderLimits:
    timeout_seconds: float = 30.0
    max_requests: int = 100
    max_bytes: int = 20 * 1024 * 1024
    settle_ms: int = 150


@dataclass(slots=True)
class RenderedPage:
    final_url: str
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
        """Raises :class:`RenderFailed` (``timeout``, ``browser``) or ``RenderUnavailable``."""
        state = _PageState(
            url, html, content_type or "text/html", PageBudget(self.limits.max_requests, self.limits.max_bytes)
        )
        started = time.monotonic()
        async with self.pool.lease() as lease:
            try:
                async with asyncio.timeout(self.limits.timeout_seconds):
                    final_url, text = await self._drive(lease, state, started)
            except TimeoutError:
                lease.kill()  # the page's script may never yield: no protocol call would return
                raise RenderFailed(
                    "timeout", f"rendering {url} took more than {self.limits.timeout_seconds} s"
                ) from None
            except RenderFailed:
                raise
            except Exception as exc:  # the browser crashed or was killed under this page
                lease.kill()
                raise RenderFailed("browser", f"rendering {url} failed: {type(exc).__name__}: {exc}") from exc
        b = state.budget
        return RenderedPage(
            final_url, text.encode("utf-8"), _ms(started), b.requests, dict(b.refused), b.bytes, state.navigations
        )

    async def _drive(self, lease: Lease, state: _PageState, started: float) -> tuple[str, str]:
        page, slot = lease.page, lease.slot
        slot["state"] = state
        if not slot.get("routed"):  # a page's handlers serve every render that reuses it
            await page.route("**/*", lambda route, request: self._route(route, request, page, slot["state"]))
            await page.route_web_socket("**/*", lambda ws: _refuse_socket(ws, slot["state"]))
            page.on("popup", lambda popup: _close_popup(popup, page, slot["state"]))
            page.on("dialog", lambda dialog: slot["state"].later(dialog.dismiss()))
            slot["routed"] = True
        await page.goto(state.url, wait_until="load")
        await self._settle(page, state)
        final = page.url if page.url.startswith(("http://", "https://")) else state.url
        await page.evaluate(_FINISH_JS)
        return final, await page.content()

    async def _settle(self, page: Any, state: _PageState) -> None:
        """Until no request is in flight and the DOM has not changed for ``settle_ms``."""
        quiet = self.limits.settle_ms / 1000
        mutations = await page.evaluate(_MUTATIONS_JS)
        while True:
            await asyncio.sleep(_POLL_S)
            now_mutations = await page.evaluate(_MUTATIONS_JS)
            if now_mutations != mutations:
                mutations = now_mutations
                state.touch()
            if state.inflight == 0 and time.monotonic() - state.last_activity >= quiet:
                return

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
            if len(state.navigations) < 100:
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
