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

The manifests are checked the same way. Every function here that writes one returns its *ref*,
``<location>#<size>:<sha256>`` (:meth:`include.staging.StagedFile.ref`): the string the step
returns to Airflow's XCom or the runner, and the next step is given. Reading a stage manifest
whose bytes no longer match its ref (:func:`read_stage_manifest`) yields in its place a manifest
of the same batch and stage whose items all failed as ``staging_corrupt``, so none of its
content (a title, a chunk id) is indexed or committed and the items are fetched again next run.
The plan (``discover.json``) is checked too; a changed plan is refused (:func:`read_plan`).
A bare location (a run started before refs, resumed by this engine) is still read, unchecked.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from include.contract import Change, Chunk, RawDocument
from include.staging import StagingArea, StagingCorruptError, StagingTooLargeError, file_digest, split_ref
from include.staging.locations import join, location_name, location_parent
from include.vectors import VectorFileError, VectorSet, decode_vectors
from plugins.engine.packed import PackedReader
from plugins.engine.records import (
    BatchManifest,
    ItemFailure,
    ItemRecord,
    ManifestError,
    RawRef,
    RunPlan,
    Stage,
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
    "replace_corrupt_manifests",
    "write_batch_manifest",
    "write_fetched_manifest",
    "write_plan",
    "write_stage_manifest",
    "written_counts",
]


STAGING_CORRUPT = StagingCorruptError.reason


def corrupt_failure(item_key: str, exc: StagingCorruptError) -> ItemFailure:
    """A staged file of this item changed after it was written: fetch it again next run."""
    return ItemFailure(item_key, STAGING_CORRUPT, str(exc), retryable=True, stage="fetch")


log = logging.getLogger("tributary")


def read_stage_manifest(ref: str) -> BatchManifest:
    """A batch's manifest of any stage (:class:`~plugins.engine.records.ManifestError` if it is
    not one). ``ref`` carries the digest the writing step recorded; when the file no longer
    matches it, the batch's items come back failed as ``staging_corrupt`` instead
    (:func:`_failed_batch`): nothing the changed file says is indexed or committed."""
    path, digest = split_ref(ref)
    try:
        data = StagingArea.read_verified(path, digest)
    except StagingCorruptError as exc:
        log.warning(
            "stage manifest %s changed in staging: %s; its batch's items fail as %s", path, exc, STAGING_CORRUPT
        )
        return _failed_batch(path, str(exc))
    return decode(BatchManifest, _json(data, path), path)


def read_plan(ref: str) -> RunPlan:
    """The run's plan; :class:`StagingCorruptError` when it no longer matches its ref (a plan
    decides deletions and what is unchanged: none of it can be trusted, nor failed item by item)."""
    path, digest = split_ref(ref)
    return decode(RunPlan, _json(StagingArea.read_verified(path, digest), path), path)


def _json(data: bytes, path: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ManifestError(path, "?", f"not JSON: {exc}") from None


def write_plan(staging: StagingArea, plan: RunPlan) -> str:
    """Write ``discover.json`` (atomically: its existence means the run is planned); its ref."""
    return staging.put_json("discover.json", encode(plan)).ref()


def write_batch_manifest(staging: StagingArea, manifest: BatchManifest) -> str:
    """Write a batch's first manifest; its ref (what the plan lists and fetch is given)."""
    return staging.put_json(f"batch-{manifest.batch:04d}.json", encode(manifest)).ref()


def next_manifest_path(path: str, stage: str) -> str:
    """``.../batch-0003.json`` (or its ref) -> ``.../<stage>-0003.json`` (same run directory, same batch)."""
    location = split_ref(path)[0]
    return join(location_parent(location), f"{stage}-{_batch_number(location):04d}.json")


def _batch_number(location: str) -> int:
    return int(location_name(location).removesuffix(".json").rsplit("-", 1)[1])


def write_stage_manifest(prev_path: str, manifest: BatchManifest) -> str:
    """Write ``manifest`` (of stage ``manifest.stage``) beside the previous stage's one; its ref."""
    target = next_manifest_path(prev_path, manifest.stage)
    ref = StagingArea.of(target).put_json(location_name(target), encode(manifest)).ref()
    with _written_lock:  # the index lane's thread writes too
        if len(_written) >= 64:  # a step that never asked (a tool writing manifests): forget the oldest
            _written.pop(next(iter(_written)))
        _written[ref] = (len(manifest.items), len(manifest.unchanged), len(manifest.failures))
    return ref


# ref -> (items, unchanged, failures) of a manifest this process just wrote, until its step asks
_written: dict[str, tuple[int, int, int]] = {}
_written_lock = threading.Lock()


def written_counts(ref: str) -> tuple[int, int, int]:
    """(items, unchanged, failures) of the manifest at ``ref``: what this process wrote there a
    moment ago (once; the ref carries the digest, so it names those very bytes), else read back."""
    with _written_lock:
        counts = _written.pop(ref, None)
    if counts is None:
        manifest = read_stage_manifest(ref)
        counts = (len(manifest.items), len(manifest.unchanged), len(manifest.failures))
    return counts


def replace_corrupt_manifests(refs: Iterable[str]) -> list[str]:
    """Check the manifests commit is about to read (the upsert steps' refs): one that changed
    since it was written is replaced, in place, by its batch with every item failed as
    ``staging_corrupt``, so commit neither records its chunk ids nor advances its items' versions.
    Returns the locations replaced. (A re-run replaces them the same way: the result is the same.)"""
    replaced = []
    for ref in refs:
        path, digest = split_ref(ref)
        try:
            StagingArea.read_verified(path, digest)
        except StagingCorruptError as exc:
            log.warning(
                "stage manifest %s changed in staging: %s; its batch's items fail as %s", path, exc, STAGING_CORRUPT
            )
            StagingArea.of(path).write_json(location_name(path), encode(_failed_batch(path, str(exc))))
            replaced.append(path)
    return replaced


def _failed_batch(path: str, problem: str) -> BatchManifest:
    """The manifest at ``path`` (changed since written) replaced by its batch with every item
    failed as ``staging_corrupt`` (retryable: fetched again next run, versions not advanced).

    The items are those of the batch's first manifest, checked against the ref the plan recorded;
    when that one is the changed file (or cannot be checked), those of the keys the changed file
    still names that the plan fetches. An item neither names is simply absent from the commit:
    its stored version is not advanced either, so the next run fetches it too."""
    location = path
    staging = StagingArea.of(location)
    try:
        plan = read_plan(staging.path("discover.json"))
    except (OSError, ManifestError, StagingCorruptError) as exc:
        raise StagingCorruptError(f"{problem}; its batch cannot be told from the run's plan either: {exc}") from None
    number = _batch_number(location)
    stage: Stage = location_name(location).rsplit("-", 1)[0]  # type: ignore[assignment]
    planned = set(plan.to_fetch)
    keys = [k for k in _batch_keys(plan, number, location) or _named_keys(location) if k in planned]
    error = StagingCorruptError(f"stage manifest {location_name(location)}: {problem}")
    failures = [corrupt_failure(key, error) for key in dict.fromkeys(keys)]
    return BatchManifest(plan.run_id, plan.source, number, stage, failures=failures)


def _batch_keys(plan: RunPlan, number: int, changed: str) -> list[str]:
    """The item keys of batch ``number``'s first manifest, if it checks against the plan's ref."""
    if number >= len(plan.batches) or split_ref(plan.batches[number])[0] == changed:
        return []
    path, digest = split_ref(plan.batches[number])
    try:
        batch = decode(BatchManifest, _json(StagingArea.read_verified(path, digest), path), path)
    except (OSError, ManifestError, StagingCorruptError):
        return []
    return [item.item_key for item in (*batch.items, *batch.unchanged)]


def _named_keys(location: str) -> list[str]:
    """The item keys a changed manifest still names (best effort: it may not even be JSON)."""
    try:
        data = json.loads(StagingArea.read_bytes(location))
        entries = [*data.get("items", []), *data.get("unchanged", [])]
        keys = [e["change"]["item_key"] for e in entries] + [f["item_key"] for f in data.get("failures", [])]
    except (OSError, ValueError, RecursionError, TypeError, KeyError, AttributeError):
        return []
    return [k for k in keys if isinstance(k, str)]


def read_batch(manifest_path: str) -> list[Change]:
    """The changes of one batch manifest (what a fetch operator must fetch)."""
    return [item.change for item in read_stage_manifest(manifest_path).items]


def write_fetched_manifest(
    batch_manifest_path: str,
    fetched: list[RawDocument],
    failures: list[ItemFailure],
    *,
    access: Mapping[str, dict[str, Any]] | None = None,
) -> str:
    """Stage fetched documents' bytes and write the ``fetched`` manifest for this batch.

    Used by the generic fetch task and by connector-specific fetch operators alike. ``access``:
    the items' permissions by key (``plugins.engine.process.read_batch_access``); an item
    without one is written to the index as unknown (private).
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
        out.items.append(dataclasses.replace(item, raw=_raw_ref(raw, ref), access=(access or {}).get(raw.item_key)))
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
    if embedded.file is None:
        raise ValueError(f"item {item.item_key!r} was re-embedded in the index: it has no staged vectors")
    data = StagingArea.read_verified(embedded.file.path, embedded.file.digest())
    try:
        vectors = decode_vectors(data)
    except VectorFileError as exc:
        raise StagingCorruptError(f"staged vectors {embedded.file.path}: {exc}") from None
    if vectors.chunk_ids != [c.chunk_id for c in chunks] or vectors.model != embedded.model:
        raise StagingCorruptError(f"staged vectors {embedded.file.path} do not match the item's chunks or model")
    return vectors
