"""Vectors in the Elasticsearch backend: how they are written, updated, searched and read back.

Pure builders (no client): ``elasticsearch.py`` sends what they build.

* Writing: a vector travels in the chunk's index op as a JSON array (``vector_json``); a kept
  chunk gets a partial update (``kept_update``) when its sequence moved or its vector changed.
* Searching: ``knn_clause`` is the top-level ``knn`` search option (approximate kNN over the
  HNSW graph, ``num_candidates`` per shard; the source filter is applied during the search, so
  ``k`` hits still come back). ES scores cosine as ``(1 + cosine) / 2``; ``cosine_of_score``
  turns that back into the cosine similarity the SQLite backend reports.
* Hybrid: Tributary fuses the BM25 and kNN rankings itself (``include.index.fusion``): ES's own
  ``rrf`` retriever needs a paid (Enterprise) licence, which a default install does not have.
* Reading (the embedding cache): ``cache_query`` finds a model's vectors by text hash;
  ``vector_source`` asks for the vector in ``_source``, which ES 9.2+ leaves out by default
  (``index.mapping.exclude_source_vectors``) unless the request sets ``exclude_vectors: false``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from include.index._es_mapping import VECTOR_FIELD

__all__ = [
    "MAX_NUM_CANDIDATES",
    "cache_query",
    "cosine_of_score",
    "kept_update",
    "knn_clause",
    "num_candidates",
    "vector_json",
    "vector_source",
    "vector_update",
]

_EXCLUDE_VECTORS_FROM = (9, 2)  # the first release that leaves vectors out of _source by default


def vector_json(vector: npt.NDArray[np.float32]) -> bytes:
    """A float32 vector as a JSON array of each value's shortest round-tripping float32 text
    (``0.1``, not float64's ``0.10000000149011612``: ~2x fewer bytes, the same float32 in ES)."""
    return b"[" + ",".join(str(v) for v in np.asarray(vector, dtype=np.float32)).encode() + b"]"


# Painless: a kept chunk whose write has no vector loses the stored one (a source that turned
# embedding off); it gets its current sequence in the same update.
_DROP_VECTOR_SCRIPT = (
    f"ctx._source.remove('{VECTOR_FIELD}'); ctx._source.remove('embedding_model');"
    " ctx._source.sequence = params.sequence"
)


def kept_update(
    sequence: int, stored: tuple[int | None, str | None], model: str | None, vector: npt.NDArray[np.float32] | None
) -> dict[str, Any] | None:
    """The partial update a kept chunk needs (None: it is as stored)."""
    seq, stored_model = stored
    if model is None and stored_model is not None:
        return {"script": {"lang": "painless", "source": _DROP_VECTOR_SCRIPT, "params": {"sequence": sequence}}}
    fields: dict[str, Any] = {}
    if seq != sequence:
        fields["sequence"] = sequence
    if vector is not None and model != stored_model:
        fields[VECTOR_FIELD] = np.asarray(vector, dtype=np.float32).tolist()
        fields["embedding_model"] = model
    return {"doc": fields} if fields else None


def vector_update(model: str, vector: npt.NDArray[np.float32]) -> dict[str, Any]:
    """The partial update giving a stored chunk a new vector (a re-embedding: its text stands)."""
    return {"doc": {VECTOR_FIELD: np.asarray(vector, dtype=np.float32).tolist(), "embedding_model": model}}


MAX_NUM_CANDIDATES = 10_000  # Elasticsearch's limit for num_candidates (and so for k)


def num_candidates(k: int) -> int:
    """Candidates each shard considers: more than ``k`` for recall, at least 100."""
    return min(MAX_NUM_CANDIDATES, max(100, 2 * k))


def knn_clause(
    query: npt.NDArray[np.float32], k: int, source: str | None, restrict: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The kNN option; ``restrict`` (the access filter) joins the source term in its ``filter``,
    which kNN applies during the graph search (``k`` hits that pass it, not a post-filter)."""
    clause: dict[str, Any] = {
        "field": VECTOR_FIELD,
        "query_vector": np.asarray(query, dtype=np.float32).tolist(),
        "k": min(k, MAX_NUM_CANDIDATES),
        "num_candidates": num_candidates(k),
    }
    filters = ([{"term": {"source": source}}] if source else []) + ([restrict] if restrict else [])
    if filters:
        clause["filter"] = filters
    return clause


def cosine_of_score(score: float) -> float:
    """ES's cosine kNN score ``(1 + cos) / 2`` as the cosine similarity itself."""
    return 2.0 * score - 1.0


def cache_query(model: str, text_hashes: Sequence[str]) -> dict[str, Any]:
    return {"bool": {"filter": [{"term": {"embedding_model": model}}, {"terms": {"text_hash": list(text_hashes)}}]}}


def vector_source(server_version: tuple[int, ...], fields: Sequence[str]) -> Any:
    """The ``_source`` option that returns ``fields``, the vector among them, on this server."""
    if server_version >= _EXCLUDE_VECTORS_FROM:
        return {"includes": list(fields), "exclude_vectors": False}
    return list(fields)
