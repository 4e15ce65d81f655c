"""Parse and chunk in worker processes while the runner's process fetches and indexes.

Parsing and chunking are CPU-bound Python (lxml, the chunker's token walk): one process runs
them one batch after another while other cores idle. The in-process runner
(:func:`plugins.engine.runner.run_pipeline`) therefore hands each fetched batch to a small pool
of forked workers, each running the very same :class:`~plugins.engine.steps.ParseStep` and
:class:`~plugins.engine.steps.ChunkStep` an Airflow task would (closed-run check, timing,
manifests in staging), and upserts the chunked batches in batch order as they come back. The
index and the state therefore see the same writes in the same order as a serial run: the same
chunk ids, the same lineage; a batch without an ``upserted`` manifest is redone by a resumed run
as before.

The pool is not used when it cannot help or would change what a run means: fewer than two
batches, one core, no ``fork`` (a spawned worker would re-import everything and lose the
parent's registries), or a failpoint configured (``TRIBUTARY_FAILPOINT``: crash tests kill *the
run's process* at a stage; in a worker the kill would hit another process).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager

from include.stores import StateStore
from plugins.engine.context import RunContext
from plugins.engine.steps import ChunkStep, ParseStep

__all__ = ["MAX_WORKERS", "exit_with_parent", "parse_chunk_pool", "parse_then_chunk", "pool_workers"]

MAX_WORKERS = 2  # the runner's process still fetches and indexes beside them

# What a forked worker inherits from the runner (set before the pool forks, never pickled).
_inherited: tuple[RunContext, StateStore] | None = None


def pool_workers(batches: int) -> int:
    """How many worker processes to parse and chunk ``batches`` batches in (0: in this process).

    Opt-in for now (``TRIBUTARY_PARSE_WORKERS=N``): not yet measured on an idle machine."""
    wanted = int(os.environ.get("TRIBUTARY_PARSE_WORKERS") or 0)
    cores = os.cpu_count() or 1
    if wanted < 1 or batches < 2 or cores < 2 or os.environ.get("TRIBUTARY_FAILPOINT"):
        return 0
    if "fork" not in multiprocessing.get_all_start_methods():
        return 0
    return min(wanted, MAX_WORKERS, cores, batches)


def parse_then_chunk(ctx: RunContext, store: StateStore, fetched: str) -> str:
    """Parse and chunk one fetched batch; the chunked manifest's path."""
    parsed = ParseStep(ctx, fetched).run(store)
    return ChunkStep(ctx, parsed.manifest).run(store).manifest


def _worker_start() -> None:
    assert _inherited is not None
    # the parent's pooled database connections belong to the parent: never reuse them here
    _inherited[1].engine.dispose(close=False)
    exit_with_parent()


def exit_with_parent() -> None:
    """In a forked worker: leave once the parent is gone. A runner killed (SIGKILL) cannot shut
    its pool down, and a worker holds the queue's pipe open itself, so it would wait forever."""
    parent = os.getppid()
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def _in_worker(fetched: str) -> str:
    assert _inherited is not None, "a parse/chunk worker started without the runner's context"
    ctx, store = _inherited
    return parse_then_chunk(ctx, store, fetched)


@contextmanager
def parse_chunk_pool(ctx: RunContext, store: StateStore, workers: int) -> Iterator[Callable[[str], Future[str]]]:
    """A submit function: fetched manifest path -> future of the chunked manifest path."""
    global _inherited
    _inherited = (ctx, store)
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=_worker_start)
    try:
        yield lambda fetched: pool.submit(_in_worker, fetched)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        _inherited = None
