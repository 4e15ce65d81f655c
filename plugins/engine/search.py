"""Search the index in one of three modes, for the CLI and the UI's JSON API alike.

``bm25`` is the full-text ranking; ``vector`` ranks chunks by the cosine similarity of their
vector to the query's; ``hybrid`` fuses both rankings (reciprocal rank fusion, done by the
backend or for it, :mod:`include.index.base`). A query is embedded with the model its source's
chunks were embedded with, so ``vector`` and ``hybrid`` need a source with embedding enabled:
the one named, or the only such source of the sources file (more than one is ambiguous).

The query is embedded on a bounded pool (:mod:`plugins.engine.query_embedding`): at most
``TRIBUTARY_QUERY_EMBED_CONCURRENCY`` (8) at once per process, each awaited at most
``TRIBUTARY_QUERY_EMBED_TIMEOUT_SECONDS`` (10); a failure is :class:`VectorSearchUnavailable`
(status 502: a bad answer; 503: unreachable, timed out, rate limited or busy), which a ``hybrid``
search answers with its BM25 ranking and a note instead (:class:`SearchResult`).

Every search is made *as* someone (``principal``, :mod:`plugins.engine.principals`): the index
returns only chunks of documents one of whose entries the principal holds (``public`` always);
``principal=None`` is an unrestricted search (an admin's explicit ``--all``, internal callers).

Every hit keeps what the BM25 search always showed: the run that wrote the chunk, the source
version it came from, and the chunk id that :func:`plugins.engine.lineage.chunk_lineage` traces.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from include.acl import Principal
from include.config import IndexConfig, SourceConfig
from include.index import IndexBackend, SearchHit, open_index
from include.index.base import SEARCH_MODES, SearchMode
from include.index.query_text import search_terms
from include.index.sqlite_vectors import VectorsUnavailable
from plugins.embedders.base import Embedder
from plugins.engine.embed import open_source_embedder
from plugins.engine.lineage import jsonable
from plugins.engine.query_embedding import VectorSearchUnavailable, embed_query_bounded

__all__ = [
    "SearchError",
    "SearchResult",
    "VectorSearchUnavailable",
    "hit_row",
    "run_search",
    "search_index",
    "search_source",
]


class SearchError(ValueError):
    """A search that cannot be run as asked (unknown or ambiguous source, no model for vectors)."""


def search_source(sources: Sequence[SourceConfig], source: str | None, mode: SearchMode) -> SourceConfig | None:
    """The source a search is for: ``source`` (its id ``kind:name`` or its name), else for
    ``vector``/``hybrid`` the only source with embedding enabled; None: BM25 over the default index."""
    if mode not in SEARCH_MODES:
        raise SearchError(f"unknown search mode {mode!r}; one of {', '.join(SEARCH_MODES)}")
    if source is not None:
        named = [s for s in sources if source in (s.source_id, s.name)]
        if not named:
            raise SearchError(f"no configured source {source!r}")
        if len(named) > 1:
            raise SearchError(f"{source!r} names {len(named)} sources ({_ids(named)}); give its kind:name")
        chosen = named[0]
        if mode != "bm25" and not chosen.embedding.enabled:
            raise SearchError(
                f"{mode} search needs embeddings, and source {chosen.source_id} is BM25 only "
                f"(embedding.provider none); search it with --mode bm25 or enable embedding for it"
            )
        return chosen
    if mode == "bm25":
        return None
    embedded = [s for s in sources if s.embedding.enabled]
    if not embedded:
        raise SearchError(f"{mode} search needs a source with embedding enabled; every configured source is BM25 only")
    if len(embedded) > 1:
        raise SearchError(f"{mode} search: several sources embed ({_ids(embedded)}); name one with --source")
    return embedded[0]


def _ids(sources: Sequence[SourceConfig]) -> str:
    return ", ".join(s.source_id for s in sources)


def hit_row(hit: SearchHit, rank: int, mode: SearchMode) -> dict[str, Any]:
    """A hit as plain JSON, with its lineage handle (the chunk id ``chunk_lineage`` traces)."""
    row: dict[str, Any] = jsonable(hit)
    row.update(rank=rank, mode=mode, lineage={"chunk_id": hit.chunk_id, "run_id": hit.run_id})
    return row


@dataclass(slots=True)
class SearchResult:
    """A search's rows, what it was served by, and what its user should be told."""

    hits: list[dict[str, Any]]
    mode: SearchMode  # the mode the hits were ranked by ("bm25" when a hybrid search fell back)
    degraded: str | None = None  # "bm25_only": a hybrid search whose vector half failed
    notes: list[str] = field(default_factory=list)


def search_index(
    sources: Sequence[SourceConfig],
    query: str,
    k: int = 10,
    source: str | None = None,
    mode: SearchMode = "bm25",
    *,
    index_opener: Callable[[IndexConfig], IndexBackend] = open_index,
    embedder_opener: Callable[[SourceConfig], Embedder] = open_source_embedder,
    principal: Principal | None = None,
) -> list[dict[str, Any]]:
    """Best-first hits of ``query`` as JSON rows (:func:`hit_row`); :func:`run_search`'s rows."""
    return run_search(
        sources, query, k, source, mode, index_opener=index_opener, embedder_opener=embedder_opener, principal=principal
    ).hits


def run_search(
    sources: Sequence[SourceConfig],
    query: str,
    k: int = 10,
    source: str | None = None,
    mode: SearchMode = "bm25",
    *,
    index_opener: Callable[[IndexConfig], IndexBackend] = open_index,
    embedder_opener: Callable[[SourceConfig], Embedder] = open_source_embedder,
    principal: Principal | None = None,
) -> SearchResult:
    """Search as asked, as ``principal`` (None: unrestricted, every document whatever its
    permissions; a caller serving a person passes their Principal, ``ANONYMOUS`` for nobody). :class:`SearchError`: the search cannot be run as asked;
    :class:`VectorSearchUnavailable`: a ``vector`` search whose query could not be embedded or
    compared; :class:`~include.index.base.SearchTimeout`: the index's time limit passed.
    ``sources``: the valid sources of the sources file."""
    if k < 1:
        raise SearchError(f"k must be at least 1, got {k}")
    chosen = search_source(sources, source, mode)
    terms_note = search_terms(query).note
    notes = [terms_note] if terms_note else []
    access = principal.entries() if principal is not None else None
    index = index_opener(chosen.index if chosen is not None else IndexConfig())
    try:
        if chosen is None or mode == "bm25":
            within = chosen.source_id if chosen is not None else None  # a named source: its hits only
            hits = index.search(query, k=k, source=within, mode="bm25", access=access)
            return SearchResult([hit_row(h, r, "bm25") for r, h in enumerate(hits, 1)], "bm25", notes=notes)
        try:
            vector = embed_query_bounded(lambda: embedder_opener(chosen), query)
            # vectors are compared within their source (its model)
            hits = _vector_search(index, query, k, chosen.source_id, mode, vector, access)
        except VectorSearchUnavailable as exc:
            if mode == "vector":
                raise
            notes.append(f"vector search unavailable: {exc}; showing BM25")
            hits = index.search(query, k=k, source=chosen.source_id, mode="bm25", access=access)
            rows = [hit_row(h, r, "bm25") for r, h in enumerate(hits, 1)]
            return SearchResult(rows, "bm25", degraded="bm25_only", notes=notes)
    finally:
        index.close()
    return SearchResult([hit_row(h, r, mode) for r, h in enumerate(hits, 1)], mode, notes=notes)


def _vector_search(
    index: IndexBackend,
    query: str,
    k: int,
    within: str,
    mode: SearchMode,
    vector: npt.NDArray[np.float32],
    access: Collection[str] | None,
) -> list[SearchHit]:
    """The index's vector or hybrid ranking; a query vector the index cannot compare (another
    size than its vectors) is a bad answer of the embedder, not a server error."""
    try:
        return index.search(query, k=k, source=within, mode=mode, query_vector=vector, access=access)
    except ValueError as exc:
        raise VectorSearchUnavailable("bad_dimension", str(exc), status=502) from None
    except VectorsUnavailable as exc:  # this index cannot search vectors (sqlite-vec not loaded)
        raise VectorSearchUnavailable("vectors_unavailable", str(exc), status=503) from None
