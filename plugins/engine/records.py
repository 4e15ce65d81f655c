"""Typed records for every manifest the engine writes, and their one JSON form.

A run is planned into ``discover.json`` (:class:`RunPlan`) and one ``batch-NNNN.json`` per batch
(:class:`BatchManifest`); each later stage of a batch writes the same record type again
(``fetched`` / ``parsed`` / ``chunked`` / ``embedded`` / ``upserted``), its :class:`ItemRecord`
entries carrying one more outcome each (:class:`RawRef`, :class:`ParseOutcome`,
:class:`ChunkOutcome`, :class:`EmbedOutcome`, :class:`UpsertOutcome`), so the last manifest of a
batch is a complete account of it. ``embedded`` exists only for sources with embedding enabled;
its outcome is optional (``None`` by default), so manifests written before it still read as
schema version 2.

Serialisation lives here only (:func:`encode`, :func:`decode`), through pydantic's validation of
these dataclasses: a manifest that does not fit its record is refused with a
:class:`ManifestError` naming the file, instead of a ``KeyError`` three stages later. Every
manifest carries ``schema_version``; one written before records existed (no version, the dict
layout of version 1) is upgraded on read (:mod:`plugins.engine.manifest_v1`), and an unknown
version is refused with :class:`ManifestVersionError`: a run staged by other code is not
guessed at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import pydantic

from include.contract import Change, ChangeKind, VersionEvidence
from include.staging import StagedFile
from include.stores import ItemState
from plugins.engine.manifest_v1 import upgrade_v1

__all__ = [
    "SCHEMA_VERSION",
    "BatchManifest",
    "ChunkOutcome",
    "Deletion",
    "EmbedOutcome",
    "ItemFailure",
    "ItemRecord",
    "ManifestError",
    "ManifestVersionError",
    "ParseOutcome",
    "PriorState",
    "RawRef",
    "RunPlan",
    "Skip",
    "Stage",
    "StagedRef",
    "TruncatedChunk",
    "UpsertOutcome",
    "decode",
    "encode",
]

SCHEMA_VERSION = 2
LEGACY_VERSION = 1  # the untyped dict manifests (no ``schema_version`` field)

Stage = Literal["batch", "fetched", "parsed", "chunked", "embedded", "upserted", "reembedded"]


class ManifestError(ValueError):
    """A staged manifest that cannot be read as its record (names the file and its version)."""

    def __init__(self, path: str, version: object, problem: str) -> None:
        super().__init__(f"manifest {path} (schema_version {version}): {problem}")
        self.path = path
        self.version = version


class ManifestVersionError(ManifestError):
    """A manifest of a schema version this code does not read."""


# ------------------------------------------------------------------------------ per item


@dataclass(frozen=True, slots=True)
class StagedRef:
    """A file in the run's staging area and the size and SHA-256 it had when written."""

    path: str
    size: int
    sha256: str

    def digest(self) -> dict[str, Any]:
        """What :meth:`include.staging.StagingArea.read_verified` checks the file against."""
        return {"size": self.size, "sha256": self.sha256}

    @classmethod
    def of(cls, staged: StagedFile) -> StagedRef:
        return cls(staged.path, staged.size, staged.sha256)

    @classmethod
    def from_digest(cls, path: str | None, digest: dict[str, Any] | None) -> StagedRef | None:
        if not path or not digest:
            return None
        return cls(path, int(digest["size"]), str(digest["sha256"]))


@dataclass(slots=True)
class PriorState:
    """The item's stored state as discovery saw it (a re-run of a stage classifies the same way)."""

    doc_id: str
    version: VersionEvidence | None = None
    content_hash: str | None = None
    processing_hash: str | None = None
    chunk_ids: list[str] = field(default_factory=list)
    failure_count: int = 0
    last_failure_run: str | None = None
    missing_runs: int = 0

    @property
    def has_version(self) -> bool:
        """A version of the item was indexed (so a new one is a change, not a new item)."""
        return self.version is not None and self.version != VersionEvidence()

    @property
    def version_dict(self) -> dict[str, str] | None:
        return self.version.to_dict() if self.version is not None else None

    @classmethod
    def of(cls, st: ItemState | None) -> PriorState | None:
        if st is None:
            return None
        return cls(
            doc_id=st.doc_id,
            version=st.version,
            content_hash=st.content_hash,
            processing_hash=st.processing_hash,
            chunk_ids=list(st.chunk_ids),
            failure_count=st.failure_count,
            last_failure_run=st.last_failure_run,
            missing_runs=st.missing_runs,
        )


@dataclass(slots=True)
class RawRef:
    """What fetch staged of an item: its bytes (reference) and what the source said of them."""

    file: StagedRef
    file_name: str
    byte_size: int
    media_type: str | None = None
    url: str | None = None
    title: str | None = None
    version: VersionEvidence = field(default_factory=VersionEvidence)
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ParseOutcome:
    """A parsed item; ``file`` (the staged ParsedDocument) is None when its content was unchanged."""

    content_hash: str
    parser: str | None
    parser_version: str | None
    blocks: int
    chars: int
    title: str | None = None
    warnings: dict[str, Any] = field(default_factory=dict)
    file: StagedRef | None = None
    parser_engine: str | None = None  # how the parser read it, where it has a choice (PDF: auto/text/ocr)


@dataclass(slots=True)
class ChunkOutcome:
    doc_id: str
    file: StagedRef
    chunk_ids: list[str]
    chunker: str
    chunker_options_hash: str | None = None
    chunker_version: str | None = None  # None: staged before versions were recorded


@dataclass(frozen=True, slots=True)
class TruncatedChunk:
    """A chunk longer than the model takes: ``tokens`` in the model's tokenizer, ``kept`` seen."""

    chunk_id: str
    tokens: int
    kept: int


@dataclass(slots=True)
class EmbedOutcome:
    """An item's chunk vectors: the staged vector file (``include.vectors``, one row per chunk,
    in chunk order) and how many rows were computed this run or reused from the index's cache."""

    model: str
    dimensions: int
    file: StagedRef | None  # None: written straight to the index (a re-embedding, plugins.engine.reembed)
    computed: int
    reused: int
    reused_chunk_ids: list[str] = field(default_factory=list)
    truncated: list[TruncatedChunk] = field(default_factory=list)


@dataclass(slots=True)
class UpsertOutcome:
    written: int
    unchanged_chunks: int
    deleted_chunks: int
    chunks_added: list[str] = field(default_factory=list)
    chunks_kept: list[str] = field(default_factory=list)
    chunks_removed: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ItemFailure:
    """One item that failed a stage; the batch goes on without it."""

    item_key: str
    reason: str
    error: str
    retryable: bool = True
    stage: str = "fetch"
    warnings: dict[str, Any] | None = None  # a parser's (a fully scanned PDF's needs_ocr)

    def to_dict(self) -> dict[str, Any]:
        return encode(self)


@dataclass(slots=True)
class ItemRecord:
    """One item of a batch, with the outcome of every stage it got through."""

    change: Change
    prior: PriorState | None = None
    forced: bool = False  # re-process even if unchanged (full resync, new options, only_keys, rewrite)
    forced_reason: str | None = None  # why, in words ("parser pdf 2.0 -> 3.0"): to the lineage row
    staged: StagedRef | None = None  # bytes discovery staged (a crawler), checked when fetch reads them
    raw: RawRef | None = None
    parsed: ParseOutcome | None = None
    chunked: ChunkOutcome | None = None
    embedded: EmbedOutcome | None = None  # only for a source with embedding enabled
    upserted: UpsertOutcome | None = None
    unchanged_reason: str | None = None  # why it went to ``unchanged`` after fetching
    # its permissions as fetch read them (``AccessControl.to_dict()``); None: not read this run
    # (discovery said unchanged, or a manifest staged before permissions were read: the upsert
    # then writes it as unknown, private, never public)
    access: dict[str, Any] | None = None
    stage_ms: dict[str, float] = field(default_factory=dict)

    @property
    def item_key(self) -> str:
        return self.change.item_key

    @property
    def observed_version(self) -> VersionEvidence:
        """The version fetch saw, else the one discovery reported."""
        if self.raw is not None and self.raw.version != VersionEvidence():
            return self.raw.version
        return self.change.version

    @property
    def title(self) -> str | None:
        if self.parsed is not None:
            return self.parsed.title
        return self.raw.title if self.raw is not None else None

    @property
    def warnings(self) -> dict[str, Any] | None:
        return (self.parsed.warnings or None) if self.parsed is not None else None


# ------------------------------------------------------------------------------ manifests


@dataclass(slots=True)
class Deletion:
    item_key: str
    doc_id: str
    reason: str
    chunk_ids: list[str] = field(default_factory=list)
    version: VersionEvidence | None = None


@dataclass(slots=True)
class Skip:
    """An item not fetched this run (quarantined, or a record the connector had to skip)."""

    item_key: str
    reason: str


@dataclass(slots=True)
class BatchManifest:
    """One batch after one stage: ``items`` go on to the next stage; ``unchanged`` and
    ``failures`` are carried forward to the commit."""

    run_id: str
    source: str
    batch: int
    stage: Stage
    items: list[ItemRecord] = field(default_factory=list)
    unchanged: list[ItemRecord] = field(default_factory=list)
    failures: list[ItemFailure] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def next(self, stage: Stage) -> BatchManifest:
        """The next stage's manifest: same batch, carried unchanged items and failures, no items."""
        return BatchManifest(self.run_id, self.source, self.batch, stage, [], list(self.unchanged), list(self.failures))


@dataclass(slots=True)
class RunPlan:
    """``discover.json``: what the run will fetch, delete, keep and skip."""

    run_id: str
    source: str
    dry_run: bool
    complete: bool  # the connector listed the whole source (absent items may be deleted)
    processing_hash: str
    processing_options: str | None = None  # the options alone: recorded per item (plugins.engine.processed)
    processing_text_options: str | None = None  # the parser and chunker options alone: likewise
    stats: dict[str, Any] = field(default_factory=dict)
    unchanged: list[ItemRecord] = field(default_factory=list)
    to_fetch: list[str] = field(default_factory=list)
    new_or_changed: dict[str, ChangeKind] = field(default_factory=dict)
    deletions: list[Deletion] = field(default_factory=list)
    missing: dict[str, int] = field(default_factory=dict)  # absent but kept -> absolute miss count
    skipped: list[Skip] = field(default_factory=list)
    failed: list[ItemFailure] = field(default_factory=list)  # failed during discovery
    forced: list[str] = field(default_factory=list)
    forced_reasons: dict[str, str] = field(default_factory=dict)  # forced key -> why
    renames: dict[str, str] = field(default_factory=dict)
    batches: list[str] = field(default_factory=list)
    # unchanged items needing new vectors only (plugins.engine.reembed), forced_reason saying why
    reembed: list[ItemRecord] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION


# ------------------------------------------------------------------------------ JSON

R = TypeVar("R")
_ADAPTERS: dict[type[Any], pydantic.TypeAdapter[Any]] = {}
# older version -> how its manifest dict (plan or batch) becomes the current layout
UPGRADES: dict[int, Callable[[Literal["plan", "batch"], dict[str, Any], str], dict[str, Any]]] = {
    LEGACY_VERSION: upgrade_v1,
}


def _adapter(cls: type[R]) -> pydantic.TypeAdapter[R]:
    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = pydantic.TypeAdapter(cls)
    return _ADAPTERS[cls]


def encode(record: Any) -> dict[str, Any]:
    """A record as JSON-ready data (enums as values, nested records as objects)."""
    data = _adapter(type(record)).dump_python(record, mode="json", fallback=str)  # as json.dumps(default=str)
    assert isinstance(data, dict)
    return data


def decode(cls: type[R], data: Any, path: str) -> R:
    """``data`` (read from the file ``path``) as a ``cls`` record, upgraded from an older layout
    when it has no ``schema_version``; :class:`ManifestError` when it does not fit."""
    if not isinstance(data, dict):
        raise ManifestError(path, "?", f"expected a JSON object, found {type(data).__name__}")
    if cls in (RunPlan, BatchManifest):
        version = data.get("schema_version", LEGACY_VERSION)
        if version != SCHEMA_VERSION:
            if version not in UPGRADES:
                raise ManifestVersionError(
                    path,
                    version,
                    f"this engine reads schema_version {SCHEMA_VERSION} (and upgrades {sorted(UPGRADES)}); "
                    "finish or re-run this run with the engine version that staged it",
                )
            data = UPGRADES[version]("plan" if cls is RunPlan else "batch", data, path)
    try:
        return _adapter(cls).validate_python(data)
    except pydantic.ValidationError as exc:
        raise ManifestError(path, data.get("schema_version", LEGACY_VERSION), str(exc)) from None
