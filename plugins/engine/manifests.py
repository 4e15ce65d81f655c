"""Stage manifests: the small JSON files that carry one batch from stage to stage.

Every stage reads the previous stage's manifest of a batch (:class:`BatchManifest`) and writes
its own, carrying the batch's failures and unchanged items forward, so the last manifest of a
batch is a complete account of it. The records and their JSON form are in
:mod:`plugins.engine.records`; this module reads and writes the files.

Staged files are checked when read back: an item records the size and SHA-256 of its raw bytes
(``raw.file``; ``staged`` for bytes a crawler staged during discovery), of its parsed document
(``parsed.file``) and of its chunks (``chunked.file``). A mismatch is a retryable *fetch*
failure of that item (reason ``staging_corrupt``): it is not indexed, and its stored version is
not advanced, so the next run fetches it again instead of being told "not modified".
"""

from __future__ import annotations

import dataclasses

from include.contract import Change, Chunk, RawDocument
from include.staging import StagingArea, StagingCorruptError, StagingTooLargeError, file_digest
from include.staging.locations import join, location_name, location_parent
from include.vectors import VectorFileError, VectorSet, decode_vectors
from plugins.engine.packed import PackedReader
from plugins.engine.records import (
    BatchManifest,
    ItemFailure,
    ItemRecord,
    RawRef,
    RunPlan,
    StagedRef,
    decode,
    encode,
)

__all__ = [
    "STAGING_CORRUPT",
    "ItemFailure",
    "corrupt_failure",
    "load_chunks",
    "load_raw",
    "load_vectors",
    "next_manifest_path",
    "read_batch",
    "read_plan",
    "read_stage_manifest",
    "write_batch_manifest",
    "write_fetched_manifest",
    "write_plan",
    "write_stage_manifest",
]


STAGING_CORRUPT = StagingCorruptError.reason


def corrupt_failure(item_key: str, exc: StagingCorruptError) -> ItemFailure:
    """A staged file of this item changed after it was written: fetch it again next run."""
    return ItemFailure(item_key, STAGING_CORRUPT, str(exc), retryable=True, stage="fetch")


def read_stage_manifest(path: str) -> BatchManifest:
    """A batch's manifest of any stage (:class:`~plugins.engine.records.ManifestError` if it is
    not one)."""
    return decode(BatchManifest, StagingArea.read_json(path), path)


def read_plan(path: str) -> RunPlan:
    return decode(RunPlan, StagingArea.read_json(path), str(path))


def write_plan(staging: StagingArea, plan: RunPlan) -> str:
    """Write ``discover.json`` (atomically: its existence means the run is planned)."""
    return staging.write_json("discover.json", encode(plan))


def write_batch_manifest(staging: StagingArea, manifest: BatchManifest) -> str:
    return staging.write_json(f"batch-{manifest.batch:04d}.json", encode(manifest))


def next_manifest_path(path: str, stage: str) -> str:
    """``.../batch-0003.json`` -> ``.../<stage>-0003.json`` (same run directory, same batch)."""
    number = location_name(path).removesuffix(".json").rsplit("-", 1)[1]
    return join(location_parent(path), f"{stage}-{number}.json")


def write_stage_manifest(prev_path: str, manifest: BatchManifest) -> str:
    """Write ``manifest`` (of stage ``manifest.stage``) beside the previous stage's one."""
    target = next_manifest_path(prev_path, manifest.stage)
    return StagingArea.of(target).write_json(location_name(target), encode(manifest))


def read_batch(manifest_path: str) -> list[Change]:
    """The changes of one batch manifest (what a fetch operator must fetch)."""
    return [item.change for item in read_stage_manifest(manifest_path).items]


def write_fetched_manifest(batch_manifest_path: str, fetched: list[RawDocument], failures: list[ItemFailure]) -> str:
    """Stage fetched documents' bytes and write the ``fetched`` manifest for this batch.

    Used by the generic fetch task and by connector-specific fetch operators alike.
    """
    batch = read_stage_manifest(batch_manifest_path)
    staging = StagingArea.of(batch_manifest_path)
    by_key = {item.item_key: item for item in batch.items}
    out = batch.next("fetched")
    out.failures.extend(failures)
    for raw in fetched:
        item = by_key[raw.item_key]
        try:
            ref = _already_staged(staging, item, raw) or _stage_raw(staging, raw)
        except StagingTooLargeError as exc:  # this file, not the batch: staging's cap per object
            out.failures.append(ItemFailure(raw.item_key, exc.reason, str(exc), False, "fetch"))
            continue
        if (problem := _differs_from_staged(item, ref)) is not None:
            out.failures.append(corrupt_failure(raw.item_key, StagingCorruptError(problem)))
            continue
        out.items.append(dataclasses.replace(item, raw=_raw_ref(raw, ref)))
    return write_stage_manifest(batch_manifest_path, out)


def _stage_raw(staging: StagingArea, raw: RawDocument) -> StagedRef:
    path = staging.stage_raw(raw.item_key, raw.data, raw.file_name)
    digest = staging.staged_digest(path)  # hashed once, by stage_raw
    assert digest is not None
    return StagedRef(path, int(digest["size"]), str(digest["sha256"]))


def _already_staged(staging: StagingArea, item: ItemRecord, raw: RawDocument) -> StagedRef | None:
    """The file discovery staged in this run's ``raw/``, when the fetched bytes are those (a
    crawler's page read back): writing them again would only cost a file replace per page."""
    staged = item.staged
    if staged is None or len(raw.data) != staged.size or not staged.path.startswith(staging.path("raw") + "/"):
        return None
    if file_digest(raw.data)["sha256"] != staged.sha256 or not StagingArea.exists_at(staged.path):
        return None
    return staged


def _raw_ref(raw: RawDocument, ref: StagedRef) -> RawRef:
    return RawRef(
        file=ref,
        file_name=raw.file_name,
        byte_size=len(raw.data),
        media_type=raw.media_type,
        url=raw.url,
        title=raw.title,
        version=raw.version,
        metadata=raw.metadata,
    )


def _differs_from_staged(item: ItemRecord, fetched: StagedRef) -> str | None:
    """Why the fetched bytes are not those discovery staged (a crawler's page), else None."""
    staged = item.staged
    if staged is None or (staged.size, staged.sha256) == (fetched.size, fetched.sha256):
        return None
    return (
        f"staged file {staged.path} read back as {fetched.size} bytes (sha256 {fetched.sha256[:16]}...); "
        f"discovery staged {staged.size} bytes (sha256 {staged.sha256[:16]}...)"
    )


def load_raw(item: ItemRecord) -> RawDocument:
    """Rebuild the RawDocument of a fetched item (:class:`StagingCorruptError` when its staged
    bytes are not those that were fetched)."""
    raw = item.raw
    if raw is None:
        raise ValueError(f"item {item.item_key!r} was not fetched: it has no staged raw bytes")
    return RawDocument(
        item_key=item.item_key,
        data=StagingArea.read_verified(raw.file.path, raw.file.digest()),
        file_name=raw.file_name,
        media_type=raw.media_type,
        url=raw.url,
        title=raw.title,
        version=raw.version,
        metadata=dict(raw.metadata),
    )


def load_chunks(item: ItemRecord, reader: PackedReader | None = None) -> list[Chunk]:
    """The chunks chunking staged for an item (:class:`StagingCorruptError` if they changed).

    A stage reading a whole batch passes one ``reader``, so the batch's chunk file is verified
    and decoded once, not once per item."""
    chunked = item.chunked
    if chunked is None:
        raise ValueError(f"item {item.item_key!r} was not chunked: it has no staged chunks")
    return (reader or PackedReader()).chunks(chunked.file, item.item_key)


def load_vectors(item: ItemRecord, chunks: list[Chunk]) -> VectorSet | None:
    """The vectors the embedding stage staged for an item, one per chunk in chunk order; None for
    an item of a source without embedding. A file that changed since, or that does not fit the
    item's chunks, is a :class:`StagingCorruptError`."""
    embedded = item.embedded
    if embedded is None:
        return None
    data = StagingArea.read_verified(embedded.file.path, embedded.file.digest())
    try:
        vectors = decode_vectors(data)
    except VectorFileError as exc:
        raise StagingCorruptError(f"staged vectors {embedded.file.path}: {exc}") from None
    if vectors.chunk_ids != [c.chunk_id for c in chunks] or vectors.model != embedded.model:
        raise StagingCorruptError(f"staged vectors {embedded.file.path} do not match the item's chunks or model")
    return vectors
