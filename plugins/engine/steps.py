"""The steps of a sync, one small class each, on one base.

    DiscoverStep -> FetchStep (per batch) -> ParseStep -> ChunkStep -> [EmbedStep] -> UpsertStep
        -> CommitStep -> FinishStep

(``EmbedStep`` only for a source with ``embedding`` enabled; a BM25-only source has no such step.)

A step calls one stage function of the engine and returns a typed result. The base,
:class:`Step`, owns what every step must do the same way, so no step (and no operator built on
one) can skip it:

- the closed-run short-circuit: a task of a run that already finished does nothing
  (:func:`~plugins.engine.context.closed_run`), so clearing it in Airflow leaves index, state
  and run log as they are;
- the stage's failpoint (``include/failpoints.py``), named after the stage, reached once the
  stage's output is written;
- the stage's timing (``elapsed_ms``, logged);
- what the step reports for lineage: its counts and its input and output datasets.

Airflow's operators (``plugins/tributary_airflow/operators``) hold one step each; the in-process
runner (:func:`plugins.engine.runner.run_pipeline`) runs the same classes in a loop.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar
from urllib.parse import urlsplit

from include.config import IndexConfig, SourceConfig
from include.failpoints import failpoint
from include.index import IndexBackend
from include.settings import get_settings
from include.staging import split_ref
from include.staging.locations import location_name
from include.stores import StateStore
from plugins.connectors.base import Connector, get_connector_class
from plugins.engine.commit import commit_stage, finish_stage
from plugins.engine.context import RunContext, closed_run
from plugins.engine.discover import discover_stage
from plugins.engine.embed import EmbedderFactory, embed_stage, open_source_embedder
from plugins.engine.event_runs import apply_event_trigger, consume_events
from plugins.engine.manifests import (
    next_manifest_path,
    read_plan,
    read_stage_manifest,
    replace_corrupt_manifests,
    written_counts,
)
from plugins.engine.process import chunk_stage, fetch_stage, parse_stage, upsert_stage
from plugins.engine.reaper import DagRunState, process_owner, reap_stale_runs, retains_raw

__all__ = [
    "ChunkStep",
    "CommitStep",
    "ConnectorOpener",
    "CountsResult",
    "Dataset",
    "DiscoverStep",
    "EmbedResult",
    "EmbedStep",
    "FetchStep",
    "FinishStep",
    "IndexFactory",
    "ManifestResult",
    "ManifestStep",
    "ParseStep",
    "PlanResult",
    "Step",
    "StepLineage",
    "StepResult",
    "UpsertStep",
    "index_dataset",
    "source_dataset",
    "start_run",
]

log = logging.getLogger("tributary")

IndexFactory = Callable[[], IndexBackend]
ConnectorOpener = Callable[[], AbstractContextManager[Connector]]


# ----------------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResult:
    """What a step did. ``closed``: its run had already finished, so it did nothing."""

    closed: bool = False

    def counts(self) -> dict[str, Any]:
        """The step's counts, for lineage (OpenLineage's ``tributary`` run facet)."""
        return {}


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanResult(StepResult):
    """Discover's plan (``discover.json``) and its batch manifests, what fetch is mapped over."""

    plan: str
    batches: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, Any]:
        return {"batches": len(self.batches)}


@dataclass(frozen=True, slots=True, kw_only=True)
class ManifestResult(StepResult):
    """The manifest a batch step wrote, with what it holds."""

    manifest: str
    items: int = 0
    unchanged: int = 0
    failed: int = 0

    @classmethod
    def of(cls, path: str) -> ManifestResult:
        """The result of a step that just wrote ``path``."""
        items, unchanged, failed = written_counts(path)
        return cls(manifest=path, items=items, unchanged=unchanged, failed=failed)

    def counts(self) -> dict[str, Any]:
        if self.closed:  # nothing was handled (the manifest went with the run's staging)
            return {}
        return {"items": self.items, "unchanged": self.unchanged, "failed": self.failed}


@dataclass(frozen=True, slots=True, kw_only=True)
class EmbedResult(ManifestResult):
    """An embedding step's manifest, with how many chunk vectors it computed and reused."""

    chunks_embedded: int = 0
    chunks_vector_reused: int = 0

    def counts(self) -> dict[str, Any]:
        if self.closed:
            return {}
        return {
            **ManifestResult.counts(self),
            "chunks_embedded": self.chunks_embedded,
            "chunks_vector_reused": self.chunks_vector_reused,
        }


def _fields(result: ManifestResult) -> dict[str, Any]:
    return {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}


@dataclass(frozen=True, slots=True, kw_only=True)
class CountsResult(StepResult):
    """A run's counts, as committed (commit) or as closed in the run log (finish)."""

    totals: dict[str, Any] = field(default_factory=dict)

    def counts(self) -> dict[str, Any]:
        return dict(self.totals)


# ----------------------------------------------------------------------------------- lineage


class Dataset(NamedTuple):
    """A lineage dataset: OpenLineage's (namespace, name)."""

    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class StepLineage:
    """What one step reports for lineage: the source read, the index written, and its counts."""

    stage: str
    source: str
    run_id: str
    inputs: list[Dataset]
    outputs: list[Dataset]
    counts: dict[str, Any]
    elapsed_ms: float | None = None


def source_dataset(source: SourceConfig) -> Dataset:
    """The source as its connector names it (site URL, folder, repo ...); offline."""
    try:
        connector = get_connector_class(source.kind)(source)
        try:
            namespace, name = connector.input_dataset()
        finally:
            connector.close()
        return Dataset(str(namespace), str(name or "/"))
    except Exception as exc:  # lineage must never fail a task: fall back to the configured name
        log.warning("input dataset of %s not resolved (%s); using its source id", source.source_id, exc)
        return Dataset(f"tributary-{source.kind}", source.name)


def index_dataset(index: IndexConfig, connection_address: Callable[[str], str] | None = None) -> Dataset:
    """The SQLite file or the Elasticsearch cluster, and the index name.

    ``connection_address`` turns an Elasticsearch ``conn_id`` into ``host:port`` (connections
    are Airflow's; without it such an index is named by the default address).
    """
    if index.backend == "sqlite":
        path = Path(index.options.get("path") or get_settings().index_path).resolve()
        return Dataset(f"sqlite://{path}", index.name)
    if index.backend == "elasticsearch":
        return Dataset(_es_namespace(index.options, connection_address), index.name)
    return Dataset(f"tributary-{index.backend}", index.name)


def _es_namespace(options: dict[str, Any], connection_address: Callable[[str], str] | None) -> str:
    # the resolution order of include/index/_es_client.py: url option, environment, connection
    url = options.get("url") or (None if options.get("conn_id") else os.environ.get("ELASTICSEARCH_URL"))
    if not url:
        conn_id = str(options.get("conn_id") or "elasticsearch_default")
        url = connection_address(conn_id) if connection_address else "localhost:9200"
    parts = urlsplit(url if "://" in url else f"http://{url}")
    return f"elasticsearch://{parts.hostname}:{parts.port or 9200}"


# ----------------------------------------------------------------------------------- the base

R = TypeVar("R", bound=StepResult)


class Step(ABC, Generic[R]):
    """One stage of one run. Subclasses set ``stage`` and write :meth:`_execute` and :meth:`_closed`."""

    stage: ClassVar[str]  # also the failpoint's name

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.result: R | None = None
        self.elapsed_ms: float | None = None

    def run(self, store: StateStore) -> R:
        """Do the stage, or nothing when the run already finished."""
        return self._guarded(store, lambda: self._execute(store))

    def _guarded(self, store: StateStore, work: Callable[[], R]) -> R:
        """``work`` under the rules every step keeps: short-circuit, timing, failpoint."""
        if (closed := closed_run(self.ctx, store)) is not None:
            log.info("%s: run %s already finished; %s has nothing to do", self._who(), self.ctx.run_id, self.stage)
            self.result = self._closed(closed)
            return self.result
        start = time.perf_counter()
        result = work()
        self.elapsed_ms = round((time.perf_counter() - start) * 1000, 2)
        log.info("%s: %s took %.1f ms", self._who(), self.stage, self.elapsed_ms)
        self.result = result
        if self.ctx.progress is not None:
            self.ctx.progress.step_done(self.stage, result.counts())
        failpoint(self.stage)  # the stage's output is written: a crash test may die here
        return result

    def _who(self) -> str:
        return self.ctx.source.source_id

    @abstractmethod
    def _execute(self, store: StateStore) -> R:
        """The stage itself (the run is open)."""

    @abstractmethod
    def _closed(self, run: dict[str, Any]) -> R:
        """The result of a step of a finished run (``run``: its run-log row): what the step
        would have returned, so that tasks after it line up."""

    def lineage(self, connection_address: Callable[[str], str] | None = None) -> StepLineage:
        """Source -> index, with this step's counts (none before it ran)."""
        source = self.ctx.source
        return StepLineage(
            stage=self.stage,
            source=source.source_id,
            run_id=self.ctx.run_id,
            inputs=[source_dataset(source)],
            outputs=[index_dataset(source.index, connection_address)],
            counts=self.result.counts() if self.result is not None else {},
            elapsed_ms=self.elapsed_ms,
        )


def _closed_counts(run: dict[str, Any]) -> CountsResult:
    return CountsResult(closed=True, totals=dict(run.get("counts") or {}))


# ----------------------------------------------------------------------------------- the steps


def start_run(ctx: RunContext, store: StateStore, dag_run_state: DagRunState | None = None) -> None:
    """Open the run in the run log (a retried discover reopens it; a finished run stays closed).

    First, earlier runs of the same source that died without closing (SIGKILLed) are marked
    failed and their staging removed (``plugins.engine.reaper``); ``dag_run_state`` (from the
    Airflow layer) judges Airflow runs, which are left alone without one.
    """
    if closed_run(ctx, store) is not None:
        return
    apply_event_trigger(ctx, store)  # an events run re-reads the items its events name
    sid = ctx.source.source_id
    keep_raw = retains_raw(ctx.source)
    reap_stale_runs(
        store,
        source=sid,
        exclude=(sid, ctx.run_id),
        dag_run_state=dag_run_state,
        keep_raw=lambda _: keep_raw,
    )
    store.start_run(
        ctx.run_id,
        sid,
        dag_id=ctx.dag_id or ctx.source.dag_id,
        run_type=ctx.run_type,
        params={**ctx.params.to_dict(), **({"trigger": ctx.trigger} if ctx.trigger else {})},
        window=(ctx.params.window_start, ctx.params.window_end),
        index_backend=ctx.source.index.backend,
        index_name=ctx.source.index.name,
        owner=process_owner() if ctx.run_type == "inline" else None,
    )


class DiscoverStep(Step[PlanResult]):
    """Open the run, ask the connector what changed, plan batches and deletions."""

    stage = "discover"

    def __init__(self, ctx: RunContext, dag_run_state: DagRunState | None = None) -> None:
        super().__init__(ctx)
        self.dag_run_state = dag_run_state  # the reaper's view of Airflow DAG runs (start_run)

    def _execute(self, store: StateStore) -> PlanResult:
        start_run(self.ctx, store, self.dag_run_state)
        planned = discover_stage(self.ctx, store)
        return PlanResult(plan=str(planned["plan"]), batches=[str(b) for b in planned["batches"]])

    def _closed(self, run: dict[str, Any]) -> PlanResult:
        # the batch names the run had, so that re-run mapped tasks line up (and do nothing)
        staging = self.ctx.staging
        count = int((run.get("counts") or {}).get("batches", 0))
        batches = [staging.stage_path("batch", n) for n in range(count)]
        return PlanResult(closed=True, plan=str(staging.path("discover.json")), batches=batches)


class ManifestStep(Step[ManifestResult]):
    """A step over one batch: reads the previous stage's manifest, writes ``output``'s."""

    output: ClassVar[str]  # the manifest stage it writes: fetched, parsed, chunked, upserted

    def __init__(self, ctx: RunContext, manifest: str) -> None:
        super().__init__(ctx)
        self.manifest = manifest

    def _closed(self, run: dict[str, Any]) -> ManifestResult:
        return ManifestResult(closed=True, manifest=next_manifest_path(self.manifest, self.output))

    def _who(self) -> str:
        return f"{self.ctx.source.source_id} {location_name(split_ref(self.manifest)[0])}"


class FetchStep(ManifestStep):
    """Fetch one batch's items through the connector. ``connect`` opens it (only if needed)."""

    stage = "fetch"
    output = "fetched"

    def __init__(self, ctx: RunContext, manifest: str, connect: ConnectorOpener) -> None:
        super().__init__(ctx, manifest)
        self.connect = connect

    def _execute(self, store: StateStore) -> ManifestResult:
        with self.connect() as connector:
            return ManifestResult.of(fetch_stage(self.manifest, connector))


class ParseStep(ManifestStep):
    """Parse a batch's fetched bytes (parser chosen by sniffed media type)."""

    stage = "parse"
    output = "parsed"

    def _execute(self, store: StateStore) -> ManifestResult:
        return ManifestResult.of(parse_stage(self.manifest, self.ctx.source, self.ctx.early))


class ChunkStep(ManifestStep):
    """Chunk a batch's parsed documents with the source's chunker."""

    stage = "chunk"
    output = "chunked"

    def _execute(self, store: StateStore) -> ManifestResult:
        return ManifestResult.of(chunk_stage(self.manifest, self.ctx.source, self.ctx.early))


class EmbedStep(ManifestStep):
    """Embed a batch's chunks whose text the index holds no vector of (the source's model).

    ``embedder_factory`` opens the embedder (default: the source's, through the embedder
    registry); it is called only when the batch has chunks to embed.
    """

    stage = "embed"
    output = "embedded"

    def __init__(
        self,
        ctx: RunContext,
        manifest: str,
        index_factory: IndexFactory,
        embedder_factory: EmbedderFactory | None = None,
    ) -> None:
        super().__init__(ctx, manifest)
        self.index_factory = index_factory
        self.embedder_factory = embedder_factory or (lambda: open_source_embedder(ctx.source))

    def _execute(self, store: StateStore) -> ManifestResult:
        path = embed_stage(self.manifest, self.ctx.source, self.index_factory, self.embedder_factory)
        result = ManifestResult.of(path)
        outcomes = [i.embedded for i in read_stage_manifest(path).items if i.embedded is not None]
        embedded, reused = sum(o.computed for o in outcomes), sum(o.reused for o in outcomes)
        return EmbedResult(**_fields(result), chunks_embedded=embedded, chunks_vector_reused=reused)


class UpsertStep(ManifestStep):
    """Write a batch's chunks (and vectors, after an :class:`EmbedStep`) to the source's index."""

    stage = "upsert"
    output = "upserted"

    def __init__(self, ctx: RunContext, manifest: str, index_factory: IndexFactory) -> None:
        super().__init__(ctx, manifest)
        self.index_factory = index_factory

    def _execute(self, store: StateStore) -> ManifestResult:
        return ManifestResult.of(upsert_stage(self.manifest, self.ctx.source, self.index_factory))


class CommitStep(Step[CountsResult]):
    """Apply deletions, then commit item state and lineage for what reached the index.

    ``plan`` and ``manifests`` are the refs discover and the upsert steps returned (with their
    digests): a plan changed in staging since is refused (:class:`StagingCorruptError`), and an
    ``upserted`` manifest changed since has its batch's items committed as ``staging_corrupt``
    failures instead of what it now says (:func:`~plugins.engine.manifests.replace_corrupt_manifests`).
    Without them (a DAG built before refs) commit reads the files as they are."""

    stage = "commit"

    def __init__(
        self, ctx: RunContext, index_factory: IndexFactory, manifests: Sequence[str] = (), plan: str | None = None
    ) -> None:
        super().__init__(ctx)
        self.index_factory = index_factory
        self.manifests = [str(m) for m in manifests if m]
        self.plan = plan

    def _execute(self, store: StateStore) -> CountsResult:
        if self.plan and split_ref(self.plan)[1] is not None:
            read_plan(self.plan)  # checked before commit reads it by its location
        replace_corrupt_manifests(self.manifests)
        totals = commit_stage(self.ctx, store, self.index_factory)
        consume_events(self.ctx, store, totals)  # after the commit stands: a failed run keeps its events
        return CountsResult(totals=totals)

    def _closed(self, run: dict[str, Any]) -> CountsResult:
        return _closed_counts(run)  # its commit stands


class FinishStep(Step[CountsResult]):
    """Close the run in the run log with commit's counts, clean its staging."""

    stage = "summary"

    def __init__(self, ctx: RunContext, counts: dict[str, Any]) -> None:
        super().__init__(ctx)
        self.counts = dict(counts)

    def _execute(self, store: StateStore) -> CountsResult:
        return CountsResult(totals=finish_stage(self.ctx, store, self.counts))

    def _closed(self, run: dict[str, Any]) -> CountsResult:
        return _closed_counts(run)
