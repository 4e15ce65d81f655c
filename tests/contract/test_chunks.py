"""Chunk records: the round trip through the staged JSON the engine reads back."""

from __future__ import annotations

from include.contract import Chunk, Position, content_chunk_id, content_hash, document_id, text_hash


def _chunk() -> Chunk:
    text = "tide  tables\n"
    return Chunk("d-00000", "d", 0, text, 2, text_hash(text), ["Ferries"], [Position(page=2)], "text", {"k": 1})


def test_a_chunk_round_trips_under_the_text_hash_key() -> None:
    chunk = _chunk()
    data = chunk.to_dict()
    assert data["text_hash"] == text_hash(chunk.text) and "content_hash" not in data
    assert Chunk.from_dict(data) == chunk


def test_chunks_staged_before_the_rename_still_read_back() -> None:
    # a run resumed across the upgrade reads chunks/<doc>.json written under the old key
    chunk = _chunk()
    old = {("content_hash" if k == "text_hash" else k): v for k, v in chunk.to_dict().items()}
    assert Chunk.from_dict(old) == chunk


def test_the_two_hashes_differ_in_what_counts() -> None:
    # a document's content_hash folds whitespace (a reflow is no change); a chunk's text_hash does not
    assert content_hash("tide  tables\n") == content_hash("tide tables")
    assert text_hash("tide  tables\n") != text_hash("tide tables")


def test_chunk_ids_follow_the_text_not_the_position() -> None:
    doc = document_id("web:docs", "a.html")
    digest = text_hash("tide tables")
    assert content_chunk_id(doc, digest) == f"{doc}-{digest[:16]}"  # the same text, the same id
    assert content_chunk_id(doc, digest, 0) == content_chunk_id(doc, digest)
    assert content_chunk_id(doc, digest, 2) == f"{doc}-{digest[:16]}-2"  # its third occurrence
    assert content_chunk_id(doc, text_hash("tide tables.")) != content_chunk_id(doc, digest)
    assert content_chunk_id(document_id("web:docs", "b.html"), digest) != content_chunk_id(doc, digest)
