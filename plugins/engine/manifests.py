"""Stage manifests: the small JSON files that carry one batch from stage to stage.

Every stage reads the previous stage's manifest for a batch and writes its own, carrying the
batch's failures and unchanged items forward, so the last manifest of a batch is a complete
account of it. Failures are dicts ``{"item_key", "reason", "error", "retryable", "stage"}``.

Staged files are checked when read back: an entry records the size and SHA-256 of its raw bytes
(``raw_digest``; ``staged`` for bytes a crawler staged during discovery), of its parsed document
(``parsed_digest``) and of its chunks (``chunks_digest``). A mismatch is a retryable *fetch*
failure of that item (reason ``staging_corrupt``): it is not indexed, and its stored version is
not advanced, so the next run fetches it again instead of being told "not modified".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from include.contract import Change, RawDocument, VersionEvidence
from include.failpoints import failpoint
from include.staging import StagingArea, StagingCorruptError

__all__ = [
    "STAGING_CORRUPT",
    "ItemFailure",
    "corrupt_failure",
    "load_raw",
    "next_manifest_path",
    "read_batch",
    "read_manifest",
    "write_fetched_manifest",
    "write_stage_manifest",
]


@dataclass(slots=True)
class ItemFailure:
    item_key: str
    reason: str
    error: str
    retryable: bool = True
    stage: str = "fetch"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


STAGING_CORRUPT = StagingCorruptError.reason


def corrupt_failure(item_key: str, exc: StagingCorruptError) -> ItemFailure:
    """A staged file of this item changed after it was written: fetch it again next run."""
    return ItemFailure(item_key, STAGING_CORRUPT, str(exc), retryable=True, stage="fetch")


def read_manifest(path: str) -> dict[str, Any]:
    return StagingArea.read_json(path)


def next_manifest_path(path: str, stage: str) -> str:
    """``.../batch-0003.json`` -> ``.../<stage>-0003.json`` (same run directory, same batch)."""
    p = Path(path)
    number = p.stem.rsplit("-", 1)[1]
    return str(p.with_name(f"{stage}-{number}.json"))


# The failpoint (include/failpoints.py) reached once a stage's manifest is written.
_FAILPOINTS = {"fetched": "fetch", "parsed": "parse", "chunked": "chunk", "upserted": "upsert"}


def _write_next(prev_path: str, stage: str, manifest: dict[str, Any]) -> str:
    p = Path(next_manifest_path(prev_path, stage))
    path = StagingArea.at(p.parent).write_json(p.name, manifest)
    failpoint(_FAILPOINTS[stage])
    return path


def read_batch(manifest_path: str) -> list[Change]:
    """The changes of one batch manifest (what a fetch operator must fetch)."""
    return [Change.from_dict(entry["change"]) for entry in read_manifest(manifest_path)["items"]]


def write_fetched_manifest(batch_manifest_path: str, fetched: list[RawDocument], failures: list[ItemFailure]) -> str:
    """Stage fetched documents' bytes and write the ``fetched`` manifest for this batch.

    Used by the generic fetch task and by connector-specific fetch operators alike.
    """
    batch = read_manifest(batch_manifest_path)
    staging = StagingArea.at(Path(batch_manifest_path).parent)
    by_key = {entry["change"]["item_key"]: entry for entry in batch["items"]}
    items = []
    failures = list(failures)
    for raw in fetched:
        entry = dict(by_key[raw.item_key])
        entry["raw_path"] = staging.stage_raw(raw.item_key, raw.data, raw.file_name)
        entry["raw_digest"] = staging.staged_digest(entry["raw_path"])  # hashed once, by stage_raw
        if (problem := _differs_from_staged(entry)) is not None:
            failures.append(corrupt_failure(raw.item_key, StagingCorruptError(problem)))
            continue
        entry["raw"] = {
            "file_name": raw.file_name,
            "media_type": raw.media_type,
            "url": raw.url,
            "title": raw.title,
            "version": raw.version.to_dict(),
            "metadata": raw.metadata,
        }
        entry["byte_size"] = len(raw.data)
        items.append(entry)
    manifest = {
        "run_id": batch["run_id"],
        "source": batch["source"],
        "batch": batch["batch"],
        "items": items,
        "unchanged": list(batch.get("unchanged", [])),
        "failures": list(batch.get("failures", [])) + [f.to_dict() for f in failures],
    }
    return _write_next(batch_manifest_path, "fetched", manifest)


def _differs_from_staged(entry: dict[str, Any]) -> str | None:
    """Why the fetched bytes are not those discovery staged (a crawler's page), else None."""
    staged, digest = entry.get("staged"), entry["raw_digest"]
    if not staged or digest == {"size": staged["size"], "sha256": staged["sha256"]}:
        return None
    path = entry["change"].get("staged_path")
    return (
        f"staged file {path} read back as {digest['size']} bytes (sha256 {digest['sha256'][:16]}...); "
        f"discovery staged {staged['size']} bytes (sha256 {staged['sha256'][:16]}...)"
    )


def load_raw(entry: dict[str, Any]) -> RawDocument:
    """Rebuild the RawDocument of a fetched manifest entry (:class:`StagingCorruptError` when its
    staged bytes are not those that were fetched)."""
    raw = entry["raw"]
    return RawDocument(
        item_key=entry["change"]["item_key"],
        data=StagingArea.read_verified(entry["raw_path"], entry.get("raw_digest")),
        file_name=raw["file_name"],
        media_type=raw.get("media_type"),
        url=raw.get("url"),
        title=raw.get("title"),
        version=VersionEvidence.from_dict(raw.get("version")),
        metadata=dict(raw.get("metadata") or {}),
    )


def write_stage_manifest(prev_path: str, stage: str, manifest: dict[str, Any]) -> str:
    return _write_next(prev_path, stage, manifest)
