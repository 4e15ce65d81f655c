"""Run every stage of a sync in this process: for tests, benchmarks and ``tributary sync``.

The Airflow DAG calls the very same stage functions, one task each; this runner only
replaces Airflow's scheduling with a loop. Called again with the run id of a run that failed,
it resumes that run: the plan is kept and only batches without an ``upserted`` manifest are
processed again (the in-process equivalent of clearing those batches' tasks in Airflow).
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from include.config import SourceConfig
from include.index import open_index
from include.stores import StateStore, open_state_store
from plugins.engine.commit import abort_run, commit_stage, finish_stage
from plugins.engine.context import RunContext, RunParams, closed_run
from plugins.engine.discover import discover_stage, open_connector
from plugins.engine.manifests import next_manifest_path
from plugins.engine.process import chunk_stage, fetch_stage, parse_stage, upsert_stage
from plugins.engine.reaper import process_owner, reap_stale_runs, retains_raw, sdk_dag_run_state

__all__ = ["RunSummary", "run_pipeline", "start_run"]


@dataclass(slots=True)
class RunSummary:
    run_id: str
    source: str
    status: str
    counts: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def start_run(ctx: RunContext, store: StateStore) -> None:
    """Open the run in the run log (a retried discover reopens it; a finished run stays closed).

    First, earlier runs of the same source that died without closing (SIGKILLed) are marked
    failed and their staging removed (``plugins.engine.reaper``).
    """
    if closed_run(ctx, store) is not None:
        return
    sid = ctx.source.source_id
    keep_raw = retains_raw(ctx.source)
    reap_stale_runs(
        store,
        source=sid,
        exclude=(sid, ctx.run_id),
        dag_run_state=sdk_dag_run_state(),
        keep_raw=lambda _: keep_raw,
    )
    store.start_run(
        ctx.run_id,
        ctx.source.source_id,
        dag_id=ctx.dag_id or ctx.source.dag_id,
        run_type=ctx.run_type,
        params=ctx.params.to_dict(),
        window=(ctx.params.window_start, ctx.params.window_end),
        index_backend=ctx.source.index.backend,
        index_name=ctx.source.index.name,
        owner=process_owner() if ctx.run_type == "inline" else None,
    )


def run_pipeline(
    source: SourceConfig,
    params: dict[str, Any] | RunParams | None = None,
    *,
    run_id: str | None = None,
    store: StateStore | None = None,
) -> RunSummary:
    """Sync ``source`` once, in-process. Raises what the Airflow tasks would raise."""
    run_params = params if isinstance(params, RunParams) else RunParams.from_mapping(params)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    ctx = RunContext(
        source=source,
        run_id=run_id or f"inline__{stamp}_{uuid.uuid4().hex[:6]}",
        params=run_params,
        run_type="inline",
    )
    own_store = store is None
    store = store or open_state_store()
    try:
        if (closed := closed_run(ctx, store)) is not None:
            return RunSummary(ctx.run_id, source.source_id, "success", dict(closed.get("counts") or {}))
        start_run(ctx, store)
        plan = discover_stage(ctx, store)

        def index_factory():
            return open_index(source.index)

        with open_connector(ctx) as connector:
            for batch in plan["batches"]:
                if Path(next_manifest_path(batch, "upserted")).exists():
                    continue  # a resumed run: this batch reached the index already
                path = fetch_stage(batch, connector)
                path = parse_stage(path, source)
                path = chunk_stage(path, source)
                upsert_stage(path, source, index_factory)
                store.heartbeat(ctx.run_id, source.source_id)
        counts = commit_stage(ctx, store, index_factory)
        counts = finish_stage(ctx, store, counts)
        return RunSummary(ctx.run_id, source.source_id, "success", counts)
    except Exception as exc:
        abort_run(ctx, store, f"{type(exc).__name__}: {exc}")
        raise
    finally:
        if own_store:
            store.close()
