"""Reusable Airflow operators for every stage of a sync.

Each operator is thin: it resolves the source config and the run, then calls one function of
``plugins.engine``. They exchange only manifest paths through XCom (the bytes live in the
staging area), so they can be dropped into any DAG::

    discover = DiscoverOperator(task_id="discover", source="web:demo")
    fetched = FetchOperator.partial(task_id="fetch", source="web:demo").expand(batch=discover.output)
    parsed = ParseOperator.partial(task_id="parse", source="web:demo").expand(manifest=fetched.output)
    chunked = ChunkOperator.partial(task_id="chunk", source="web:demo").expand(manifest=parsed.output)
    upserted = UpsertOperator.partial(task_id="upsert", source="web:demo").expand(manifest=chunked.output)
    upserted >> CommitStateOperator(task_id="commit", source="web:demo") >> RunSummaryOperator(...)

``source`` is a source id (``kind:name``), DAG id or name from the sources file. Heavy
libraries are imported inside ``execute`` so that parsing DAG files stays fast.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

if TYPE_CHECKING:
    from plugins.engine import RunContext

__all__ = [
    "ChunkOperator",
    "CommitStateOperator",
    "DiscoverOperator",
    "FetchOperator",
    "ParseOperator",
    "RunSummaryOperator",
    "UpsertOperator",
    "run_context",
]


def run_context(source: str, context: Any) -> RunContext:
    """Build the engine's RunContext from an Airflow task context."""
    from plugins.engine import RunContext, RunParams, get_source

    src = get_source(source)
    dag_run = context.get("dag_run")
    params = RunParams.from_mapping(dict(context.get("params") or {}))
    run_type = str(getattr(dag_run, "run_type", "") or "").split(".")[-1].lower() or None
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if params.window_start is None and params.window_end is None and start and end:
        overlap = src.options.get("window_overlap_minutes")
        if run_type == "backfill":
            # A backfill re-syncs what was modified inside each interval.
            params.window_start, params.window_end = start, end
        elif run_type == "scheduled" and overlap is not None:
            # Scheduled windows overlap the previous one: clock skew and late edits are not missed.
            params.window_start, params.window_end = start - dt.timedelta(minutes=float(overlap)), end
    return RunContext(
        source=src,
        run_id=context["run_id"],
        params=params,
        dag_id=context["dag"].dag_id if context.get("dag") else src.dag_id,
        run_type=run_type,
    )


class _SourceOperator(BaseOperator):
    template_fields: Sequence[str] = ("source",)
    ui_color = "#d6eaf8"

    def __init__(self, *, source: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source = source
        self._lineage_result: Any = None  # what execute returned, for the OpenLineage facets

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: source -> index datasets, with this task's counts as a ``tributary`` run facet."""
        from plugins.tributary_airflow.lineage_ol import manifest_counts, operator_lineage

        result = self._lineage_result
        if isinstance(result, dict):
            counts = result
        elif isinstance(result, str):
            counts = manifest_counts(result)
        elif isinstance(result, list):
            counts = {"batches": len(result)}
        else:
            counts = {}
        return operator_lineage(self.source, self.task_id, getattr(task_instance, "run_id", None), counts)


def _gone_with_closed_run(operator: _SourceOperator, context: Any, manifest: str) -> bool:
    """True when ``manifest`` is missing because its run finished (and cleaned its staging).

    Clearing a task of a finished run re-runs it over a staging area that no longer exists;
    such a run is closed and the task has nothing to do (``plugins.engine.closed_run``).
    A missing manifest of an open run is still an error.
    """
    if Path(manifest).exists():
        return False
    from include.stores import open_state_store
    from plugins.engine import closed_run

    ctx = run_context(operator.source, context)
    store = open_state_store()
    try:
        closed = closed_run(ctx, store) is not None
    finally:
        store.close()
    if closed:
        operator.log.info("run %s of %s already finished: nothing to do for %s", ctx.run_id, operator.source, manifest)
    return closed


class DiscoverOperator(_SourceOperator):
    """Ask the connector what changed; plan fetch batches and deletions (mass-delete guarded).

    Returns the list of batch manifest paths (what ``fetch`` is mapped over); the plan itself
    is in the run's staging area (``discover.json``) and its path under the XCom key ``plan``.
    """

    def execute(self, context: Any) -> list[str]:
        from include.stores import open_state_store
        from plugins.engine import discover_stage, start_run

        ctx = run_context(self.source, context)
        store = open_state_store()
        try:
            start_run(ctx, store)
            result = discover_stage(ctx, store)
        finally:
            store.close()
        context["ti"].xcom_push(key="plan", value=result["plan"])
        self._lineage_result = result["batches"]
        return result["batches"]


class FetchOperator(_SourceOperator):
    """Fetch one batch's items through the connector; writes the batch's ``fetched`` manifest."""

    template_fields: Sequence[str] = ("source", "batch")

    def __init__(self, *, batch: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.batch = batch

    def execute(self, context: Any) -> str:
        from plugins.engine import fetch_stage, open_connector
        from plugins.engine.manifests import next_manifest_path

        if _gone_with_closed_run(self, context, self.batch):
            return next_manifest_path(self.batch, "fetched")
        ctx = run_context(self.source, context)
        with open_connector(ctx) as connector:
            self._lineage_result = fetch_stage(self.batch, connector)
        return self._lineage_result


class _ManifestOperator(_SourceOperator):
    template_fields: Sequence[str] = ("source", "manifest")

    def __init__(self, *, manifest: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.manifest = manifest


class ParseOperator(_ManifestOperator):
    """Parse a batch's fetched bytes into ParsedDocuments (parser chosen by sniffed media type)."""

    def execute(self, context: Any) -> str:
        from plugins.engine import get_source, parse_stage
        from plugins.engine.manifests import next_manifest_path

        if _gone_with_closed_run(self, context, self.manifest):
            return next_manifest_path(self.manifest, "parsed")
        self._lineage_result = parse_stage(self.manifest, get_source(self.source))
        return self._lineage_result


class ChunkOperator(_ManifestOperator):
    """Chunk a batch's parsed documents with the source's chunker and options."""

    def execute(self, context: Any) -> str:
        from plugins.engine import chunk_stage, get_source
        from plugins.engine.manifests import next_manifest_path

        if _gone_with_closed_run(self, context, self.manifest):
            return next_manifest_path(self.manifest, "chunked")
        self._lineage_result = chunk_stage(self.manifest, get_source(self.source))
        return self._lineage_result


class UpsertOperator(_ManifestOperator):
    """Write a batch's chunks to the source's index (new first, stale deleted after)."""

    def execute(self, context: Any) -> str:
        from include.index import open_index
        from plugins.engine import get_source, upsert_stage
        from plugins.engine.manifests import next_manifest_path

        if _gone_with_closed_run(self, context, self.manifest):
            return next_manifest_path(self.manifest, "upserted")
        src = get_source(self.source)
        self._lineage_result = upsert_stage(self.manifest, src, lambda: open_index(src.index))
        return self._lineage_result


class CommitStateOperator(_SourceOperator):
    """Apply deletions, then commit item state and lineage for what reached the index."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "none_failed")  # runs when there was nothing to fetch
        super().__init__(**kwargs)

    def execute(self, context: Any) -> dict[str, Any]:
        from include.index import open_index
        from include.stores import open_state_store
        from plugins.engine import commit_stage

        ctx = run_context(self.source, context)
        store = open_state_store()
        try:
            self._lineage_result = commit_stage(ctx, store, lambda: open_index(ctx.source.index))
        finally:
            store.close()
        return self._lineage_result


class RunSummaryOperator(_SourceOperator):
    """Close the run in the run log, clean staging, and attach the counts to the index asset event."""

    def __init__(self, *, counts: Any, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "none_failed")
        super().__init__(**kwargs)
        self.counts = counts

    template_fields: Sequence[str] = ("source", "counts")

    def execute(self, context: Any) -> dict[str, Any]:
        from include.stores import open_state_store
        from plugins.engine import finish_stage

        ctx = run_context(self.source, context)
        store = open_state_store()
        try:
            counts = finish_stage(ctx, store, dict(self.counts or {}))
        finally:
            store.close()
        for outlet in self.outlets or []:
            context["outlet_events"][outlet].extra = {"source": ctx.source.source_id, "run_id": ctx.run_id, **counts}
        self.log.info("run %s of %s: %s", ctx.run_id, ctx.source.source_id, counts)
        self._lineage_result = counts
        return counts
