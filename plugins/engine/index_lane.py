"""Embed and upsert chunked batches in one background thread while the runner prepares the next.

An embedding sync spends nearly all its time in the model (``e5.c`` runs in C through ctypes,
without the GIL), and a plain sync a fifth of it writing the index (SQLite, also GIL-free): in a
serial loop the crawl hand-off, parse and chunk of batch *n+1* wait for both. The lane takes each
chunked batch as it is handed over and runs the same :class:`~plugins.engine.steps.EmbedStep`
and :class:`~plugins.engine.steps.UpsertStep` an Airflow task would, **one batch at a time, in the
order handed over**: the index and the state see the same writes in the same order as the serial
loop, and batch *n+1*'s embed step finds batch *n*'s vectors in the index cache (a repeated
navigation chunk is embedded once per run, not once per batch).

Bounded: at most ``depth`` batches wait for the lane (the producer blocks beyond that), so staging
holds a few chunked batches ahead, not the whole run. The first failure stops the lane: batches
handed over after it are not indexed (a resumed run redoes every batch without an ``upserted``
manifest), and :meth:`IndexLane.finish` raises it in the runner's thread.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from types import TracebackType

__all__ = ["IndexLane", "lane_wanted"]

_END = object()


def lane_wanted(batches: int) -> bool:
    """The lane overlaps batches, so it pays from two on; ``TRIBUTARY_INDEX_LANE=0`` turns it off
    (a serial run, e.g. to compare)."""
    return batches >= 2 and os.environ.get("TRIBUTARY_INDEX_LANE", "1") != "0"


class IndexLane:
    """``work(chunked manifest) -> upserted manifest`` in one thread, in submission order."""

    def __init__(self, work: Callable[[str], str], depth: int = 2) -> None:
        self._work = work
        self._waiting: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._upserted: list[str] = []
        self._error: BaseException | None = None
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tributary-index-lane", daemon=True)
        self._thread.start()

    def submit(self, chunked: str | Future[str]) -> None:
        """Queue one batch (its chunked manifest, or the parse pool's future of it); blocks while
        ``depth`` batches are waiting. Raises the lane's failure as soon as there is one."""
        self._raise_failure()
        self._waiting.put(chunked)

    def finish(self) -> list[str]:
        """Wait for every queued batch; the ``upserted`` manifests in submission order."""
        self._stop()
        self._raise_failure()
        return list(self._upserted)

    def __enter__(self) -> IndexLane:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None:  # the runner failed: index nothing more, but let the current step end
            self._cancelled.set()
        self._stop()

    def _stop(self) -> None:
        if self._thread.is_alive():
            self._waiting.put(_END)
            self._thread.join()

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while (handed := self._waiting.get()) is not _END:
            # after a failure or a cancel, keep taking batches (a producer must never block on a
            # lane that stopped working) but index none of them
            if self._error is not None or self._cancelled.is_set():
                continue
            try:
                chunked = handed.result() if isinstance(handed, Future) else str(handed)
                self._upserted.append(self._work(chunked))
            except BaseException as exc:  # re-raised in the runner's thread
                self._error = exc
