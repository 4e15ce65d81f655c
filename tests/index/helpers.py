"""Builders of index writes for the contract suite and the benchmark."""

from __future__ import annotations

from include.contract import Chunk, Position, chunk_id, content_hash, document_id, text_hash
from include.index.base import DocumentRecord, DocumentWrite

__all__ = ["make_write"]


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
) -> DocumentWrite:
    """One document whose chunk ``i`` has text ``texts[i]`` (ids and hashes as the engine makes them)."""
    doc_id = document_id(source, item_key)
    chunks = [
        Chunk(
            chunk_id=chunk_id(doc_id, i),
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
