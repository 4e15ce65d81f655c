"""Search the index in one of three modes, for the CLI and the UI's JSON API alike.

``bm25`` is the full-text ranking; ``vector`` ranks chunks by the cosine similarity of their
vector to the query's; ``hybrid`` fuses both rankings (reciprocal rank fusion, done by the
backend or for it, :mod:`include.index.base`). A query is embedded with the model its source's
chunks were embedded with, so ``vector`` and ``hybrid`` need a source with embedding enabled:
the one named, or the only such source of the sources file (more than one is ambiguous).

Every hit keeps what the BM25 search always showed: the run that wrote the chunk, the source
version it came from, and the chunk id that :func:`plugins.engine.lineage.chunk_lineage` traces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from include.config import IndexConfig, SourceConfig
from include.index import IndexBackend, SearchHit, open_index
from include.index.base import SEARCH_MODES, SearchMode
from plugins.embedders.base import Embedder
from plugins.engine.embed import open_source_embedder
from plugins.engine.lineage import jsonable

__all__ = ["SearchError", "hit_row", "search_index", "search_source"]


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


def search_index(
    sources: Sequence[SourceConfig],
    query: str,
    k: int = 10,
    source: str | None = None,
    mode: SearchMode = "bm25",
    *,
    index_opener: Callable[[IndexConfig], IndexBackend] = open_index,
    embedder_opener: Callable[[SourceConfig], Embedder] = open_source_embedder,
) -> list[dict[str, Any]]:
    """Best-first hits of ``query`` as JSON rows (:func:`hit_row`); :class:`SearchError` when
    the search cannot be run as asked. ``sources``: the valid sources of the sources file."""
    if k < 1:
        raise SearchError(f"k must be at least 1, got {k}")
    chosen = search_source(sources, source, mode)
    query_vector, within = None, None
    if chosen is not None and mode != "bm25":
        embedder = embedder_opener(chosen)
        try:
            query_vector = embedder.embed_query(query)
        finally:
            embedder.close()
        within = chosen.source_id  # vectors are compared within their source (its model)
    index = index_opener(chosen.index if chosen is not None else IndexConfig())
    try:
        hits = index.search(query, k=k, source=within, mode=mode, query_vector=query_vector)
    finally:
        index.close()
    return [hit_row(hit, rank, mode) for rank, hit in enumerate(hits, 1)]
