"""Builders of index writes for the contract suite and the benchmark."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from include.contract import Chunk, Position, content_hash, document_id, text_hash
from include.index.base import DocumentRecord, DocumentWrite
from include.vectors import VectorSet

__all__ = ["make_write", "positional_chunk_id", "unit", "with_vectors"]


def positional_chunk_id(doc_id: str, sequence: int) -> str:
    """A position-derived chunk id (the index takes any id; these make "chunk i" easy to name)."""
    return f"{doc_id}-{sequence:05d}"


def make_write(
    source: str,
    item_key: str,
    texts: list[str],
    *,
    title: str | None = None,
    run_id: str = "run-1",
    version: str = "v1",
    stale: list[str] | None = None,
    heading: list[str] | None = None,
    positions: bool = False,
    content_ids: bool = False,
) -> DocumentWrite:
    """One document whose chunk ``i`` has text ``texts[i]`` (ids and hashes as the engine makes them).

    ``content_ids``: the chunk id follows the text, not the position (an inserted paragraph
    shifts the sequence of the chunks after it, not their ids).
    """
    doc_id = document_id(source, item_key)
    chunks = [
        Chunk(
            chunk_id=f"{doc_id}-{text_hash(text)[:16]}" if content_ids else positional_chunk_id(doc_id, i),
            doc_id=doc_id,
            sequence=i,
            text=text,
            token_count=len(text.split()),
            text_hash=text_hash(text),
            heading_path=list(heading or []),
            positions=[Position(page=i + 1, bbox=(10.0, 20.5 + i, 200.0, 40.0 + i))] if positions else [],
            kind="text",
            metadata={"chunker": "token", "chunker_version": "1", "chunker_options_hash": "abc123"},
        )
        for i, text in enumerate(texts)
    ]
    doc = DocumentRecord(
        source=source,
        doc_id=doc_id,
        item_key=item_key,
        title=title if title is not None else item_key.rsplit("/", 1)[-1],
        url=f"http://127.0.0.1/{item_key}",
        media_type="text/html",
        doc_version=version,
        content_hash=content_hash("\n".join(texts)),
        run_id=run_id,
        metadata={"lang": "en"},
    )
    return DocumentWrite(document=doc, chunks=chunks, stale_chunk_ids=list(stale or []))


def unit(values: Sequence[float]) -> npt.NDArray[np.float32]:
    """``values`` as an L2-normalised float32 vector (as embedders return them)."""
    v = np.asarray(values, dtype=np.float32)
    return (v / np.linalg.norm(v)).astype(np.float32)


def with_vectors(
    write: DocumentWrite, rows: Sequence[Sequence[float]], *, model: str = "test:model@1"
) -> DocumentWrite:
    """``write`` carrying one vector per chunk (row ``i`` for chunk ``i``, normalised)."""
    matrix = np.stack([unit(r) for r in rows]).astype(np.float32)
    write.vectors = VectorSet(model, matrix.shape[1], [c.chunk_id for c in write.chunks], matrix)
    return write
