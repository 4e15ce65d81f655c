"""Build one sync DAG per configured source: ``sync_<kind>_<name>``.

    discover -> fetch (mapped over batches) -> parse -> chunk -> upsert -> commit -> summary

Everything the DAG does lives in ``plugins/tributary_airflow/operators`` and ``plugins/engine``; this module only
wires tasks together, so a DAG file stays two lines. Building a DAG touches no network and
imports no parser, chunker or connector library: loading the sources file validates each
source's options against its kind's model (``plugins/connectors/<kind>/options.py``, which
imports only pydantic), so a typo fails here, at DAG parse. An invalid source gets no DAG and
is reported as the import error of ``dags/tributary_sources_check.py`` (:func:`check_sources`);
the other sources keep theirs.
"""

from __future__ import annotations

import copy
import datetime as dt
import importlib
import logging
import os
import re
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, Param

from include.config import SourceConfig, load_sources_report
from include.settings import get_settings

log = logging.getLogger(__name__)

__all__ = ["InvalidSourcesError", "build_dag", "build_dags", "check_sources", "index_asset", "schedule_for"]

# Connectors whose fetch stage waits in the triggerer instead of a worker slot. Kept here as
# names (not imports) so that parsing DAG files never imports connector libraries.
_FETCH_OPERATORS = {
    "feishu": "plugins.tributary_airflow.operators.feishu.FeishuExportFetchOperator",
}

# Airflow validates Params with jsonschema but without a format checker, so "format: date-time"
# only drives the UI's picker; the pattern is what refuses "last tuesday" at trigger time.
_ISO_8601 = r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}:?\d{2})?$"


def _any_case(word: str) -> str:
    """``token`` -> ``[tT][oO]...``: the pattern also runs in the browser's trigger form, where
    Python's inline ``(?i)`` flag is not valid JavaScript."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)


# A key that is a URL with userinfo or a credential query parameter (the engine's check,
# include.config.url_secret, is the authority; this refuses the trigger before a run exists).
_SECRET_WORDS = ("token", "secret", "password", "passwd", "signature", "auth", "api_key", "apikey", "credential")
_SECRET_KEY_PATTERN = (
    r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@"
    rf"|[?&;]([^=&#]*[_-])?({'|'.join(_any_case(w) for w in _SECRET_WORDS)})="
    rf"|[?&;]({'|'.join(_any_case(w) for w in ('key', 'sig', 'pwd', 'pass'))})="
)

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
        maximum=1_000_000,
        title="Max items",
        description="Fetch at most this many new or changed items in this run (empty: no limit).",
    ),
    "window_start": Param(
        None,
        type=["null", "string"],
        format="date-time",
        pattern=_ISO_8601,
        title="Window start",
        description=(
            "Only items modified at or after this time (ISO 8601, e.g. 2026-11-01T00:00:00+00:00). "
            "Empty: no lower bound. Backfill runs use their data interval instead."
        ),
    ),
    "window_end": Param(
        None,
        type=["null", "string"],
        format="date-time",
        pattern=_ISO_8601,
        title="Window end",
        description="Only items modified before this time (ISO 8601). Empty: no upper bound.",
    ),
    "only_keys": Param(
        [],
        type="array",
        items={"type": "string", "minLength": 1, "maxLength": 2048, "not": {"pattern": _SECRET_KEY_PATTERN}},
        uniqueItems=True,
        maxItems=10_000,
        title="Only these items",
        description=(
            "Re-sync exactly these items: page URLs (web), file paths (files), doc tokens (Feishu), "
            "<book_id>/<doc_id> (Yuque). One per line; empty means every item. A URL carrying a "
            "credential (token query parameter, user:password@) is refused: use the source's Connection."
        ),
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
`python -m plugins.engine.cli run <run_id>`.
"""


def index_asset(source: SourceConfig) -> Asset:
    """The index a source writes to, as an Airflow Asset (downstream DAGs can schedule on it)."""
    return Asset(
        name=f"tributary-index-{source.index.backend}-{source.index.name}",
        uri=f"tributary://index/{source.index.backend}/{source.index.name}",
        group="tributary",
    )


def _fetch_operator(source: SourceConfig) -> type:
    dotted = source.engine_options.fetch_operator or _FETCH_OPERATORS.get(source.kind)
    if not dotted:
        from plugins.tributary_airflow.operators.sync import FetchOperator

        return FetchOperator
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def schedule_for(source: SourceConfig) -> Any:
    """Cron schedules become data-interval timetables, so that every run (and every backfill run)
    covers a real interval ``[start, end)``: a backfill over a date range then re-syncs what was
    modified inside each interval. Presets like ``@once``/``@continuous`` and ``None`` pass through.
    """
    schedule = source.schedule
    if not schedule or schedule in ("@once", "@continuous"):
        return schedule
    from airflow.timetables.interval import CronDataIntervalTimetable

    return CronDataIntervalTimetable(schedule, timezone="UTC")


def _stage_name(ti: Any) -> str:
    task_id = getattr(ti, "task_id", None) or "?"
    map_index = getattr(ti, "map_index", -1)
    return f"{task_id}[{map_index}]" if isinstance(map_index, int) and map_index >= 0 else task_id


def _source_id(context: Any) -> str:
    """The source a failing DAG syncs (run log rows are keyed by source and run id)."""
    dag_id = getattr(context.get("dag"), "dag_id", None) or "?"
    try:
        from plugins.engine import get_source

        return get_source(dag_id).source_id
    except KeyError:
        return dag_id.removeprefix("sync_").replace("_", ":", 1)


def _on_task_failure(context: Any) -> None:
    """Record a failed task's error in the run log (the DAG-level callback has no exception)."""
    from include.stores import open_state_store

    store = open_state_store()
    try:
        sid = _source_id(context)
        run = store.get_run(context["run_id"], sid)
        if run is None:  # failed before discover opened the run: the DAG callback opens nothing
            return
        if run.get("status") == "success":  # a cleared task of a finished run: the sync stands
            log.warning(
                "task %s of finished run %s failed; the run stays a success",
                _stage_name(context.get("ti")),
                context["run_id"],
            )
            return
        line = (
            f"{_stage_name(context.get('ti'))}: {type(context.get('exception')).__name__}: {context.get('exception')}"
        )
        previous = [e for e in (run.get("error") or "").split("\n") if e]
        if line not in previous:
            previous.append(line[:2000])
        store.finish_run(
            context["run_id"], "failed", run.get("counts") or {}, error="\n".join(previous)[-8000:], source=sid
        )
    finally:
        store.close()


def _drop_rebuild(source_id: str, run: dict[str, Any] | None) -> None:
    """A failed full resync must not leave a half-written index generation behind."""
    if not run or not (run.get("params") or {}).get("full_resync") or (run.get("params") or {}).get("dry_run"):
        return
    from include.index import open_index
    from plugins.engine import get_source

    index = open_index(get_source(source_id).index)
    try:
        index.finish_rebuild(False)
    finally:
        index.close()


def _on_failure(context: Any) -> None:
    """DAG run failed: mark it failed in the run log and post one summary to the alert webhook."""
    from include.stores import open_state_store
    from plugins.engine.alerts import build_failure_summary, post_failure_summary

    dag = context.get("dag")
    dag_id = getattr(dag, "dag_id", None) or "?"
    run_id = context["run_id"]
    ti = context.get("ti") or context.get("task_instance")
    sid = _source_id(context)
    store = open_state_store()
    try:
        run = store.get_run(run_id, sid)
        if run is not None and run.get("status") != "success":  # a finished run stays one
            error = run.get("error") or f"{_stage_name(ti)} failed ({context.get('reason') or 'task_failure'})"
            store.finish_run(run_id, "failed", run.get("counts") or {}, error=error[:8000], source=sid)
            run = store.get_run(run_id, sid)
            _drop_rebuild(sid, run)
        items = store.run_items(run_id, source=sid)
    finally:
        store.close()
    source = sid
    summary = build_failure_summary(
        source=source,
        dag_id=dag_id,
        run_id=run_id,
        failed_stage=_stage_name(ti) if ti is not None else None,
        run=run,
        items=items,
        reason=context.get("reason"),
    )
    post_failure_summary(summary)


def build_dag(source: SourceConfig) -> DAG:
    from plugins.tributary_airflow.operators.sync import (
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
        schedule=schedule_for(source),
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
        # Param objects keep the value they last resolved: each DAG gets its own copies, or one
        # DAG's trigger (or a test resolving a value) would become every other DAG's default
        params=copy.deepcopy(_PARAMS),
        default_args={
            "retries": int(os.environ.get("TRIBUTARY_TASK_RETRIES", "2")),
            "retry_delay": dt.timedelta(seconds=float(os.environ.get("TRIBUTARY_RETRY_DELAY_SECONDS", "30"))),
            "retry_exponential_backoff": True,
            "max_retry_delay": dt.timedelta(minutes=10),
            "on_failure_callback": _on_task_failure,
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
    _, errors = load_sources_report(sources_file or get_settings().sources_file)
    if errors:
        names = ", ".join(e.dag_id or e.label for e in errors)
        lines = "\n".join(e.message for e in errors)
        raise InvalidSourcesError(f"{len(errors)} source(s) have no DAG until fixed ({names}):\n{lines}")


def build_dags(sources_file: Path | None = None) -> dict[str, DAG]:
    """Every valid configured source's DAG, keyed by DAG id.

    An invalid source (a typo'd option, a credential in the config...) gets no DAG; it is logged
    here and reported as an import error by :func:`check_sources`.
    """
    sources, errors = load_sources_report(sources_file or get_settings().sources_file)
    for error in errors:
        log.error("source not built: %s", error.message)
    return {src.dag_id: build_dag(src) for src in sources}
