"""The index backend interface shared by the embedded SQLite FTS5 index and Elasticsearch.

Write contract (``upsert``): for each document, the new chunks are written **first** and the
stale ones (ids the document had before and no longer has) are deleted **only afterwards**, so
a failed write never loses the indexed version. Chunks whose id and content hash are already
in the index are not rewritten. Failures are reported per document in the result, never
raised for the whole batch, so the engine can commit state for the documents that landed.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from include.config import IndexConfig
from include.contract import Chunk

__all__ = ["DocumentRecord", "DocumentWrite", "IndexBackend", "SearchHit", "UpsertResult"]


@dataclass(slots=True)
class DocumentRecord:
    """Document-level fields stored beside every chunk (lineage: any hit traces back)."""

    source: str
    doc_id: str
    item_key: str
    title: str | None = None
    url: str | None = None
    media_type: str | None = None
    doc_version: str | None = None  # e.g. the ETag / modified time / revision it came from
    content_hash: str | None = None  # the document's (contract.content_hash); stored as doc_content_hash
    run_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class DocumentWrite:
    document: DocumentRecord
    chunks: list[Chunk]
    stale_chunk_ids: list[str] = field(default_factory=list)


@dataclass(slots=True)
class UpsertResult:
    doc_id: str
    ok: bool
    written: int = 0
    unchanged: int = 0
    deleted: int = 0
    error: str | None = None


@dataclass(slots=True)
class SearchHit:
    chunk_id: str
    doc_id: str
    source: str
    score: float
    text: str
    title: str | None = None
    url: str | None = None
    heading_path: list[str] = field(default_factory=list)
    run_id: str | None = None
    doc_version: str | None = None
    text_hash: str | None = None  # the chunk's (Chunk.text_hash), not its document's content_hash
    metadata: dict[str, Any] = field(default_factory=dict)


class IndexBackend(abc.ABC):
    """One named index. Implementations: ``include.index.sqlite_fts`` and ``include.index.elasticsearch``."""

    backend_name: str = "abstract"

    @classmethod
    @abc.abstractmethod
    def from_config(cls, config: IndexConfig) -> Self:
        """Open the index a source's ``index:`` block names (``open_index`` calls this)."""

    @abc.abstractmethod
    def upsert(self, writes: Sequence[DocumentWrite]) -> list[UpsertResult]:
        """Write documents' chunks (new first, stale deleted after). One result per write."""

    @abc.abstractmethod
    def delete_documents(self, source: str, doc_ids: Iterable[str]) -> int:
        """Remove every chunk of these documents; returns the number of chunks removed."""

    @abc.abstractmethod
    def search(self, query: str, *, k: int = 10, source: str | None = None) -> list[SearchHit]:
        """Best-first full-text hits (BM25)."""

    @abc.abstractmethod
    def count(self, *, source: str | None = None, doc_id: str | None = None) -> int:
        """Number of chunks, optionally of one source or document."""

    @abc.abstractmethod
    def get_chunk(self, chunk_id: str) -> dict[str, Any] | None:
        """The stored chunk with its document fields, or None."""

    @abc.abstractmethod
    def chunk_ids(self, *, source: str | None = None, doc_id: str | None = None) -> set[str]:
        """Ids of stored chunks (for audits and tests)."""

    def begin_rebuild(self, source: str | None = None) -> None:  # noqa: B027 - optional
        """Start a zero-downtime full rebuild (backends that support it write to a new index).

        ``source`` scopes it when several sources share the index; the embedded SQLite index
        rebuilds in place (a full resync re-upserts every document) and ignores it.
        """

    def finish_rebuild(self, success: bool) -> None:  # noqa: B027 - optional
        """Swap the rebuilt index in (success) or drop it."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release connections."""
