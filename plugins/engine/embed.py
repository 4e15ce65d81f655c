"""The embedding stage of one batch: chunk vectors, computed only for text not embedded before.

Runs between chunk and upsert for a source with ``embedding`` enabled (a BM25-only source has no
such stage). For the batch's chunks it asks the index for vectors it already holds under the
same model and chunk text hash (:meth:`~include.index.IndexBackend.vectors_for`, the vector
cache), embeds only the misses (each distinct text once, ``embedding.batch_size`` texts per
request, the provider's ``max_in_flight`` requests' worth per call), checks every row (dimension, finite values) and stages one vector file per document
(:mod:`include.vectors`, every chunk of the document in chunk order) for the upsert.

Failures follow the engine's rule: a text the model refuses or answers badly (wrong dimension,
NaN) fails the documents holding it, reason ``embed:<reason>``, and the batch goes on; a
retryable :class:`~plugins.embedders.base.EmbeddingError` (the endpoint unreachable, rate
limited past its retries) raises, so the task fails and Airflow retries it; so does one about
the endpoint itself (``about_endpoint``: its address or key refused), which no document caused.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from include.config import SourceConfig
from include.contract import Chunk
from include.index import IndexBackend
from include.staging import StagingArea, StagingCorruptError
from include.vectors import VectorSet, encode_vectors
from plugins.embedders.base import EmbeddedTexts, Embedder, EmbeddingError
from plugins.embedders.registry import open_embedder
from plugins.engine.manifests import corrupt_failure, load_chunks, read_stage_manifest, write_stage_manifest
from plugins.engine.packed import PackedReader
from plugins.engine.records import EmbedOutcome, ItemFailure, ItemRecord, StagedRef, TruncatedChunk

__all__ = [
    "BatchVectors",
    "EmbedderFactory",
    "batch_vectors",
    "document_vectors",
    "embed_outcome",
    "embed_stage",
    "open_source_embedder",
]

log = logging.getLogger("tributary")

EmbedderFactory = Callable[[], Embedder]
Vector = npt.NDArray[np.float32]


def open_source_embedder(source: SourceConfig) -> Embedder:
    """The embedder of a source's ``embedding`` block (the registry reads the endpoint's
    Connection when the provider needs one)."""
    embedder = open_embedder(source.embedding)
    if embedder is None:
        raise ValueError(f"{source.source_id}: embedding provider {source.embedding.provider!r} embeds nothing")
    return embedder


@dataclass(slots=True)
class BatchVectors:
    """What one batch knows by chunk text hash: cached and computed vectors, failed texts and
    truncations."""

    dimensions: int
    cached: dict[str, Vector]
    computed: dict[str, Vector] = field(default_factory=dict)
    failed: dict[str, tuple[str, str]] = field(default_factory=dict)  # reason, message
    truncated: dict[str, tuple[int, int]] = field(default_factory=dict)  # tokens, kept

    def vector(self, text_hash: str) -> Vector:
        return self.cached[text_hash] if text_hash in self.cached else self.computed[text_hash]


def _usable(vectors: dict[str, Vector], dimensions: int) -> dict[str, Vector]:
    """Cached vectors of the right size and finite (anything else is embedded again)."""
    return {
        h: np.asarray(v, dtype=np.float32)
        for h, v in vectors.items()
        if np.shape(v) == (dimensions,) and bool(np.isfinite(v).all())
    }


def _bad_rows(result: EmbeddedTexts, count: int, dimensions: int) -> dict[int, tuple[str, str]]:
    """Rows of an answer that cannot be stored, with why (the whole call when its shape is wrong)."""
    matrix = np.asarray(result.vectors)
    if matrix.ndim != 2 or matrix.shape[0] != count:
        return dict.fromkeys(range(count), ("shape", f"the embedder answered {matrix.shape} for {count} texts"))
    if matrix.shape[1] != dimensions:
        problem = ("dimension", f"vectors of {matrix.shape[1]} dimensions, {dimensions} expected")
        return dict.fromkeys(range(count), problem)
    finite = np.isfinite(matrix).all(axis=1)
    return {int(r): ("not_finite", "the vector holds NaN or infinite values") for r in np.flatnonzero(~finite)}


def _embed_group(embedder: Embedder, hashes: Sequence[str], texts: Sequence[str], found: BatchVectors) -> int:
    """Embed one call's texts into ``found``; a refused row is recorded and the others are kept
    from the error (a provider that sends their vectors along), else asked again without it.
    Returns the number of texts sent to the model."""
    pending = list(range(len(texts)))
    sent = 0
    while pending:
        sent += len(pending)
        result: EmbeddedTexts | None = None
        try:
            result = embedder.embed_documents([texts[i] for i in pending])
            bad = _bad_rows(result, len(pending), found.dimensions)
        except EmbeddingError as exc:
            if exc.retryable or exc.about_endpoint:
                raise
            rows = [r for r in exc.rows if 0 <= r < len(pending)] or list(range(len(pending)))
            bad = dict.fromkeys(rows, (exc.reason, str(exc)))
            partial = exc.partial  # the other rows' vectors, when they came with the error
            if exc.rows and partial is not None and np.shape(partial.vectors) == (len(pending), found.dimensions):
                result = partial
                bad = {**_bad_rows(partial, len(pending), found.dimensions), **bad}
        for row, problem in bad.items():
            found.failed[hashes[pending[row]]] = problem
        if result is not None:
            for row, i in enumerate(pending):
                if row not in bad:
                    found.computed[hashes[i]] = np.asarray(result.vectors[row], dtype=np.float32)
            for cut in result.truncated:
                if 0 <= cut.row < len(pending):
                    found.truncated[hashes[pending[cut.row]]] = (cut.tokens, cut.kept)
            return sent
        pending = [i for row, i in enumerate(pending) if row not in bad]
    return sent


def _embed_misses(embedder: Embedder, chunks: Sequence[Chunk], found: BatchVectors, batch_size: int) -> None:
    """Embed each distinct chunk text the cache does not hold, ``batch_size`` texts per call."""
    misses: dict[str, str] = {}
    for chunk in chunks:
        if chunk.text_hash not in found.cached:
            misses.setdefault(chunk.text_hash, chunk.text)
    hashes, texts = list(misses), list(misses.values())
    for start in range(0, len(hashes), batch_size):
        _embed_group(embedder, hashes[start : start + batch_size], texts[start : start + batch_size], found)


def document_vectors(
    item: ItemRecord, chunks: list[Chunk], found: BatchVectors, claimed: set[str], model: str
) -> tuple[VectorSet, list[TruncatedChunk]] | ItemFailure:
    """A document's vector set (reused: from the cache, or computed for an earlier chunk of the
    batch with the same text), or its failure when one of its texts could not be embedded."""
    problems = [found.failed[c.text_hash] for c in chunks if c.text_hash in found.failed]
    if problems:
        reason, message = problems[0]
        return ItemFailure(
            item.item_key,
            f"embed:{reason}",
            f"{len(problems)} of {len(chunks)} chunks could not be embedded: {message}",
            retryable=False,
            stage="embed",
        )
    reused: list[bool] = []
    truncated: list[TruncatedChunk] = []
    for chunk in chunks:
        reused.append(chunk.text_hash in found.cached or chunk.text_hash in claimed)
        claimed.add(chunk.text_hash)
        if not reused[-1] and (cut := found.truncated.get(chunk.text_hash)):
            truncated.append(TruncatedChunk(chunk.chunk_id, *cut))
    matrix = np.zeros((len(chunks), found.dimensions), dtype=np.float32)
    for row, chunk in enumerate(chunks):
        matrix[row] = found.vector(chunk.text_hash)
    return VectorSet(model, found.dimensions, [c.chunk_id for c in chunks], matrix, reused), truncated


def _staged_chunks(items: Sequence[ItemRecord], failures: list[ItemFailure]) -> list[tuple[ItemRecord, list[Chunk]]]:
    loaded = []
    reader = PackedReader()  # the batch's chunk file: verified and decoded once
    for item in items:
        try:
            loaded.append((item, load_chunks(item, reader)))
        except StagingCorruptError as exc:
            failures.append(corrupt_failure(item.item_key, exc))
    return loaded


def _cached(index_factory: Callable[[], IndexBackend], model: str, hashes: set[str]) -> dict[str, Vector]:
    index = index_factory()
    try:
        return index.vectors_for(model, sorted(hashes))
    finally:
        index.close()


def _stage_vectors(
    staging: StagingArea, item: ItemRecord, chunks: list[Chunk], vectors: VectorSet, truncated: list[TruncatedChunk]
) -> EmbedOutcome | ItemFailure:
    """Stage one document's vector file; a document with more chunks than one file's header
    holds fails alone (it would fail the same way every run: not retryable)."""
    try:
        data = encode_vectors(vectors)
    except ValueError as exc:
        return ItemFailure(item.item_key, "embed:too_many_chunks", str(exc), retryable=False, stage="embed")
    doc_id = item.chunked.doc_id if item.chunked else chunks[0].doc_id
    staged = staging.put_bytes(f"vectors/{doc_id}.tvec", data)
    return embed_outcome(vectors, truncated, StagedRef.of(staged))


def embed_outcome(vectors: VectorSet, truncated: list[TruncatedChunk], file: StagedRef | None) -> EmbedOutcome:
    """A document's embedding outcome: its vectors' model, what was computed and what reused
    (``file``: the staged vector file; None when the vectors went to the index directly)."""
    reused_ids = [cid for cid, r in zip(vectors.chunk_ids, vectors.reused, strict=True) if r]
    return EmbedOutcome(
        model=vectors.model,
        dimensions=vectors.dimensions,
        file=file,
        computed=len(vectors.chunk_ids) - len(reused_ids),
        reused=len(reused_ids),
        reused_chunk_ids=reused_ids,
        truncated=truncated,
    )


def batch_vectors(
    chunks: Sequence[Chunk],
    source: SourceConfig,
    index_factory: Callable[[], IndexBackend],
    embedder_factory: EmbedderFactory,
) -> tuple[BatchVectors, str]:
    """(what the batch knows by text hash, the model): the index's cached vectors of the model,
    and each distinct text it lacks embedded once. Shared by the embed and re-embed stages."""
    embedder = embedder_factory()
    try:
        model, dims = embedder.model_id, embedder.dimensions
        cached = _usable(_cached(index_factory, model, {c.text_hash for c in chunks}), dims)
        found = BatchVectors(dims, cached)
        # enough texts per call for the provider's requests in flight (one batch each)
        _embed_misses(embedder, chunks, found, source.embedding.batch_size * max(1, embedder.max_in_flight))
    finally:
        embedder.close()
    return found, model


def embed_stage(
    chunked_path: str,
    source: SourceConfig,
    index_factory: Callable[[], IndexBackend],
    embedder_factory: EmbedderFactory,
) -> str:
    """Stage the vectors of every chunked item of a batch; returns the ``embedded`` manifest."""
    manifest = read_stage_manifest(chunked_path)
    out = manifest.next("embedded")
    staging = StagingArea.of(chunked_path)
    docs = _staged_chunks(manifest.items, out.failures)
    if not docs:
        return write_stage_manifest(chunked_path, out)
    start = time.perf_counter()
    all_chunks = [c for _, chunks in docs for c in chunks]
    found, model = batch_vectors(all_chunks, source, index_factory, embedder_factory)
    elapsed = round((time.perf_counter() - start) * 1000 / len(docs), 2)
    claimed: set[str] = set()
    for item, chunks in docs:
        done = document_vectors(item, chunks, found, claimed, model)
        outcome = done if isinstance(done, ItemFailure) else _stage_vectors(staging, item, chunks, *done)
        if isinstance(outcome, ItemFailure):
            log.warning("%s: %s not embedded: %s", source.source_id, item.item_key, outcome.error)
            out.failures.append(outcome)
            continue
        if outcome.truncated:
            log.warning(
                "%s: %s: %d chunks truncated to the model's input limit",
                source.source_id,
                item.item_key,
                len(outcome.truncated),
            )
        out.items.append(dataclasses.replace(item, embedded=outcome, stage_ms={**item.stage_ms, "embed": elapsed}))
    return write_stage_manifest(chunked_path, out)
