"""Re-embedding: new vectors for indexed chunks whose texts stand (issue 36, point 5).

An item processed otherwise than now only in its embedding (another model, other dimensions:
:func:`plugins.engine.processed.reembed_reason`) and unchanged at its source is not re-fetched:
discover puts it in the plan's ``reembed`` list. This stage, once per run (after discover, before
commit), reads those items' chunk texts from the index, embeds them with the embed stage's own
machinery (:func:`plugins.engine.embed.batch_vectors`: the index's vectors of the new model by
text hash, each distinct text embedded once per group, a refused row failing its document only,
truncations recorded) and writes the vectors for the same chunk ids
(:meth:`~include.index.IndexBackend.replace_vectors`). No fetch, parse or chunk; chunk ids and
texts are unchanged. Commit then records the new embedding in the items' state
(:func:`commit_reembedded`); the step is :class:`plugins.engine.reembed_step.ReembedStep`: the index is written first, the state after.

Writes ``reembedded.json`` (a manifest of stage ``reembedded``: the items re-embedded, the ones
that failed); a retried task finding it does nothing, its vectors being in the index already. A
failed item keeps its state (its old record), so the next run plans it again; one whose chunks
are gone from the index by then is re-fetched whole (discover checks).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from include.contract import Chunk
from include.index import IndexBackend
from include.stores import ItemState, RunItem
from include.vectors import VectorSet
from plugins.engine.commit_rules import CommitBook, count_embedded, embedding_lineage, merge_observed_version
from plugins.engine.context import RunContext
from plugins.engine.embed import EmbedderFactory, batch_vectors, document_vectors, embed_outcome
from plugins.engine.manifests import read_plan, read_stage_manifest
from plugins.engine.records import BatchManifest, ItemFailure, ItemRecord, RunPlan, TruncatedChunk, encode

__all__ = ["REEMBEDDED", "IndexFactory", "commit_reembedded", "reembed_stage", "reembedded_manifest"]

log = logging.getLogger("tributary")

IndexFactory = Callable[[], IndexBackend]

REEMBEDDED = "reembedded.json"
NOT_A_BATCH = -1  # the manifest's batch number: the stage runs once per run, over no batch
CHUNK_MISSING = "reembed:chunk_missing"


def _indexed_chunks(index: IndexBackend, item: ItemRecord) -> list[Chunk] | ItemFailure:
    """The item's chunks as the index holds them, in its recorded order, or why not."""
    chunks: list[Chunk] = []
    for number, chunk_id in enumerate(item.prior.chunk_ids if item.prior else []):
        row = index.get_chunk(chunk_id)
        if row is None or not row.get("text_hash"):
            return ItemFailure(
                item.item_key,
                CHUNK_MISSING,
                f"chunk {chunk_id} is not in the index: the next run fetches the item again",
                retryable=True,
                stage="embed",
            )
        chunks.append(
            Chunk(
                chunk_id=chunk_id,
                doc_id=str(row["doc_id"]),
                sequence=int(row.get("seq") or number),
                text=str(row.get("text") or ""),
                token_count=int(row.get("token_count") or 0),
                text_hash=str(row["text_hash"]),
            )
        )
    return chunks


def _read_group(index_factory: IndexFactory, items: Sequence[ItemRecord], out: BatchManifest) -> list[Any]:
    index = index_factory()
    try:
        found = [(item, _indexed_chunks(index, item)) for item in items]
    finally:
        index.close()
    out.failures.extend(chunks for _, chunks in found if isinstance(chunks, ItemFailure))
    return [(item, chunks) for item, chunks in found if not isinstance(chunks, ItemFailure) and chunks]


def _reembed_group(
    ctx: RunContext,
    items: Sequence[ItemRecord],
    index_factory: IndexFactory,
    embedder_factory: EmbedderFactory,
    out: BatchManifest,
) -> None:
    """Re-embed one group of items: read their chunks, embed, write the vectors, record each."""
    docs = _read_group(index_factory, items, out)
    if not docs:
        return
    found, model = batch_vectors([c for _, chunks in docs for c in chunks], ctx.source, index_factory, embedder_factory)
    claimed: set[str] = set()
    ready: dict[str, tuple[ItemRecord, VectorSet, list[TruncatedChunk]]] = {}
    for item, chunks in docs:
        done = document_vectors(item, chunks, found, claimed, model)
        if isinstance(done, ItemFailure):
            log.warning("%s: %s not re-embedded: %s", ctx.source.source_id, item.item_key, done.error)
            out.failures.append(done)
        else:
            ready[chunks[0].doc_id] = (item, *done)
    index = index_factory()
    try:
        errors = index.replace_vectors(ctx.source.source_id, {doc: v for doc, (_, v, _) in ready.items()})
    finally:
        index.close()
    for doc_id, (item, vectors, truncated) in ready.items():
        if doc_id in errors:
            out.failures.append(ItemFailure(item.item_key, "reembed:index_write", errors[doc_id], stage="upsert"))
        else:
            out.items.append(dataclasses.replace(item, embedded=embed_outcome(vectors, truncated, None)))


def reembed_stage(ctx: RunContext, index_factory: IndexFactory, embedder_factory: EmbedderFactory) -> str:
    """Re-embed the plan's ``reembed`` items, ``batch_size`` items per group; ``reembedded.json``'s ref."""
    staging = ctx.staging
    if staging.has(REEMBEDDED):  # a retried task: what it wrote is in the index
        return staging.path(REEMBEDDED)
    plan = read_plan(staging.path("discover.json"))
    out = BatchManifest(ctx.run_id, ctx.source.source_id, NOT_A_BATCH, "reembedded")
    if not plan.dry_run:
        size = max(1, ctx.source.batch_size)
        for start in range(0, len(plan.reembed), size):
            _reembed_group(ctx, plan.reembed[start : start + size], index_factory, embedder_factory, out)
    return staging.put_json(REEMBEDDED, encode(out)).ref()


def reembedded_manifest(ctx: RunContext, plan: RunPlan) -> BatchManifest | None:
    """The re-embedding's manifest, for commit; None when the plan has nothing to re-embed.
    A plan with items to re-embed and no manifest refuses the commit (its items would be lost)."""
    if not plan.reembed or plan.dry_run:
        return None
    if not ctx.staging.has(REEMBEDDED):
        raise FileNotFoundError(
            f"run {ctx.run_id} of {ctx.source.source_id}: {len(plan.reembed)} items to re-embed and no "
            f"{REEMBEDDED}; nothing was committed. Re-run the reembed task, then commit."
        )
    return read_stage_manifest(ctx.staging.path(REEMBEDDED))


def _reembedded_state(st: ItemState, item: ItemRecord, plan: RunPlan, run_id: str) -> ItemState:
    assert item.embedded is not None
    record = dict(st.processed_with or {})
    record["embedding"] = {"model": item.embedded.model, "dimensions": item.embedded.dimensions}
    hashes = {"options": plan.processing_options, "text_options": plan.processing_text_options}
    record.update({name: value for name, value in hashes.items() if value})
    st.processed_with, st.processing_hash = record, plan.processing_hash
    st.version = merge_observed_version(st.version, item.change.version, st.content_hash)
    st.last_seen_run, st.last_indexed_run, st.missing_runs, st.failure_count = run_id, run_id, 0, 0
    st.last_error = st.last_error_reason = None
    return st


def commit_reembedded(
    items: Sequence[ItemRecord], prior_states: Mapping[str, ItemState], plan: RunPlan, run_id: str, book: CommitBook
) -> None:
    """Items whose new vectors are in the index: their state records the new embedding. They
    count as ``unchanged`` (their source and chunks are) and ``reembedded``, under their reason."""
    for item in items:
        st = prior_states.get(item.item_key)
        if st is None or item.embedded is None:
            continue
        embedded = item.embedded
        book.states.append(_reembedded_state(st, item, plan, run_id))
        book.lineage.append(
            RunItem(
                item_key=item.item_key,
                action="unchanged",
                doc_id=st.doc_id,
                reason=f"re-embedded from the indexed chunk texts ({item.forced_reason or 'embedding changed'})",
                version_before=item.prior.version_dict if item.prior else None,
                version_after=st.version.to_dict() if st.version else None,
                content_hash=st.content_hash,
                chunks_kept=list(st.chunk_ids),
                **embedding_lineage(embedded, st.chunk_ids),
            )
        )
        book.counts["unchanged"] += 1
        book.counts["reembedded"] += 1
        book.reprocessed[item.forced_reason or "embedding changed"] += 1
        count_embedded(book, embedded)
