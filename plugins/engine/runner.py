"""Run every step of a sync in this process: for tests, benchmarks and ``tributary sync``.

The Airflow DAG runs the very same step classes (``plugins.engine.steps``), one task each; this
runner only replaces Airflow's scheduling with a loop. Called again with the run id of a run that
failed, it resumes that run: the plan is kept and only batches without an ``upserted`` manifest
are processed again (the in-process equivalent of clearing those batches' tasks in Airflow).
Called with the run id of a run that finished, every step finds the run closed and does nothing.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from include.config import SourceConfig
from include.index import IndexBackend, open_index
from include.staging import StagingArea
from include.stores import StateStore, open_state_store
from plugins.connectors.base import Connector
from plugins.engine.commit import abort_run
from plugins.engine.context import RunContext, RunParams
from plugins.engine.discover import open_connector
from plugins.engine.early import start_early
from plugins.engine.embed import EmbedderFactory
from plugins.engine.index_lane import IndexLane, lane_wanted
from plugins.engine.manifests import next_manifest_path
from plugins.engine.overlap import parse_chunk_pool, parse_then_chunk, pool_workers
from plugins.engine.partitions import discover_run
from plugins.engine.progress import Progress
from plugins.engine.reembed_step import run_reembed
from plugins.engine.steps import (
    CommitStep,
    ConnectorOpener,
    EmbedStep,
    FetchStep,
    FinishStep,
    UpsertStep,
    start_run,
)

__all__ = ["RunSummary", "run_pipeline", "start_run"]


@dataclass(slots=True)
class RunSummary:
    run_id: str
    source: str
    status: str
    counts: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    # documents the parse step took from workers that parsed them while the crawl fetched
    # (plugins.engine.early); None: no such workers in this run. Not a count of the run's log
    parsed_during_crawl: int | None = None


def run_pipeline(
    source: SourceConfig,
    params: dict[str, Any] | RunParams | None = None,
    *,
    run_id: str | None = None,
    store: StateStore | None = None,
    embedder_factory: EmbedderFactory | None = None,
    progress: Progress | None = None,
    event_batches: Sequence[str] = (),
) -> RunSummary:
    """Sync ``source`` once, in-process. Raises what the Airflow tasks would raise.

    ``embedder_factory`` replaces the source's embedder (a benchmark's counting wrapper); the
    embedding step runs only when the source has embedding enabled. ``progress`` hears each
    step's end and the crawl's counts (the CLI's line on a terminal); it is closed at the end.
    ``event_batches``: stored event batches the run stands for (as an events-triggered DAG run's
    asset events name them: :mod:`plugins.engine.event_runs`).
    """
    run_params = params if isinstance(params, RunParams) else RunParams.from_mapping(params)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    ctx = RunContext(
        source=source,
        run_id=run_id or f"inline__{stamp}_{uuid.uuid4().hex[:6]}",
        params=run_params,
        run_type="inline",
        progress=progress,
        event_batches=list(event_batches),
    )
    own_store = store is None
    store = store or open_state_store()
    ctx.early = start_early(ctx, store)  # forked before the crawl starts a thread
    try:
        plan = discover_run(ctx, store)  # one discover step, or a partitioned source's parallel crawl
        if ctx.early is not None:
            ctx.early.flush()  # the crawl's last pages
        upserted = [] if plan.closed else _process_batches(ctx, store, plan.batches, embedder_factory)
        if not plan.closed:  # unchanged items needing new vectors only (plugins.engine.reembed)
            run_reembed(ctx, store, lambda: _open_index(source), embedder_factory)
        commit = CommitStep(ctx, lambda: _open_index(source), upserted, plan.plan).run(store)
        finish = FinishStep(ctx, commit.totals).run(store)
        summary = RunSummary(ctx.run_id, source.source_id, str(finish.totals.get("outcome", "success")), finish.totals)
        if ctx.early is not None:  # how much of the parsing the crawl's time covered
            summary.parsed_during_crawl = ctx.early.stats["parsed"]
        return summary
    except Exception as exc:
        abort_run(ctx, store, f"{type(exc).__name__}: {exc}")
        raise
    finally:
        if ctx.early is not None:
            ctx.early.close()
        if progress is not None:
            progress.close()
        if own_store:
            store.close()


def _open_index(source: SourceConfig) -> IndexBackend:
    return open_index(source.index)


def _process_batches(
    ctx: RunContext, store: StateStore, batches: list[str], embedder_factory: EmbedderFactory | None
) -> list[str]:
    """Fetch, parse, chunk, embed (when enabled) and upsert each batch, over one connector;
    returns the refs of the ``upserted`` manifests written (what commit checks them against).

    With two batches or more, embed and upsert run in the index lane's thread
    (:mod:`plugins.engine.index_lane`) while this thread hands over and parses the next batches;
    with ``TRIBUTARY_PARSE_WORKERS`` set (and two cores or more), parse and chunk run in worker
    processes (:mod:`plugins.engine.overlap`). Batches reach the index in batch order either way."""
    # a resumed run: batches with an upserted manifest reached the index already
    todo = [b for b in batches if not StagingArea.exists_at(next_manifest_path(b, "upserted"))]

    def index(chunked: str) -> str:
        return _index_batch(ctx, store, chunked, embedder_factory)

    with open_connector(ctx) as connector:
        shared = _shared(connector)
        if not lane_wanted(len(todo)):
            return [index(parse_then_chunk(ctx, store, FetchStep(ctx, b, shared).run(store).manifest)) for b in todo]
        with IndexLane(index) as lane:
            # pages parsed during the crawl leave the batches little to parse: no second pool
            workers = 0 if ctx.early is not None else pool_workers(len(todo))
            if not workers:
                for batch in todo:
                    lane.submit(parse_then_chunk(ctx, store, FetchStep(ctx, batch, shared).run(store).manifest))
                return lane.finish()
            # the pool forks its workers at the first submit, while the lane's thread still waits
            # on an empty queue (no lock of its held across the fork)
            with parse_chunk_pool(ctx, store, workers) as submit:
                for batch in todo:
                    lane.submit(submit(FetchStep(ctx, batch, shared).run(store).manifest))
                return lane.finish()


def _index_batch(ctx: RunContext, store: StateStore, chunked: str, embedder_factory: EmbedderFactory | None) -> str:
    """Embed (when enabled) and upsert one chunked batch; the ``upserted`` manifest's ref."""
    index_factory = lambda: _open_index(ctx.source)  # noqa: E731 - one opener for both steps
    to_upsert = chunked
    if ctx.source.embedding.enabled:
        to_upsert = EmbedStep(ctx, chunked, index_factory, embedder_factory).run(store).manifest
    upserted = UpsertStep(ctx, to_upsert, index_factory).run(store).manifest
    store.heartbeat(ctx.run_id, ctx.source.source_id)
    return upserted


def _shared(connector: Connector) -> ConnectorOpener:
    """An opener handing every fetch step the run's one connector (closed once, by the runner)."""
    return lambda: nullcontext(connector)
