"""The headless Chromium the renderer uses: one browser, launched on demand, recycled, killable.

Debian's ``/usr/bin/chromium``, launched by :mod:`.launch` in a process group of its own and
driven over CDP by Playwright's Node driver (shipped inside the Python wheel): nothing is
downloaded at run time, and :meth:`BrowserPool.kill` ends the browser with every process under
it (``killpg``), which is what a page that never yields (``while (true) {}``) needs: its renderer
blocks every protocol call, so a timeout cannot be handled politely.

What may leave the browser: nothing but what the renderer fulfils from the crawler's fetcher.
``--proxy-server`` points at a closed local port, so a request that slipped past interception
dies there. WebRTC opens UDP sockets of its own, outside any proxy, and resolves STUN/TURN host
names itself (a DNS channel out): ``--webrtc-ip-handling-policy=disable_non_proxied_udp`` leaves
it only the (dead) proxy, and an init script removes ``RTCPeerConnection`` from every frame
(rendering docs needs no WebRTC). SharedWorkers run outside the page and its request
interception: ``--disable-blink-features=SharedWorker`` removes them. Chromium's own background
requests (component updates, network time, optimization hints, sign-in probes, autofill) are
switched off by the flags below, as Playwright's own launcher does.

Every render gets a fresh browser context with one page, closed afterwards: a page's scripts
(a loop started after load, ``pagehide``/``beforeunload`` handlers) go with its renderer process
and cannot break the next page; contexts never share a renderer, and cookies and storage do
not pass from one page to the next. After ``recycle_after`` pages the browser is replaced, and
:mod:`.memory` bounds the resident memory of its renderers and of its whole process tree.
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

from plugins.connectors.web.render.launch import ChromiumProcess, LaunchFailed, launch_chromium
from plugins.connectors.web.render.memory import MemoryLimits, MemoryWatchdog

__all__ = ["CHROMIUM", "BrowserPool", "BrowserSettings", "Lease", "RenderUnavailable", "availability"]

log = logging.getLogger("tributary.web.render")

CHROMIUM = "/usr/bin/chromium"
# Playwright's list (chromiumSwitches in its driver), less what concerns only its own launcher
_DISABLED_FEATURES = (
    "AcceptCHFrame",
    "AimEnabled",
    "AutofillServerCommunication",
    "AvoidCorsURLLoaderRestartOnRedirect",  # else preflighted redirects abort under interception
    "AvoidUnnecessaryBeforeUnloadCheckSync",
    "CertificateTransparencyComponentUpdater",
    "DestroyProfileOnBrowserClose",
    "HttpsFirstBalancedModeAutoEnable",
    "HttpsUpgrades",
    "InterestFeedContentSuggestions",
    "LensOverlay",
    "MediaRouter",
    "NetworkTimeServiceQuerying",
    "OptimizationHints",
    "PaintHolding",
    "PreconnectToSearch",
    "ThirdPartyStoragePartitioning",
    "Translate",
)
# Hosts of Chromium's own services that no flag switches off (Chromium 156 asks
# update.googleapis.com for the on-device model manifest, ceofaddefefcbblgcgnibnonglccbfja, despite
# --disable-component-update). A page's requests to them are intercepted like any other.
_OWN_SERVICE_HOSTS = ("*.googleapis.com", "*.google.com", "*.gvt1.com", "*.gstatic.com")
_BASE_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-field-trial-config",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-component-extensions-with-background-pages",
    "--disable-client-side-phishing-detection",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-domain-reliability",
    "--disable-breakpad",
    "--disable-back-forward-cache",
    "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows",
    "--disable-renderer-backgrounding",
    "--disable-hang-monitor",
    "--disable-search-engine-choice-screen",
    "--no-service-autorun",
    "--password-store=basic",
    "--dns-prefetch-disable",
    "--no-pings",
    "--metrics-recording-only",
    "--mute-audio",
    f"--disable-features={','.join(_DISABLED_FEATURES)}",
    "--enable-features=SkipListAccountsWithoutGaiaCookies",
    "--disable-blink-features=SharedWorker",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    # nothing reaches the network but through the route handler (see the module docstring)
    "--proxy-server=http://127.0.0.1:9",
    f"--proxy-bypass-list=<-loopback>;{';'.join(_OWN_SERVICE_HOSTS)}",
    # Chromium's own services go direct and resolve nowhere: no socket, no DNS query
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
)
# Runs before the page's scripts in every frame of a context: no peer connections at all.
_NO_WEBRTC_JS = """(() => {
  for (const name of ['RTCPeerConnection', 'webkitRTCPeerConnection', 'RTCDataChannel',
                      'RTCIceTransport', 'RTCSctpTransport', 'RTCDtlsTransport']) {
    try { delete globalThis[name]; } catch (e) {}
  }
})();"""
_STARTUP_TIMEOUT_S = 20.0
_OPEN_TIMEOUT_S = 10.0
_CLOSE_TIMEOUT_S = 10.0
_OPEN_ATTEMPTS = 2
# Resident memory (RSS, shared pages counted in every process) of a renderer with an empty page
# and of an idle browser's whole tree, measured on Chromium 156: up to 156 and ~1,200 MiB. The
# bounds add the pages' allowance to these.
_RENDERER_BASE_MB = 192
_BROWSER_BASE_MB = 1280


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
    max_memory_mb: int = 512  # one page: its V8 heap, and its renderer's memory beyond an empty one's
    max_pages_in_memory: int = 4  # the whole tree's bound: the browser plus this many full pages
    memory_poll_ms: int = 100
    extra_args: tuple[str, ...] = ()

    def args(self) -> list[str]:
        return [*_BASE_ARGS, f"--js-flags=--max-old-space-size={self.max_memory_mb}", *self.extra_args]

    def memory_limits(self) -> MemoryLimits:
        renderer_mb = self.max_memory_mb + _RENDERER_BASE_MB
        return MemoryLimits(renderer_mb, _BROWSER_BASE_MB + self.max_pages_in_memory * renderer_mb, self.memory_poll_ms)


@dataclass(slots=True)
class _Generation:
    """One launched browser, Playwright's CDP handle on it, and its memory watchdog."""

    process: ChromiumProcess
    browser: Any
    watchdog: MemoryWatchdog
    pages: int = 0
    active: int = 0
    killed: bool = False

    @property
    def dead(self) -> bool:
        return self.killed or self.watchdog.tree_killed or self.process.popen.poll() is not None


@dataclass(slots=True)
class BrowserPool:
    """Owns at most one browser at a time; ``lease()`` hands out a fresh context with one page."""

    settings: BrowserSettings = field(default_factory=BrowserSettings)
    launches: int = 0
    kills: int = 0
    memory_kills: int = 0
    tags: list[str] = field(default_factory=list)  # every launch's TRIBUTARY_BROWSER tag
    _driver: Any = None  # Playwright, started with the first browser, stopped by close()
    _current: _Generation | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _tasks: set[asyncio.Future[Any]] = field(default_factory=set)  # context closes after a crash

    async def _launch(self) -> _Generation:
        reason = availability(self.settings.executable)
        if reason:
            raise RenderUnavailable(reason)
        if self._driver is None:
            from playwright.async_api import async_playwright  # optional library, see availability()

            self._driver = await async_playwright().start()
        try:
            process = await launch_chromium(self.settings.executable, self.settings.args(), _STARTUP_TIMEOUT_S)
        except LaunchFailed as exc:
            raise RenderUnavailable(f"Chromium did not start: {exc}") from exc
        self.tags.append(process.tag)
        try:
            browser = await asyncio.wait_for(self._driver.chromium.connect_over_cdp(process.cdp_url), _OPEN_TIMEOUT_S)
        except Exception as exc:
            process.kill()
            raise RenderUnavailable(f"Chromium's DevTools endpoint did not answer: {exc}") from exc
        watchdog = MemoryWatchdog(process, self.settings.memory_limits())
        watchdog.start()
        self.launches += 1
        log.info("render: launched %s %s (pid %d)", self.settings.executable, browser.version, process.pid)
        return _Generation(process, browser, watchdog)

    async def _generation(self) -> _Generation:
        async with self._lock:
            gen = self._current
            if gen is not None and (gen.dead or gen.pages >= self.settings.recycle_after):
                self._current = None
                if gen.active == 0:
                    await self._retire(gen)
                # else the last page out retires it (see lease())
                gen = None
            if gen is None:
                gen = self._current = await self._launch()
            gen.pages += 1
            gen.active += 1
            return gen

    async def _open(self) -> tuple[_Generation, Any, Any]:
        """A fresh context and page; a browser that cannot make one is killed and replaced once."""
        error: Exception | None = None
        for _ in range(_OPEN_ATTEMPTS):
            gen = await self._generation()
            try:
                async with asyncio.timeout(_OPEN_TIMEOUT_S):
                    return gen, *await self._new_page(gen)
            except Exception as exc:  # the browser died (another page's timeout killed it) or hangs
                error = exc
                gen.active -= 1
                self.kill(gen)
        raise RenderUnavailable(f"the browser opened no page: {type(error).__name__}: {error}")

    async def _new_page(self, gen: _Generation) -> tuple[Any, Any]:
        context = await gen.browser.new_context(service_workers="block", accept_downloads=False)
        # A request of a page nobody leased (a popup) is refused; the leased page routes its own.
        await context.route("**/*", lambda route, request: route.abort("blockedbyclient"))
        await context.add_init_script(_NO_WEBRTC_JS)
        page = await context.new_page()
        # A crashed renderer (the memory watchdog's kill, or its own) answers no call: closing the
        # context makes the render's pending calls fail now, not at its timeout.
        page.on("crash", lambda _: self._later(context.close()))
        return context, page

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[Lease]:
        """A new context of the browser with one page, closed when the render is done (whatever
        the page's scripts left running goes with it)."""
        gen, context, page = await self._open()
        try:
            yield Lease(self, gen, context, page, memory_kills_at_start=gen.watchdog.kills)
        finally:
            gen.active -= 1
            await self._release(gen, context)

    async def _release(self, gen: _Generation, context: Any) -> None:
        if not gen.dead:
            try:
                await asyncio.wait_for(context.close(), _CLOSE_TIMEOUT_S)
            except Exception:  # a context that will not close: its browser goes
                self.kill(gen)
        if gen is not self._current and gen.active == 0 and not gen.killed:
            await self._retire(gen)

    def kill(self, gen: _Generation) -> None:
        """SIGKILL ``gen``'s browser and every process under it (a page hung)."""
        if self._current is gen:
            self._current = None
        if gen.killed:
            return
        gen.killed = True
        self.kills += 1
        gen.watchdog.stop()
        gen.process.kill()
        log.warning("render: killed the browser (pid %d) and its children", gen.process.pid)

    async def _retire(self, gen: _Generation) -> None:
        """Recycling: the browser has served its pages (or died); its tree and profile go."""
        gen.killed = True
        gen.watchdog.stop()
        gen.process.kill()
        with contextlib.suppress(Exception):  # drops Playwright's handle on the closed connection
            await asyncio.wait_for(gen.browser.close(), _CLOSE_TIMEOUT_S)

    def _later(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved: no warning

    async def close(self) -> None:
        gen, self._current = self._current, None
        if gen is not None:
            await self._retire(gen)
        driver, self._driver = self._driver, None
        if driver is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(driver.stop(), _CLOSE_TIMEOUT_S)


@dataclass(slots=True)
class Lease:
    """One page in a context of its own; ``kill()`` ends the browser (the page hung)."""

    pool: BrowserPool
    generation: _Generation
    context: Any
    page: Any
    memory_kills_at_start: int = 0
    # the renderer's per-page record (routes are set up once per page)
    slot: dict[str, Any] = field(default_factory=dict)

    @property
    def failure_kind(self) -> str | None:
        """``memory`` when the memory watchdog killed a renderer (or the browser) during this lease."""
        return "memory" if self.generation.watchdog.kills > self.memory_kills_at_start else None

    def kill(self) -> None:
        if self.failure_kind == "memory":
            self.pool.memory_kills += 1
            if not self.generation.dead:  # only the page's renderer went: closing its context is enough
                return
        self.pool.kill(self.generation)
