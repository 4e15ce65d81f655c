"""Compact staging of a batch's parsed documents and chunks: one msgpack file per batch and stage.

Staging a JSON file per document and stage cost more than parsing on a documentation site:
``dataclasses.asdict``-style conversion, JSON text, and one file create (and later one unlink)
per document. The parse stage now writes ``parsed/parsed-NNNN.msgpack`` (item key ->
``ParsedDocument``) and the chunk stage ``chunks/chunked-NNNN.msgpack`` (item key -> its
chunks), encoded straight from the dataclasses by msgspec. Every item of the batch records the
same :class:`~plugins.engine.records.StagedRef` (path, size, sha256), so the digest check is
unchanged: the file is verified once per reading stage (:class:`PackedReader`), and a file
changed in staging fails every item that points at it, as a per-document file failed its one.

A run staged before this format (``parsed/<doc_id>.json``, ``chunks/<doc_id>.json``) is still
read: the format is told by the file name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from include.contract import Chunk, ParsedDocument
from include.staging import StagedFile, StagingArea, StagingCorruptError
from plugins.engine.records import StagedRef

__all__ = ["PACKED_SUFFIX", "PackedReader", "put_chunks", "put_parsed"]

PACKED_SUFFIX = ".msgpack"

# A metadata value msgpack cannot hold becomes its str, as the JSON files' ``default=str`` did.
_ENCODER = msgspec.msgpack.Encoder(enc_hook=str)
_PARSED = msgspec.msgpack.Decoder(dict[str, ParsedDocument])
_CHUNKS = msgspec.msgpack.Decoder(dict[str, list[Chunk]])


def put_parsed(staging: StagingArea, batch: int, docs: Mapping[str, ParsedDocument]) -> StagedFile:
    """Stage a batch's parsed documents (item key -> document) as one file."""
    return staging.put_bytes(f"parsed/parsed-{batch:04d}{PACKED_SUFFIX}", _ENCODER.encode(dict(docs)))


def put_chunks(staging: StagingArea, batch: int, chunks: Mapping[str, list[Chunk]]) -> StagedFile:
    """Stage a batch's chunks (item key -> that item's chunks, in order) as one file."""
    return staging.put_bytes(f"chunks/chunked-{batch:04d}{PACKED_SUFFIX}", _ENCODER.encode(dict(chunks)))


class PackedReader:
    """Reads staged parsed documents and chunks, each batch file verified and decoded once.

    One reader lives for one stage of one batch: a file is checked against its recorded digest
    when first read, so a file changed between two stages is still refused by the next one.
    """

    def __init__(self) -> None:
        self._files: dict[tuple[str, int, str], dict[str, Any]] = {}

    def parsed(self, ref: StagedRef, item_key: str) -> ParsedDocument:
        if not ref.path.endswith(PACKED_SUFFIX):  # a per-document JSON file of an older run
            return ParsedDocument.from_dict(StagingArea.read_json_verified(ref.path, ref.digest()))
        doc: ParsedDocument = self._entry(ref, item_key, _PARSED)
        return doc

    def chunks(self, ref: StagedRef, item_key: str) -> list[Chunk]:
        if not ref.path.endswith(PACKED_SUFFIX):
            return [Chunk.from_dict(c) for c in StagingArea.read_json_verified(ref.path, ref.digest())]
        chunks: list[Chunk] = self._entry(ref, item_key, _CHUNKS)
        return chunks

    def _entry(self, ref: StagedRef, item_key: str, decoder: msgspec.msgpack.Decoder[Any]) -> Any:
        key = (ref.path, ref.size, ref.sha256)
        if key not in self._files:
            data = StagingArea.read_verified(ref.path, ref.digest())
            try:
                self._files[key] = decoder.decode(data)
            except msgspec.DecodeError as exc:  # the right size and hash, but not this format
                raise StagingCorruptError(f"staged file {ref.path}: {exc}") from None
        entries = self._files[key]
        if item_key not in entries:
            raise StagingCorruptError(f"staged file {ref.path} holds nothing for {item_key!r}")
        return entries[item_key]
