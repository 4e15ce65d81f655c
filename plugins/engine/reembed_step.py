"""The re-embedding step (:mod:`plugins.engine.reembed`): one per run, after discover and before
commit, for a source with embedding enabled; the in-process runner and the Airflow DAG run it."""

from __future__ import annotations

from typing import Any

from include.stores import StateStore
from plugins.engine.context import RunContext
from plugins.engine.embed import EmbedderFactory, open_source_embedder
from plugins.engine.manifests import read_stage_manifest
from plugins.engine.reembed import REEMBEDDED, reembed_stage
from plugins.engine.steps import EmbedResult, IndexFactory, ManifestResult, Step

__all__ = ["ReembedStep", "run_reembed"]


class ReembedStep(Step[EmbedResult]):
    """Re-embed the plan's ``reembed`` items from their indexed chunk texts (once per run)."""

    stage = "reembed"

    def __init__(
        self, ctx: RunContext, index_factory: IndexFactory, embedder_factory: EmbedderFactory | None = None
    ) -> None:
        super().__init__(ctx)
        self.index_factory = index_factory
        self.embedder_factory = embedder_factory or (lambda: open_source_embedder(ctx.source))

    def _execute(self, store: StateStore) -> EmbedResult:
        path = reembed_stage(self.ctx, self.index_factory, self.embedder_factory)
        result = ManifestResult.of(path)
        outcomes = [i.embedded for i in read_stage_manifest(path).items if i.embedded is not None]
        return EmbedResult(
            manifest=result.manifest,
            items=result.items,
            failed=result.failed,
            chunks_embedded=sum(o.computed for o in outcomes),
            chunks_vector_reused=sum(o.reused for o in outcomes),
        )

    def _closed(self, run: dict[str, Any]) -> EmbedResult:
        return EmbedResult(closed=True, manifest=self.ctx.staging.path(REEMBEDDED))


def run_reembed(
    ctx: RunContext, store: StateStore, index_factory: IndexFactory, embedder: EmbedderFactory | None
) -> None:
    """The in-process runner's re-embedding: only a source with embedding has one."""
    if ctx.source.embedding.enabled:
        ReembedStep(ctx, index_factory, embedder).run(store)
