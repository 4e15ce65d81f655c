"""What both index backends check of a write's vectors before storing them."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from include.index.base import DocumentWrite

__all__ = ["VectorWriteError", "document_vectors", "query_array"]


class VectorWriteError(ValueError):
    """A document's vectors that cannot be stored (they fail that document, not the batch)."""


def document_vectors(write: DocumentWrite) -> dict[str, npt.NDArray[np.float32]] | None:
    """The write's vectors by chunk id (None: a BM25-only write); refuses what cannot be stored."""
    vectors = write.vectors
    if vectors is None:
        return None
    by_chunk = vectors.by_chunk()
    missing = [c.chunk_id for c in write.chunks if c.chunk_id not in by_chunk]
    if missing:
        raise VectorWriteError(f"{len(missing)} of {len(write.chunks)} chunks have no vector (first: {missing[0]})")
    if vectors.matrix.size and not np.isfinite(vectors.matrix).all():
        raise VectorWriteError(f"vectors of model {vectors.model!r} hold NaN or infinite values")
    return by_chunk


def query_array(query_vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """The query vector as one float32 row; NaN or infinite values are a ValueError."""
    query = np.asarray(query_vector, dtype=np.float32).reshape(-1)
    if query.size == 0 or not np.isfinite(query).all():
        raise ValueError("the query vector is empty or holds NaN or infinite values")
    return query
