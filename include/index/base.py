"""The index backend interface shared by the embedded SQLite FTS5 index and Elasticsearch.

Write contract (``upsert``): for each document, the new chunks are written **first** and the
stale ones (ids the document had before and no longer has) are deleted **only afterwards**, so
a failed write never loses the indexed version. Chunks whose id and content hash are already
in the index are not rewritten (a chunk that only moved gets its new ``sequence``, nothing
else). A write may carry the chunks' vectors (:class:`~include.vectors.VectorSet`); they are
stored with the chunks, in the same transaction or bulk request.

Search (``search``): ``mode`` is ``bm25`` (full text), ``vector`` (k nearest neighbours of
``query_vector`` by cosine similarity) or ``hybrid`` (both rankings fused by reciprocal rank
fusion, :func:`include.index.fusion.reciprocal_rank_fusion`, done here when the backend cannot).
Every search has a time limit (``search_time_limit``, the index option of the same name, 10 s by
default): past it the backend stops the query (SQLite: a progress handler; Elasticsearch: the
search's ``timeout`` and the request's) and raises :class:`SearchTimeout`. A query is searched by
at most ``MAX_QUERY_TERMS`` distinct terms (:mod:`include.index.query_text`). Write failures are reported per document in the result, never
raised for the whole batch, so the engine can commit state for the documents that landed.

Access (:mod:`include.acl`): every document is stored with its entries (``DocumentRecord.access``,
replaced on each upsert and by ``set_access`` without touching a chunk). ``search(access=...)``
returns only chunks of documents holding at least one of the given entries (a principal's
``entries()``); ``None`` is an unrestricted search. The filter is applied inside each ranking
(FTS query and KNN candidates), so ``k`` permitted hits come back whenever that many exist. A
document stored without entries (``()``, or written before entries were stored) is seen by an
unrestricted search only: fail-closed.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Self

import numpy as np
import numpy.typing as npt

from include.acl import PUBLIC
from include.config import IndexConfig
from include.contract import Chunk
from include.index.fusion import DEFAULT_VECTOR_WEIGHT, fuse_hybrid, hybrid_depth
from include.vectors import VectorSet

SearchMode = Literal["bm25", "vector", "hybrid"]
SEARCH_MODES: tuple[SearchMode, ...] = ("bm25", "vector", "hybrid")

__all__ = [
    "DEFAULT_SEARCH_TIME_LIMIT",
    "SEARCH_MODES",
    "DocumentRecord",
    "DocumentWrite",
    "IndexBackend",
    "SearchDeadline",
    "SearchHit",
    "SearchMode",
    "SearchTimeout",
    "UpsertResult",
    "check_access",
    "check_search_mode",
    "check_time_limit",
    "normalize_entries",
]

DEFAULT_SEARCH_TIME_LIMIT = 10.0  # seconds; an index option (``search_time_limit``) changes it


class SearchTimeout(TimeoutError):
    """An index search stopped at its time limit (the API answers 504)."""

    def __init__(self, backend: str, seconds: float) -> None:
        super().__init__(f"the {backend} index search did not finish within its time limit of {seconds:g} s")
        self.backend = backend
        self.seconds = seconds


@dataclass(frozen=True, slots=True)
class SearchDeadline:
    """When a search must be done (``time.monotonic()``), and the limit it came from."""

    ends_at: float
    seconds: float

    @classmethod
    def within(cls, seconds: float) -> SearchDeadline:
        return cls(time.monotonic() + seconds, seconds)

    def left(self) -> float:
        return self.ends_at - time.monotonic()

    def timeout(self, backend: str) -> SearchTimeout:
        return SearchTimeout(backend, self.seconds)


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
    # who may read it: ``AccessControl.entries()``; ``()`` = an unrestricted search only
    access: tuple[str, ...] = (PUBLIC,)


@dataclass(slots=True)
class DocumentWrite:
    document: DocumentRecord
    chunks: list[Chunk]
    stale_chunk_ids: list[str] = field(default_factory=list)
    # the chunks' vectors (every chunk of the write, or None: a BM25-only source)
    vectors: VectorSet | None = None


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
    sequence: int | None = None
    embedding_model: str | None = None
    # hybrid: the hit's 1-based rank in each ranking it appeared in ({"bm25": 3, "vector": 1})
    ranks: dict[str, int] = field(default_factory=dict)


class IndexBackend(abc.ABC):
    """One named index. Implementations: ``include.index.sqlite_fts`` and ``include.index.elasticsearch``."""

    backend_name: str = "abstract"
    hybrid_vector_weight: float = DEFAULT_VECTOR_WEIGHT  # the index option of the same name
    search_time_limit: float = DEFAULT_SEARCH_TIME_LIMIT  # the index option of the same name

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

    def search(
        self,
        query: str,
        *,
        k: int = 10,
        source: str | None = None,
        mode: SearchMode = "bm25",
        query_vector: npt.NDArray[np.float32] | None = None,
        time_limit: float | None = None,
        access: Collection[str] | None = None,
    ) -> list[SearchHit]:
        """Best-first hits: ``bm25`` (full text), ``vector`` (cosine similarity to ``query_vector``,
        the query embedded with the model the chunks were embedded with) or ``hybrid`` (both,
        fused by :func:`~include.index.fusion.fuse_hybrid`, the vector ranking weighted
        ``hybrid_vector_weight``).

        An index holding no vectors gives an empty vector ranking: ``vector`` returns ``[]`` and
        ``hybrid`` the BM25 order (with RRF scores). A query vector of another size than the
        index's vectors is a ValueError. The whole search (both rankings of a hybrid one) ends
        within ``time_limit`` seconds (default ``search_time_limit``) or raises :class:`SearchTimeout`.

        ``access``: the searcher's entries (a principal's ``entries()``); only chunks of documents
        holding one of them are ranked. ``None``: unrestricted (admin and internal callers). An
        empty collection matches nothing.
        """
        check_search_mode(mode, query_vector)
        deadline = SearchDeadline.within(check_time_limit(time_limit or self.search_time_limit))
        entries = check_access(access)
        if entries == ():
            return []  # no entry can match: nothing is visible
        if mode == "bm25":
            return self._bm25(query, k, source, deadline, entries)
        assert query_vector is not None  # check_search_mode refused a vector search without one
        if mode == "vector":
            return self._nearest(query_vector, k, source, deadline, entries)
        # both backends fuse here: Elasticsearch's rrf retriever would fuse server-side, but needs a paid licence
        depth = hybrid_depth(k)
        bm25 = self._bm25(query, depth, source, deadline, entries)
        vector = self._nearest(query_vector, depth, source, deadline, entries)
        return fuse_hybrid(bm25, vector, k, self.hybrid_vector_weight)

    @abc.abstractmethod
    def _bm25(
        self, query: str, k: int, source: str | None, deadline: SearchDeadline, access: tuple[str, ...] | None = None
    ) -> list[SearchHit]:
        """The best ``k`` full-text hits (BM25 over any of the query's terms) among documents
        holding an entry of ``access`` (None: all), by ``deadline`` or :class:`SearchTimeout`."""

    @abc.abstractmethod
    def _nearest(
        self,
        query_vector: npt.NDArray[np.float32],
        k: int,
        source: str | None,
        deadline: SearchDeadline,
        access: tuple[str, ...] | None = None,
    ) -> list[SearchHit]:
        """The ``k`` chunks whose vectors are nearest ``query_vector`` (cosine similarity as
        score) among documents holding an entry of ``access`` (None: all), by ``deadline`` or
        :class:`SearchTimeout`."""

    @abc.abstractmethod
    def set_access(self, source: str, access: Mapping[str, Sequence[str]]) -> int:
        """Replace the entries of these documents (doc id -> entries) without rewriting any chunk
        text or vector; returns how many documents' stored entries changed (a document already
        holding exactly these entries costs no write, a doc id with no chunk of ``source`` in the
        index is skipped). A failure raises (SQLite: nothing applied, one transaction)."""

    @abc.abstractmethod
    def access_of(self, source: str, doc_ids: Iterable[str]) -> dict[str, tuple[str, ...]]:
        """The stored entries of these documents (sorted; ``()``: none), for those the index holds
        chunks of ``source`` for."""

    @abc.abstractmethod
    def vectors_for(self, model: str, text_hashes: Iterable[str]) -> dict[str, npt.NDArray[np.float32]]:
        """Stored vectors of ``model`` by chunk text hash (the embedding cache: a chunk whose text
        is already in the index under the same model is not embedded again)."""

    @abc.abstractmethod
    def replace_vectors(self, source: str, vectors: Mapping[str, VectorSet]) -> dict[str, str]:
        """Store new vectors for chunks the index holds (a re-embedding: chunk ids and texts
        stand), ``vectors`` by doc id. Returns doc id -> error for the documents not written (a
        chunk not in the index, a vector size the index cannot hold). SQLite writes each
        document whole or not at all; Elasticsearch may have written part of a failed one (its
        state keeps the old model, so the next run writes it again)."""

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


def check_search_mode(mode: str, query_vector: object) -> None:
    """Refuse an unknown mode, or a vector/hybrid search without its query vector."""
    if mode not in SEARCH_MODES:
        raise ValueError(f"unknown search mode {mode!r} (known: {', '.join(SEARCH_MODES)})")
    if mode != "bm25" and query_vector is None:
        raise ValueError(f"search mode {mode!r} needs query_vector (the query embedded with the chunks' model)")


def normalize_entries(entries: Iterable[str]) -> tuple[str, ...]:
    """Entries as stored: distinct, sorted, every one a non-empty string."""
    if isinstance(entries, str):  # a lone entry would otherwise become its characters
        raise TypeError(f"access entries must be a collection of strings, not the string {entries!r}")
    out = set()
    for entry in entries:
        if not isinstance(entry, str) or not entry:
            raise ValueError(f"an access entry must be a non-empty string, not {entry!r}")
        out.add(entry)
    return tuple(sorted(out))


def check_access(access: Collection[str] | None) -> tuple[str, ...] | None:
    """A search's ``access`` argument: None (unrestricted) or its entries, normalised."""
    return None if access is None else normalize_entries(access)


def check_time_limit(value: object) -> float:
    """A search time limit in seconds, checked (a positive, finite number)."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"search_time_limit must be a number of seconds, not {value!r}") from None
    if not 0 < seconds < float("inf"):
        raise ValueError(f"search_time_limit must be a positive number of seconds, not {value!r}")
    return seconds
