"""A live progress line for long in-process syncs (``cli sync`` on a terminal).

The steps report to the run's :class:`Progress` (``RunContext.progress``) as each one ends,
and a crawling connector reports its page counts through ``DiscoveryRequest.progress``.
:class:`TerminalProgress` redraws one line on a TTY; every other place (Airflow tasks,
``--json``, a pipe) has no progress at all, so nothing extra reaches a log or a parsed stdout.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import IO, Any, Protocol

__all__ = ["Progress", "TerminalProgress", "progress_line", "terminal_progress"]

# the stages a batch passes through, in the order the line shows them
BATCH_STAGES = ("fetch", "parse", "chunk", "embed", "upsert")
_PAST = {"fetch": "fetched", "parse": "parsed", "chunk": "chunked", "embed": "embedded", "upsert": "upserted"}
_ERASE = "\r\x1b[K"  # carriage return, then ECMA-48 EL (erase to the end of the line)


class Progress(Protocol):
    """Where a run reports how far it got; every call is cheap and may come from any thread."""

    def crawled(self, stats: Mapping[str, int], part: str | None = None) -> None:
        """A connector's running discovery counts (``pages``, ``fetched``, ``bytes``, ...), of
        one ``part`` when the source's partitions are crawled at once."""

    def step_done(self, stage: str, counts: Mapping[str, Any]) -> None:
        """One step ended with these counts (``StepResult.counts()``)."""

    def close(self) -> None:
        """The run ended: take the line away."""


def _rate(count: float, seconds: float) -> str:
    return f"{count / seconds:.1f}/s" if seconds > 0 else "-"


def progress_line(
    crawl: Mapping[str, int], batches: int | None, done: Mapping[str, int], totals: Mapping[str, int], seconds: float
) -> str:
    """The text of the line: pages crawled, batches through each stage, with rates."""
    parts = []
    if crawl:
        pages = int(crawl.get("pages") or 0)
        parts.append(f"crawled {pages} pages ({_rate(pages, seconds)}), {int(crawl.get('fetched') or 0)} fetched")
    if batches is not None:
        stages = [f"{_PAST[s]} {done[s]}" for s in BATCH_STAGES if done.get(s)]
        parts.append(f"batches {done.get('upsert', 0)}/{batches}" + (": " + ", ".join(stages) if stages else ""))
    if totals.get("chunks_embedded"):
        parts.append(f"{totals['chunks_embedded']} chunks embedded ({_rate(totals['chunks_embedded'], seconds)})")
    if totals.get("upserted_items"):
        parts.append(f"{totals['upserted_items']} items indexed ({_rate(totals['upserted_items'], seconds)})")
    minutes, secs = divmod(int(seconds), 60)
    return " · ".join([*parts, f"{minutes}:{secs:02d}"])


class TerminalProgress:
    """One line on ``stream``, redrawn at most every ``interval`` seconds (and at each stage's end).

    Calls from another process (a forked parse worker inherits the context) are ignored: only
    the process that owns the terminal line draws it."""

    def __init__(self, stream: IO[str], interval: float = 0.25) -> None:
        self.stream = stream
        self.interval = interval
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._drawn_at = 0.0
        self._parts: dict[str | None, dict[str, int]] = {}  # each partition's latest counts
        self._batches: int | None = None
        self._done: Counter[str] = Counter()
        self._totals: Counter[str] = Counter()
        self._shown = False

    def crawled(self, stats: Mapping[str, int], part: str | None = None) -> None:
        if os.getpid() != self._pid:
            return
        with self._lock:
            self._parts[part] = dict(stats)
            self._draw(force=False)

    def step_done(self, stage: str, counts: Mapping[str, Any]) -> None:
        if os.getpid() != self._pid:
            return
        with self._lock:
            if stage in ("discover", "plan"):
                self._batches = int(counts.get("batches") or 0)
            elif stage in BATCH_STAGES:
                self._done[stage] += 1
                self._totals["chunks_embedded"] += int(counts.get("chunks_embedded") or 0)
                if stage == "upsert":
                    self._totals["upserted_items"] += int(counts.get("items") or 0)
            self._draw(force=True)

    def close(self) -> None:
        with self._lock:
            if self._shown:
                self.stream.write(_ERASE)
                self.stream.flush()
                self._shown = False

    def _draw(self, *, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._drawn_at < self.interval:
            return
        self._drawn_at = now
        crawl: Counter[str] = Counter()
        for counts in self._parts.values():
            crawl.update(counts)
        line = progress_line(crawl, self._batches, self._done, self._totals, now - self._started)
        self.stream.write(_ERASE + line)
        self.stream.flush()
        self._shown = True


def terminal_progress(stream: IO[str], enabled: bool = True) -> TerminalProgress | None:
    """A progress line on ``stream`` when it is a terminal and ``enabled``; None otherwise
    (a pipe, a file, ``--json``): no escape codes where a program reads the output."""
    if not enabled or not stream.isatty():
        return None
    return TerminalProgress(stream)
