"""The headless Chromium the renderer uses: one browser, launched on demand, recycled, killable.

Debian's ``/usr/bin/chromium`` driven by Playwright's Node driver (shipped inside the Python
wheel): nothing is downloaded at run time. Without the background-networking flags Chromium
phones home (component updates, safe browsing, sync), which on a closed network is a flood of
failing connections. ``--proxy-server`` points at a closed local port: every request the pages
make is fulfilled by the renderer from the crawler's own fetcher, so anything that slipped past
interception (a prefetch, a WebSocket) dies there instead of reaching the network.

A page that never yields (``while (true) {}``) blocks its renderer and with it every protocol
call, so a timeout cannot be handled politely: :meth:`BrowserPool.kill` SIGKILLs the driver and
every process under it (browser, renderers, GPU and utility processes), and the next page gets a
fresh browser. After ``recycle_after`` pages the browser is closed and replaced too, so one
long crawl does not grow a browser's memory without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CHROMIUM", "BrowserPool", "BrowserSettings", "Lease", "RenderUnavailable", "availability"]

log = logging.getLogger("tributary.web.render")

CHROMIUM = "/usr/bin/chromium"
_BASE_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-domain-reliability",
    "--dns-prefetch-disable",
    "--no-pings",
    "--metrics-recording-only",
    # nothing reaches the network but through the route handler (see the module docstring)
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
)
_CLOSE_TIMEOUT_S = 10.0


class RenderUnavailable(Exception):
    """No browser to render with (Chromium or Playwright missing, or the launch failed)."""


def availability(executable: str = CHROMIUM) -> str | None:
    """Why rendering cannot run here, or None when it can."""
    if not (os.path.isfile(executable) and os.access(executable, os.X_OK)) and not shutil.which(executable):
        return f"no Chromium at {executable} (install Debian's chromium package)"
    try:
        import playwright.async_api  # noqa: F401  # optional library: only a source that renders needs it
    except ImportError:
        return "the playwright package is not installed"
    return None


@dataclass(slots=True)
class BrowserSettings:
    executable: str = CHROMIUM
    recycle_after: int = 50  # pages per browser
    max_memory_mb: int = 512  # V8 heap of each renderer process
    extra_args: tuple[str, ...] = ()

    def args(self) -> list[str]:
        return [*_BASE_ARGS, f"--js-flags=--max-old-space-size={self.max_memory_mb}", *self.extra_args]


@dataclass(slots=True)
class _Generation:
    """One launched browser and the driver process it runs under."""

    playwright: Any
    browser: Any
    context: Any  # one per browser: a context costs ~0.5 s to make, a page far less
    driver_pid: int | None
    pages: int = 0
    active: int = 0
    dead: bool = False
    # pages back from a lease, reused by the next one (a new page and its routes cost ~0.3 s)
    idle: list[tuple[Any, dict[str, Any]]] = field(default_factory=list)


@dataclass(slots=True)
class BrowserPool:
    """Owns at most one browser at a time; ``lease()`` hands out a page of its one context."""

    settings: BrowserSettings = field(default_factory=BrowserSettings)
    launches: int = 0
    kills: int = 0
    _current: _Generation | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def _launch(self) -> _Generation:
        reason = availability(self.settings.executable)
        if reason:
            raise RenderUnavailable(reason)
        from playwright.async_api import async_playwright  # optional library, see availability()

        driver = await async_playwright().start()
        try:
            browser = await driver.chromium.launch(
                executable_path=self.settings.executable, args=self.settings.args(), headless=True
            )
        except Exception as exc:
            await driver.stop()
            raise RenderUnavailable(f"Chromium did not start: {exc}") from exc
        context = await browser.new_context(service_workers="block", accept_downloads=False)
        # A request of a page nobody leased (a popup) is refused; leased pages route their own.
        await context.route("**/*", lambda route, request: route.abort("blockedbyclient"))
        self.launches += 1
        log.info("render: launched %s %s", self.settings.executable, browser.version)
        return _Generation(driver, browser, context, _driver_pid(driver))

    async def _generation(self) -> _Generation:
        async with self._lock:
            gen = self._current
            if gen is not None and (gen.dead or gen.pages >= self.settings.recycle_after):
                self._current = None
                if not gen.dead and gen.active == 0:
                    await _close(gen)
                # else the last page out closes it (see lease())
                gen = None
            if gen is None:
                gen = self._current = await self._launch()
            gen.pages += 1
            gen.active += 1
            return gen

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[Lease]:
        """A page of the browser's context (new, or one a finished render gave back). The pages of
        one browser share cookies and storage (all of one source's site; the browser and its
        context go after ``recycle_after`` pages)."""
        gen = await self._generation()
        lease = None
        try:
            page, slot = gen.idle.pop() if gen.idle else (await gen.context.new_page(), {})
            lease = Lease(self, gen, gen.context, page, slot)
            yield lease
        finally:
            gen.active -= 1
            if lease is not None and not gen.dead:
                gen.idle.append((lease.page, lease.slot))  # a page whose render failed was killed
            if gen is not self._current and gen.active == 0 and not gen.dead:
                await _close(gen)

    def kill(self, gen: _Generation) -> None:
        """SIGKILL ``gen``'s browser with its driver and all their children (a page hung)."""
        if self._current is gen:
            self._current = None
        if gen.dead:
            return
        gen.dead = True
        self.kills += 1
        _kill_tree(gen.driver_pid)
        log.warning("render: killed the browser (driver pid %s) and its children", gen.driver_pid)

    async def close(self) -> None:
        gen, self._current = self._current, None
        if gen is not None and not gen.dead:
            await _close(gen)


@dataclass(slots=True)
class Lease:
    """One page of the pool's browser; ``kill()`` ends that browser (the page hung)."""

    pool: BrowserPool
    generation: _Generation
    context: Any
    page: Any
    # the renderer's per-page record: routes are set up once per page, and answer for whichever
    # render currently owns the page (``slot["state"]``)
    slot: dict[str, Any] = field(default_factory=dict)

    def kill(self) -> None:
        self.pool.kill(self.generation)


async def _close(gen: _Generation) -> None:
    gen.dead = True
    try:
        await asyncio.wait_for(gen.browser.close(), _CLOSE_TIMEOUT_S)
        await asyncio.wait_for(gen.playwright.stop(), _CLOSE_TIMEOUT_S)
    except Exception:  # a browser that will not close is killed instead
        _kill_tree(gen.driver_pid)


def _driver_pid(driver: Any) -> int | None:
    """The Node driver's pid: Playwright keeps its subprocess on the connection's transport."""
    try:
        return int(driver._impl_obj._connection._transport._proc.pid)
    except (AttributeError, TypeError, ValueError):
        return None


def _kill_tree(pid: int | None) -> None:
    if pid is None:
        return
    import psutil  # deferred: only a hung page gets here

    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=5)
