"""A search query's embedding, under a deadline and on a bounded pool.

A query is embedded while a search request waits, on a thread of the server that serves it
(Starlette runs a synchronous handler on anyio's pool of 40 threads). An endpoint that trickles
its answer must not keep those threads: the embedding runs on this module's own pool of at most
``TRIBUTARY_QUERY_EMBED_CONCURRENCY`` threads (default 8), a request finding every slot taken is
answered "busy" at once, and the waiting request gives up after
``TRIBUTARY_QUERY_EMBED_TIMEOUT_SECONDS`` (default 10). A slot is held until its embedding call
has really ended (the embedder's own request deadline ends it), so threads never pile up past
the bound: a hung endpoint turns searches away instead.

Whatever the embedding raises (:class:`~plugins.embedders.base.EmbeddingError`, or anything a
bad answer makes numpy or a JSON parser raise) is :class:`VectorSearchUnavailable`, with the HTTP
status a search answers it with: 502 for a bad answer, 503 when the endpoint is unreachable,
timed out, rate limited or the pool busy (RFC 9110 s15.6.3, s15.6.4).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from plugins.embedders.base import Embedder, EmbeddingError

__all__ = ["QueryEmbeddingLimits", "VectorSearchUnavailable", "embed_query_bounded", "query_embedding_limits"]

log = logging.getLogger("tributary.search")

DEFAULT_TIMEOUT_SECONDS = 10.0
DEFAULT_CONCURRENCY = 8
THREAD_PREFIX = "tributary-query-embed"


class VectorSearchUnavailable(RuntimeError):
    """The query could not be embedded (or compared); ``status`` is 502 or 503, ``reason`` a word."""

    def __init__(self, reason: str, message: str, *, status: int) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status


@dataclass(frozen=True, slots=True)
class QueryEmbeddingLimits:
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    concurrency: int = DEFAULT_CONCURRENCY


def query_embedding_limits() -> QueryEmbeddingLimits:
    """The limits from the environment (read per search, so a test or an operator can change them)."""
    timeout = float(os.environ.get("TRIBUTARY_QUERY_EMBED_TIMEOUT_SECONDS", DEFAULT_TIMEOUT_SECONDS))
    concurrency = int(os.environ.get("TRIBUTARY_QUERY_EMBED_CONCURRENCY", DEFAULT_CONCURRENCY))
    if not timeout > 0 or concurrency < 1:
        raise ValueError(f"query embedding limits must be positive, not {timeout} s and {concurrency} threads")
    return QueryEmbeddingLimits(timeout, concurrency)


class _BoundedPool:
    """A thread pool that refuses work when its threads are all taken, instead of queueing it."""

    def __init__(self, workers: int) -> None:
        self._slots = threading.BoundedSemaphore(workers)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=THREAD_PREFIX)

    def submit(self, call: Callable[[], npt.NDArray[np.float32]]) -> Future[npt.NDArray[np.float32]] | None:
        if not self._slots.acquire(blocking=False):
            return None

        def run() -> npt.NDArray[np.float32]:
            try:
                return call()
            finally:
                self._slots.release()  # only once the call has really ended

        return self._executor.submit(run)


@functools.cache
def _pool(workers: int) -> _BoundedPool:
    return _BoundedPool(workers)


def embed_query_bounded(open_embedder: Callable[[], Embedder], query: str) -> npt.NDArray[np.float32]:
    """The query's vector (finite, one row), or :class:`VectorSearchUnavailable`."""
    limits = query_embedding_limits()
    future = _pool(limits.concurrency).submit(functools.partial(_embed, open_embedder, query))
    if future is None:
        raise VectorSearchUnavailable(
            "busy", f"{limits.concurrency} query embeddings are already running; try again shortly", status=503
        )
    try:
        return future.result(timeout=limits.timeout_seconds)
    except FutureTimeout:
        raise VectorSearchUnavailable(
            "timeout", f"the query embedding took longer than {limits.timeout_seconds:g} s", status=503
        ) from None
    except VectorSearchUnavailable:
        raise
    except EmbeddingError as exc:
        raise VectorSearchUnavailable(exc.reason, str(exc), status=503 if exc.retryable else 502) from None
    except Exception as exc:  # a bad answer's numpy/JSON/overflow error: the embedder's fault, not ours
        log.info("query embedding failed: %s: %s", type(exc).__name__, exc)
        raise VectorSearchUnavailable("bad_response", f"{type(exc).__name__}: {exc}", status=502) from None


def _embed(open_embedder: Callable[[], Embedder], query: str) -> npt.NDArray[np.float32]:
    embedder = open_embedder()
    try:
        vector = np.asarray(embedder.embed_query(query), dtype=np.float32)
    finally:
        embedder.close()
    if vector.ndim != 1 or vector.size == 0 or not np.isfinite(vector).all():
        raise VectorSearchUnavailable(
            "bad_response", f"the query's vector has shape {vector.shape} or non-finite values", status=502
        )
    return vector
