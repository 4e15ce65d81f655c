"""Build one sync DAG per configured source: ``sync_<kind>_<name>``.

    discover -> fetch (mapped over batches) -> parse -> chunk -> upsert -> commit -> summary

Everything the DAG does lives in ``plugins/operators`` and ``include/engine``; this module only
wires tasks together, so a DAG file stays two lines. Building a DAG touches no network and
imports no parser, chunker or connector library.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, Param

from include.config import SourceConfig, load_sources
from include.settings import get_settings

__all__ = ["build_dag", "build_dags", "index_asset"]

# Connectors whose fetch stage waits in the triggerer instead of a worker slot. Kept here as
# names (not imports) so that parsing DAG files never imports connector libraries.
_FETCH_OPERATORS = {
    "feishu": "plugins.connectors.feishu.operators.FeishuExportFetchOperator",
}

_PARAMS = {
    "full_resync": Param(
        False,
        type="boolean",
        title="Full resync",
        description="Ignore stored versions and re-process every item (validators are not sent).",
    ),
    "dry_run": Param(
        False,
        type="boolean",
        title="Dry run",
        description="Discover and report what would change; write nothing to the index or the state.",
    ),
    "max_items": Param(
        None,
        type=["null", "integer"],
        minimum=1,
        title="Max items",
        description="Fetch at most this many new or changed items in this run.",
    ),
    "window_start": Param(
        None,
        type=["null", "string"],
        format="date-time",
        title="Window start",
        description="Only items modified at or after this time (ISO 8601). Backfills use the data interval.",
    ),
    "window_end": Param(
        None,
        type=["null", "string"],
        format="date-time",
        title="Window end",
        description="Only items modified before this time (ISO 8601).",
    ),
    "only_keys": Param(
        [],
        type="array",
        items={"type": "string"},
        title="Only these items",
        description="Re-sync exactly these item keys (URLs, file tokens, doc ids); empty means all.",
    ),
    "allow_mass_delete": Param(
        False,
        type="boolean",
        title="Allow mass delete",
        description="Let this run delete more than the source's mass-delete threshold of its documents.",
    ),
}

_DOC = """\
### Sync `{source_id}`

Keeps the `{index}` index ({backend}) in sync with this {kind} source, pulling only what
changed since the last successful run.

`discover` → `fetch` (mapped over batches of {batch_size}) → `parse` → `chunk` → `upsert` →
`commit` (state is committed only after the index write succeeded) → `summary`.

Trigger with a config to override: `full_resync`, `dry_run`, `max_items`, `window_start` /
`window_end`, `only_keys`, `allow_mass_delete`. Per-run, per-item lineage:
`python -m include.cli run <run_id>`.
"""


def index_asset(source: SourceConfig) -> Asset:
    """The index a source writes to, as an Airflow Asset (downstream DAGs can schedule on it)."""
    return Asset(
        name=f"tributary-index-{source.index.backend}-{source.index.name}",
        uri=f"tributary://index/{source.index.backend}/{source.index.name}",
        group="tributary",
    )


def _fetch_operator(source: SourceConfig) -> type:
    dotted = source.options.get("fetch_operator") or _FETCH_OPERATORS.get(source.kind)
    if not dotted:
        from plugins.operators.sync import FetchOperator

        return FetchOperator
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _on_failure(context: Any) -> None:
    """Mark the run failed in the run log (the summary task never ran)."""
    from include.stores import open_state_store

    store = open_state_store()
    try:
        ti = context.get("ti") or context.get("task_instance")
        reason = f"task {getattr(ti, 'task_id', '?')} failed: {context.get('exception')}"
        if store.get_run(context["run_id"]) is not None:
            store.finish_run(context["run_id"], "failed", {}, error=reason[:2000])
    finally:
        store.close()


def build_dag(source: SourceConfig) -> DAG:
    from plugins.operators.sync import (
        ChunkOperator,
        CommitStateOperator,
        DiscoverOperator,
        ParseOperator,
        RunSummaryOperator,
        UpsertOperator,
    )

    sid = source.source_id
    with DAG(
        dag_id=source.dag_id,
        schedule=source.schedule,
        start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        catchup=False,
        max_active_runs=1,  # two runs of one source must not race on its state
        tags=["tributary", source.kind, *source.tags],
        description=source.description or f"Sync {source.kind} source {source.name} into {source.index.name}",
        doc_md=_DOC.format(
            source_id=sid,
            index=source.index.name,
            backend=source.index.backend,
            kind=source.kind,
            batch_size=source.batch_size,
        ),
        params=dict(_PARAMS),
        default_args={
            "retries": int(os.environ.get("TRIBUTARY_TASK_RETRIES", "2")),
            "retry_delay": dt.timedelta(seconds=float(os.environ.get("TRIBUTARY_RETRY_DELAY_SECONDS", "30"))),
            "retry_exponential_backoff": True,
            "max_retry_delay": dt.timedelta(minutes=10),
        },
        on_failure_callback=_on_failure,
    ) as dag:
        discover = DiscoverOperator(task_id="discover", source=sid)
        fetched = _fetch_operator(source).partial(task_id="fetch", source=sid).expand(batch=discover.output)
        parsed = ParseOperator.partial(task_id="parse", source=sid).expand(manifest=fetched.output)
        chunked = ChunkOperator.partial(task_id="chunk", source=sid).expand(manifest=parsed.output)
        upserted = UpsertOperator.partial(task_id="upsert", source=sid).expand(manifest=chunked.output)
        commit = CommitStateOperator(task_id="commit", source=sid)
        upserted >> commit
        discover >> commit
        RunSummaryOperator(task_id="summary", source=sid, counts=commit.output, outlets=[index_asset(source)])
    return dag


def build_dags(sources_file: Path | None = None) -> dict[str, DAG]:
    """Every configured source's DAG, keyed by DAG id."""
    sources = load_sources(sources_file or get_settings().sources_file)
    return {src.dag_id: build_dag(src) for src in sources}
