"""A bound on the resident memory of one browser's process tree, enforced by a watchdog thread.

``--js-flags=--max-old-space-size`` bounds only V8's heap: ArrayBuffers, images, canvases and the
DOM live outside it (16 filled 256 MiB ArrayBuffers took a renderer to 4.4 GB). ``RLIMIT_AS`` is
no answer: Chromium reserves address space in bulk (V8's pointer-compression cage, PartitionAlloc
pools) and does not start under a limit of 16 GiB (measured: SIGTRAP at launch). A memory cgroup
is not writable in every worker. So a thread reads the resident set of every process of the tree
every ``poll_ms`` (psutil, ``/proc``) and SIGKILLs

- a renderer (one page's process: pages of different browser contexts never share one) over
  ``renderer_mb``: that page crashes, the browser and the other pages go on;
- the whole tree when its sum is over ``tree_mb`` (many renderers each under the bound).

The bound holds to within what a page can allocate in one poll interval.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from plugins.connectors.web.render.launch import ChromiumProcess

__all__ = ["MemoryLimits", "MemoryWatchdog"]

log = logging.getLogger("tributary.web.render")

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class MemoryLimits:
    renderer_mb: int  # resident memory of one renderer process (one page)
    tree_mb: int  # resident memory of the browser's whole process tree
    poll_ms: int = 100


class MemoryWatchdog:
    """Polls ``browser``'s tree in a daemon thread; ``on_tree_overrun`` runs after a tree kill."""

    def __init__(
        self, browser: ChromiumProcess, limits: MemoryLimits, on_tree_overrun: Callable[[], None] = lambda: None
    ) -> None:
        self.browser = browser
        self.limits = limits
        self.on_tree_overrun = on_tree_overrun
        self.renderer_kills = 0
        self.tree_killed = False
        self.peak_tree_bytes = 0
        self._renderers: dict[int, bool] = {}  # pid -> is a renderer (a cmdline is read once)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"render-memory-{browser.pid}", daemon=True)

    @property
    def kills(self) -> int:
        """Memory kills so far (renderers, plus one for the tree)."""
        return self.renderer_kills + int(self.tree_killed)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.limits.poll_ms / 1000):
            with contextlib.suppress(psutil.Error):  # the tree changes under us: next round
                self.check()

    def check(self) -> None:
        """One round: kill a renderer over its bound, or the tree over its own."""
        total = 0
        for proc in self.browser.processes():
            try:
                rss = proc.memory_info().rss
            except psutil.Error:
                continue
            if rss > self.limits.renderer_mb * MIB and self._is_renderer(proc):
                self._kill_renderer(proc, rss)
                continue
            total += rss
        self.peak_tree_bytes = max(self.peak_tree_bytes, total)
        if total > self.limits.tree_mb * MIB:
            log.warning(
                "render: the browser's processes hold %d MiB (bound %d MiB): killing the browser",
                total // MIB,
                self.limits.tree_mb,
            )
            self.tree_killed = True
            self._stop.set()
            self.browser.kill()
            self.on_tree_overrun()

    def _is_renderer(self, proc: psutil.Process) -> bool:
        if proc.pid not in self._renderers:
            self._renderers[proc.pid] = "--type=renderer" in proc.cmdline()
        return self._renderers[proc.pid]

    def _kill_renderer(self, proc: psutil.Process, rss: int) -> None:
        with contextlib.suppress(psutil.Error):
            proc.kill()
            self.renderer_kills += 1
            log.warning(
                "render: a page's renderer (pid %d) holds %d MiB (bound %d MiB): killed it",
                proc.pid,
                rss // MIB,
                self.limits.renderer_mb,
            )
