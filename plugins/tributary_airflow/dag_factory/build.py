"""One sync DAG from one source's config: tasks, schedule, retries, callbacks, the index Asset."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, BaseOperator, XComArg, task_group
from airflow.timetables.interval import CronDataIntervalTimetable

from include.config import SourceConfig, load_sources_report
from include.loading import load_class
from include.settings import get_settings
from plugins.connectors.base import source_partitions, syncs_permissions, validate_source_options
from plugins.tributary_airflow.callbacks import on_dag_failure, on_task_failure
from plugins.tributary_airflow.dag_factory.events import with_events
from plugins.tributary_airflow.dag_factory.params import DAG_DOC, trigger_params
from plugins.tributary_airflow.dag_factory.permissions import build_permissions_dag, permissions_dag_id, task_limits
from plugins.tributary_airflow.operators.sync import (
    ChunkOperator,
    CommitStateOperator,
    CrawlPartitionOperator,
    DiscoverOperator,
    EmbedOperator,
    FetchOperator,
    ParseOperator,
    ReembedOperator,
    RunSummaryOperator,
    StartRunOperator,
    UpsertOperator,
)

log = logging.getLogger(__name__)

__all__ = [
    "FETCH_OPERATORS",
    "InvalidSourcesError",
    "build_dag",
    "build_dags",
    "check_sources",
    "fetch_operator",
    "index_asset",
    "schedule_for",
]

# The one place that says which kinds fetch with another operator than FetchOperator (a source's
# ``engine_options.fetch_operator`` overrides it): Feishu's waits for its exports in the
# triggerer instead of a worker slot. Dotted names, imported only for the sources that use them:
# parsing DAG files must not import a connector's libraries for a kind nobody configured.
FETCH_OPERATORS: dict[str, str] = {
    "feishu": "plugins.tributary_airflow.operators.feishu.FeishuExportFetchOperator",
}


def index_asset(source: SourceConfig) -> Asset:
    """The index a source writes to, as an Airflow Asset (downstream DAGs can schedule on it)."""
    return Asset(
        name=f"tributary-index-{source.index.backend}-{source.index.name}",
        uri=f"tributary://index/{source.index.backend}/{source.index.name}",
        group="tributary",
    )


def fetch_operator(source: SourceConfig) -> type[BaseOperator]:
    """The operator class of a source's fetch task: its ``engine_options.fetch_operator``, else
    its kind's entry in :data:`FETCH_OPERATORS`, else :class:`FetchOperator`."""
    dotted = source.engine_options.fetch_operator or FETCH_OPERATORS.get(source.kind)
    if not dotted:
        return FetchOperator
    module, _, name = dotted.rpartition(".")
    try:
        return load_class(f"{module}:{name}", BaseOperator)
    except TypeError:
        raise TypeError(f"{source.source_id}: fetch_operator {dotted} is not an Airflow operator class") from None


def schedule_for(source: SourceConfig) -> Any:
    """Cron schedules become data-interval timetables, so that every run (and every backfill run)
    covers a real interval ``[start, end)``: a backfill over a date range then re-syncs what was
    modified inside each interval. Presets like ``@once``/``@continuous`` and ``None`` pass through.
    """
    schedule = source.schedule
    if not schedule or schedule in ("@once", "@continuous"):
        return schedule
    return CronDataIntervalTimetable(schedule, timezone="UTC")


def _default_args() -> dict[str, Any]:
    """Every task's retries (backoff capped at 10 min), time limit and failure callback.

    The time limit is the backstop for a task that hangs where no deadline of ours reaches (a C
    library stuck in one call, a bug): Airflow fails it, the failure callback closes the run, the
    retry starts over from the committed state instead of the run staying "running" forever."""
    return {**task_limits(), "on_failure_callback": on_task_failure}


def _dag(source: SourceConfig) -> DAG:
    index = source.index
    return DAG(
        dag_id=source.dag_id,
        schedule=with_events(source, schedule_for(source)),  # the events asset OR the cron, when on
        start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        catchup=False,
        max_active_runs=1,  # two runs of one source must not race on its state
        tags=["tributary", source.kind, *source.tags],
        description=source.description or f"Sync {source.kind} source {source.name} into {index.name}",
        doc_md=DAG_DOC.format(
            source_id=source.source_id,
            index=index.name,
            backend=index.backend,
            kind=source.kind,
            batch_size=source.batch_size,
            embed=f" `embed` ({source.embedding.provider} model; only chunks whose text has no vector yet) →"
            if source.embedding.enabled
            else "",
        ),
        params=trigger_params(),
        default_args=_default_args(),
        on_failure_callback=on_dag_failure,
    )


def build_dag(source: SourceConfig) -> DAG:
    """discover -> [fetch -> parse -> chunk [-> embed] -> upsert] (one lane per batch) -> commit -> summary.

    ``embed`` (mapped over batches like its neighbours) only when the source's embedding is
    enabled: a BM25-only source's DAG has no task that would do nothing. Such a source also has
    ``discover -> reembed -> commit`` (:mod:`plugins.engine.reembed`: unchanged items needing
    new vectors only, from their indexed chunk texts). A partitioned source
    begins ``start -> crawl`` (mapped over its partitions) ``-> discover`` (:func:`_discover_tasks`).
    """
    sid = source.source_id
    with _dag(source) as dag:
        discover = _discover_tasks(source)
        upserted = _batch_lane(source).expand(batch=discover.output)
        commit = CommitStateOperator(
            task_id="commit", source=sid, manifests=upserted.output, plan=XComArg(discover, key="plan")
        )
        upserted >> commit
        discover >> commit  # nothing to fetch: commit still runs (and closes the run)
        if source.embedding.enabled:  # items needing new vectors only: beside the batches
            discover >> ReembedOperator(task_id="reembed", source=sid) >> commit
        RunSummaryOperator(task_id="summary", source=sid, counts=commit.output, outlets=[index_asset(source)])
    return dag


def _manifest(task: BaseOperator) -> Any:
    """The manifest path ``task`` returns, as the next task's argument (resolved at run time)."""
    return task.output


def _batch_lane(source: SourceConfig) -> Any:
    """One batch's ``fetch -> parse -> chunk [-> embed] -> upsert``, as a task group mapped over
    the batches (``.expand(batch=...)``): batch *i*'s parse waits for batch *i*'s fetch only.

    Mapping each task over the previous task's output instead would make every stage a barrier:
    no batch is parsed before every batch is fetched, and so on down the chain, so the workers
    idle at each stage's tail and between stages. The task ids stay ``fetch``, ``parse``...
    (``prefix_group_id=False``), each with its map index, retries and lineage as before."""
    sid = source.source_id

    # later stages first: the scheduler queues a ready parse before a ready fetch of another
    # batch (with a slot limit, README "Distributed deployment"), so batches finish one by one
    # instead of every batch being fetched before any is parsed ("downstream", the default)
    @task_group(group_id="batch", prefix_group_id=False, default_args={"weight_rule": "upstream"})
    def batch_lane(batch: str) -> Any:
        fetched = fetch_operator(source)(task_id="fetch", source=sid, batch=batch)
        parsed = ParseOperator(task_id="parse", source=sid, manifest=_manifest(fetched))
        indexed: BaseOperator = ChunkOperator(task_id="chunk", source=sid, manifest=_manifest(parsed))
        if source.embedding.enabled:
            indexed = EmbedOperator(task_id="embed", source=sid, manifest=_manifest(indexed))
        return UpsertOperator(task_id="upsert", source=sid, manifest=_manifest(indexed))

    return batch_lane


def _discover_tasks(source: SourceConfig) -> DiscoverOperator:
    """The ``discover`` task, preceded for a partitioned source (``source_partitions``: known from
    its options when the DAG is parsed) by ``start`` and one mapped ``crawl`` task per partition,
    labelled with its hosts; ``discover`` then merges their listings and plans."""
    sid = source.source_id
    partitions = source_partitions(source)
    if not partitions:
        return DiscoverOperator(task_id="discover", source=sid)
    start = StartRunOperator(task_id="start", source=sid)
    crawl = CrawlPartitionOperator.partial(
        task_id="crawl", source=sid, map_index_template="{{ task.partition }}"
    ).expand_kwargs([{"partition": p, "part": n} for n, p in enumerate(partitions)])
    start >> crawl
    return DiscoverOperator(task_id="discover", source=sid, partials=crawl.output)


class InvalidSourcesError(ValueError):
    """Sources of the sources file that do not validate (fields or options): their DAGs are not built."""


def check_sources(sources_file: Path | None = None) -> None:
    """Raise :class:`InvalidSourcesError` naming every invalid source (and its bad keys).

    Called by its own DAG file, ``dags/tributary_sources_check.py``, so that the error is that
    file's import error: Airflow records import errors per file and marks *every* DAG of a file
    with one stale (unscheduled), so reporting it from the file that builds the DAGs would stop
    every source because of one typo. This way the UI's "DAG import errors" names the bad source
    and key while the valid sources' DAGs, built by ``dags/tributary_sources.py``, keep running.
    """
    _, errors = load_sources_report(sources_file or get_settings().sources_file, validate_source_options)
    if errors:
        names = ", ".join(e.dag_id or e.label for e in errors)
        lines = "\n".join(e.message for e in errors)
        raise InvalidSourcesError(f"{len(errors)} source(s) have no DAG until fixed ({names}):\n{lines}")


def build_dags(sources_file: Path | None = None, only: str | None = None) -> dict[str, DAG]:
    """Every valid configured source's DAG, keyed by DAG id, and the permissions DAG
    (``perms_<kind>_<name>``) of each source with permissions to keep current
    (:func:`~plugins.connectors.base.syncs_permissions`).

    ``only`` (a DAG id) builds that DAG alone: a task process parses the DAG file to run one
    task of one DAG (``get_parsing_context().dag_id``), and building every source's DAG for it
    costs every task start. An invalid source (a typo'd option, a credential in the config...)
    gets no DAG; it is logged here and reported as an import error by :func:`check_sources`.
    """
    sources, errors = load_sources_report(sources_file or get_settings().sources_file, validate_source_options)
    for error in errors:
        log.error("source not built: %s", error.message)
    dags: dict[str, DAG] = {}
    for src in sources:
        if only in (None, src.dag_id):
            dags[src.dag_id] = build_dag(src)
        if syncs_permissions(src) and only in (None, permissions_dag_id(src)):
            perms = build_permissions_dag(src)
            dags[perms.dag_id] = perms
    return dags
