"""Reusable Airflow operators for every stage of a sync, one step each.

Each operator only builds its step (``plugins.engine.steps``) from its arguments; the base,
:class:`~plugins.tributary_airflow.operators.base.StepOperator`, runs it and reports its lineage.
They exchange only manifest paths through XCom (the bytes live in the staging area), so they
can be dropped into any DAG::

    discover = DiscoverOperator(task_id="discover", source="web:demo")
    fetched = FetchOperator.partial(task_id="fetch", source="web:demo").expand(batch=discover.output)
    parsed = ParseOperator.partial(task_id="parse", source="web:demo").expand(manifest=fetched.output)
    chunked = ChunkOperator.partial(task_id="chunk", source="web:demo").expand(manifest=parsed.output)
    embedded = EmbedOperator.partial(task_id="embed", source="web:demo").expand(manifest=chunked.output)
    upserted = UpsertOperator.partial(task_id="upsert", source="web:demo").expand(manifest=embedded.output)
    upserted >> CommitStateOperator(task_id="commit", source="web:demo") >> RunSummaryOperator(...)

The DAG factory puts fetch to upsert in a task group mapped over the batches instead (one
lane per batch: batch *i*'s parse waits for batch *i*'s fetch, not for every fetch); mapped one
by one as above, each stage waits for the whole previous stage.
``embed`` is there only for a source with ``embedding`` enabled; without it ``upsert`` maps over
``chunk``'s manifests. Such a source also has ``ReembedOperator`` (``discover >> reembed >>
commit``): unchanged items needing new vectors only, re-embedded from their indexed chunk texts. A partitioned source (a web source over several hosts) opens the run with
``StartRunOperator``, crawls each partition in a mapped ``CrawlPartitionOperator`` and hands
their staged discoveries to ``DiscoverOperator(partials=crawl.output)``, which merges and plans. ``source`` is a source id (``kind:name``), DAG id or name from the sources file.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from functools import cached_property
from typing import Any

from airflow.sdk import Context

from plugins.connectors.base import Connector
from plugins.engine import RunContext, open_connector
from plugins.engine.partitions import CrawlPartitionStep, PartitionResult, PlanPartitionsStep, StartStep
from plugins.engine.reembed_step import ReembedStep
from plugins.engine.steps import (
    ChunkStep,
    CommitStep,
    CountsResult,
    DiscoverStep,
    EmbedStep,
    FetchStep,
    FinishStep,
    ManifestResult,
    ManifestStep,
    ParseStep,
    PlanResult,
    UpsertStep,
)
from plugins.tributary_airflow.callbacks import sdk_dag_run_state
from plugins.tributary_airflow.hooks.embedding import EmbeddingHook
from plugins.tributary_airflow.operators.base import StepOperator, run_context

__all__ = [
    "ChunkOperator",
    "CommitStateOperator",
    "CrawlPartitionOperator",
    "DiscoverOperator",
    "EmbedOperator",
    "FetchOperator",
    "ParseOperator",
    "ReembedOperator",
    "RunFailedError",
    "RunSummaryOperator",
    "StartRunOperator",
    "UpsertOperator",
    "run_context",
]


class StartRunOperator(StepOperator):
    """Open the run in the run log (a partitioned source's first task, before its crawls)."""

    def make_step(self, ctx: RunContext) -> StartStep:
        return StartStep(ctx, dag_run_state=sdk_dag_run_state())

    def xcom_value(self, result: Any, context: Context) -> None:
        return None


class CrawlPartitionOperator(StepOperator):
    """Discover one partition of a source (mapped: one task per partition); stages its listing.

    Returns the staged partial discovery's path (what ``DiscoverOperator(partials=...)`` merges).
    """

    template_fields: Sequence[str] = ("source", "partition", "part")

    def __init__(self, *, partition: str, part: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.partition = partition
        self.part = part

    def make_step(self, ctx: RunContext) -> CrawlPartitionStep:
        return CrawlPartitionStep(ctx, int(self.part), self.partition)

    def xcom_value(self, result: PartitionResult, context: Context) -> str:
        return result.partial


class DiscoverOperator(StepOperator):
    """Ask the connector what changed; plan fetch batches and deletions (mass-delete guarded).

    Returns the list of batch manifest paths (what ``fetch`` is mapped over); the plan itself
    is in the run's staging area (``discover.json``) and its path under the XCom key ``plan``.
    With ``partials`` (the crawl tasks' staged discoveries) it merges them instead of asking
    the connector, then plans the same way.
    """

    template_fields: Sequence[str] = ("source", "partials")

    def __init__(self, *, partials: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.partials = partials

    def make_step(self, ctx: RunContext) -> DiscoverStep:
        if self.partials is not None:
            return PlanPartitionsStep(ctx, [str(p) for p in self.partials], dag_run_state=sdk_dag_run_state())
        return DiscoverStep(ctx, dag_run_state=sdk_dag_run_state())

    def xcom_value(self, result: PlanResult, context: Context) -> list[str]:
        context["ti"].xcom_push(key="plan", value=result.plan)
        return result.batches


class FetchOperator(StepOperator):
    """Fetch one batch's items through the connector; writes the batch's ``fetched`` manifest."""

    template_fields: Sequence[str] = ("source", "batch")

    def __init__(self, *, batch: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.batch = batch

    def make_step(self, ctx: RunContext) -> FetchStep:
        return FetchStep(ctx, self.batch, lambda: _connector(ctx))

    def xcom_value(self, result: ManifestResult, context: Context) -> str:
        return result.manifest


def _connector(ctx: RunContext) -> AbstractContextManager[Connector]:
    return open_connector(ctx)


class _ManifestOperator(StepOperator):
    """A batch step after fetch: maps over the previous stage's manifests."""

    template_fields: Sequence[str] = ("source", "manifest")

    def __init__(self, *, manifest: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.manifest = manifest

    def xcom_value(self, result: ManifestResult, context: Context) -> str:
        return result.manifest


class ParseOperator(_ManifestOperator):
    """Parse a batch's fetched bytes into ParsedDocuments (parser chosen by sniffed media type)."""

    def make_step(self, ctx: RunContext) -> ManifestStep:
        return ParseStep(ctx, self.manifest)


class ChunkOperator(_ManifestOperator):
    """Chunk a batch's parsed documents with the source's chunker and options."""

    def make_step(self, ctx: RunContext) -> ManifestStep:
        return ChunkStep(ctx, self.manifest)


class EmbedOperator(_ManifestOperator):
    """Embed a batch's chunks whose text the index has no vector for (model, text hash); stage the vectors."""

    @cached_property
    def embedding_hook(self) -> EmbeddingHook:
        return EmbeddingHook.for_source(self.source)

    def make_step(self, ctx: RunContext) -> ManifestStep:
        return EmbedStep(ctx, self.manifest, self.index_hook.get_conn, self.embedding_hook.get_conn)


class ReembedOperator(StepOperator):
    """Re-embed the run's unchanged items that need new vectors only (another model), from their
    chunk texts in the index; once per run, beside the batches, before commit."""

    @cached_property
    def embedding_hook(self) -> EmbeddingHook:
        return EmbeddingHook.for_source(self.source)

    def make_step(self, ctx: RunContext) -> ReembedStep:
        return ReembedStep(ctx, self.index_hook.get_conn, self.embedding_hook.get_conn)

    def xcom_value(self, result: ManifestResult, context: Context) -> str:
        return result.manifest


class UpsertOperator(_ManifestOperator):
    """Write a batch's chunks (and their vectors) to the source's index (new first, stale deleted after)."""

    def make_step(self, ctx: RunContext) -> ManifestStep:
        return UpsertStep(ctx, self.manifest, self.index_hook.get_conn)


class CommitStateOperator(StepOperator):
    """Apply deletions, then commit item state and lineage for what reached the index."""

    template_fields: Sequence[str] = ("source", "manifests", "plan")

    def __init__(self, *, manifests: Any = None, plan: Any = None, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "none_failed")  # runs when there was nothing to fetch
        super().__init__(**kwargs)
        # the refs (path#size:sha256) the upsert tasks and discover returned: commit checks the
        # files against them before it reads them (a DAG built before refs passes neither)
        self.manifests = manifests
        self.plan = plan

    def make_step(self, ctx: RunContext) -> CommitStep:
        # the batch lane is a mapped task group: from outside it, its upserts' refs arrive as a
        # list, except for a run of one batch, whose one ref Airflow hands over bare
        refs = [self.manifests] if isinstance(self.manifests, str) else (self.manifests or ())
        manifests = [str(m) for m in refs if m]
        return CommitStep(ctx, self.index_hook.get_conn, manifests, str(self.plan) if self.plan else None)

    def xcom_value(self, result: CountsResult, context: Context) -> dict[str, Any]:
        return result.totals


class RunFailedError(RuntimeError):
    """The run ended ``failed`` (nothing was reached: the listing failed, the site was down, every
    fetch failed): the summary task fails, so the DAG run fails and its failure callback alerts."""


class RunSummaryOperator(StepOperator):
    """Close the run in the run log, clean staging, and attach the counts to the index asset event.

    The run's outcome decides the task's: ``failed`` raises :class:`RunFailedError` (also when a
    retry finds the run closed, so a retried summary cannot turn the DAG run green); ``partial``
    and ``success`` succeed (a partial run alerts by the source's thresholds, at the summary).
    """

    template_fields: Sequence[str] = ("source", "counts")

    def __init__(self, *, counts: Any, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "none_failed")
        super().__init__(**kwargs)
        self.counts = counts

    def make_step(self, ctx: RunContext) -> FinishStep:
        return FinishStep(ctx, dict(self.counts or {}))

    def xcom_value(self, result: CountsResult, context: Context) -> dict[str, Any]:
        counts = result.totals
        source, run_id = self.source, context["run_id"]
        if self._step is not None:
            source = self._step.ctx.source.source_id
        if counts.get("outcome") == "failed":
            raise RunFailedError(f"run {run_id} of {source} failed: {counts.get('outcome_note') or 'nothing reached'}")
        for outlet in self.outlets or []:
            context["outlet_events"][outlet].extra = {"source": source, "run_id": run_id, **counts}
        self.log.info("run %s of %s: %s", run_id, source, counts)
        return counts
