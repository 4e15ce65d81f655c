"""Compact staging of a batch's parsed documents and chunks: msgpack parts per batch and stage.

Staging a JSON file per document and stage cost more than parsing on a documentation site, so
the parse stage writes its documents (item key -> ``ParsedDocument``) and the chunk stage its
chunks (item key -> that item's chunks) as msgpack, encoded straight from the dataclasses by
msgspec. One file per batch once failed a run for good: 51 pages of 6 MiB made a 524 MB object,
over the database backend's cap, on every retry. A stage's output is therefore split into
*parts* (``parsed/parsed-0003-p000.msgpack``, ``chunks/chunked-0003-p001.msgpack`` ...), filled
item by item in batch order up to :data:`PART_TARGET_BYTES` (or the backend's own cap, when
smaller); each item records the :class:`~plugins.engine.records.StagedRef` (path, size, sha256)
of its part. An item whose encoding alone is over the backend's cap fails alone
(:class:`~include.staging.StagingTooLargeError`), never its batch.

:class:`PackedWriter` encodes one item at a time into the current part's buffer, so a stage
holds about one part and one document, not the whole batch twice; :class:`PackedReader`
verifies and decodes one part at a time and keeps only the current one. A part is a msgpack
map (a ``map32`` header, its count filled in when the part is written), which is exactly what
the single-file layout was: a run staged before parts (``parsed-NNNN.msgpack``) or before
msgpack (``parsed/<doc_id>.json``, told by the name) still reads.

Decoding a part whose size and hash are right but whose content is not this format (a part
planted by hand, another version's layout, a metadata map nested 200,000 deep) is a
:class:`~include.staging.StagingCorruptError` of the items pointing at that part: msgspec counts
every nesting level against the interpreter's recursion limit, so depth is bounded there, and
every error it raises on the way is caught here, in one place.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from include.contract import Chunk, ParsedDocument
from include.staging import StagedFile, StagingArea, StagingCorruptError, StagingTooLargeError
from include.staging.locations import backend_for
from plugins.engine.records import StagedRef

__all__ = [
    "PACKED_SUFFIX",
    "PART_TARGET_BYTES",
    "PackedReader",
    "PackedWriter",
    "UnstageableError",
    "decode_parsed",
    "encode_value",
    "part_limit",
    "put_chunks",
    "put_parsed",
]

PACKED_SUFFIX = ".msgpack"
# Well below the smallest backend cap (the database's 256 MiB: PostgreSQL is sent twice that,
# hex-escaped); read when a writer is made, so a test may lower it.
PART_TARGET_BYTES = 64 * 1024 * 1024

Kind = Literal["parsed", "chunked"]
_PREFIX: dict[Kind, str] = {"parsed": "parsed/parsed", "chunked": "chunks/chunked"}
_MAP32 = struct.Struct(">BI")  # msgpack map32: 0xdf and a 4-byte count, whatever the count
_HEADER = bytes(_MAP32.size)

# A metadata value msgpack cannot hold becomes its str, as the JSON files' ``default=str`` did.
_ENCODER = msgspec.msgpack.Encoder(enc_hook=str)
_PARSED = msgspec.msgpack.Decoder(dict[str, ParsedDocument])
_CHUNKS = msgspec.msgpack.Decoder(dict[str, list[Chunk]])
_ONE_PARSED = msgspec.msgpack.Decoder(ParsedDocument)
# what decoding a hostile part raises besides DecodeError (deep nesting, huge numbers)
_DECODE_ERRORS = (msgspec.MsgspecError, RecursionError, OverflowError, ValueError, TypeError, MemoryError)


class UnstageableError(ValueError):
    """An item's output msgpack cannot hold (an integer over 64 bits, nesting past the
    recursion limit): that item fails, not its batch."""

    reason = "unstageable"


def part_limit(staging: StagingArea) -> int:
    """The size a part is filled up to: :data:`PART_TARGET_BYTES`, or the backend's cap if smaller."""
    cap: int | None = getattr(backend_for(staging.root), "max_object_bytes", None)
    return PART_TARGET_BYTES if cap is None else min(PART_TARGET_BYTES, cap)


class PackedWriter:
    """Stages one batch's output of one stage as parts, item by item, in the order added.

    :meth:`add` encodes an item into the current part (writing the part first when the item
    would take it over its target); :meth:`close` writes the last part and returns every
    added item's part reference.
    """

    def __init__(self, staging: StagingArea, kind: Kind, batch: int) -> None:
        self._staging = staging
        self._name = f"{_PREFIX[kind]}-{batch:04d}"
        self._cap: int | None = getattr(backend_for(staging.root), "max_object_bytes", None)
        self._target = part_limit(staging)
        self._part = bytearray(_HEADER)
        self._scratch = bytearray()  # one item's encoding, before it is known to fit the part
        self._keys: list[str] = []
        self._refs: dict[str, StagedRef] = {}
        self.parts: list[StagedRef] = []

    def add(self, item_key: str, value: ParsedDocument | list[Chunk]) -> None:
        """Encode one item's output (:class:`StagingTooLargeError` when it alone is over the
        backend's cap, :class:`UnstageableError` when msgpack cannot hold it)."""
        try:
            _ENCODER.encode_into(item_key, self._scratch, 0)
            _ENCODER.encode_into(value, self._scratch, -1)
        except (RecursionError, OverflowError, TypeError, ValueError) as exc:
            self._scratch = bytearray()
            raise UnstageableError(f"{item_key!r}: {type(exc).__name__}: {exc}") from None
        self._append(item_key)

    def add_encoded(self, item_key: str, encoded: bytes) -> None:
        """:meth:`add` of an output :func:`encode_value` encoded already (in another process):
        the same bytes in the part, the same cap."""
        _ENCODER.encode_into(item_key, self._scratch, 0)
        self._scratch += encoded
        self._append(item_key)

    def _append(self, item_key: str) -> None:
        size = len(self._scratch)
        if self._cap is not None and size + len(_HEADER) > self._cap:
            self._scratch = bytearray()
            raise StagingTooLargeError(
                f"{item_key!r}: {size} bytes staged, over the staging backend's cap of {self._cap} bytes per object"
            )
        if self._keys and len(self._part) + size > self._target:
            self._write_part()
        self._part += self._scratch
        self._keys.append(item_key)

    def close(self) -> dict[str, StagedRef]:
        """Write the last part; item key -> the reference of the part holding it."""
        if self._keys:
            self._write_part()
        self._scratch = bytearray()
        return self._refs

    def _write_part(self) -> None:
        _MAP32.pack_into(self._part, 0, 0xDF, len(self._keys))
        name = f"{self._name}-p{len(self.parts):03d}{PACKED_SUFFIX}"
        # the buffer itself, not a bytes copy of it (a second part in memory): every backend
        # takes any bytes-like object (hashlib, file writes, psycopg2/sqlite3 BLOBs, fsspec)
        ref = StagedRef.of(self._staging.put_bytes(name, self._part))  # type: ignore[arg-type]
        self.parts.append(ref)
        self._refs.update(dict.fromkeys(self._keys, ref))
        self._part = bytearray(_HEADER)
        self._keys = []


def encode_value(value: ParsedDocument | list[Chunk]) -> bytes:
    """One item's output as :meth:`PackedWriter.add` encodes it (:class:`UnstageableError`)."""
    try:
        return _ENCODER.encode(value)
    except (RecursionError, OverflowError, TypeError, ValueError) as exc:
        raise UnstageableError(f"{type(exc).__name__}: {exc}") from None


def decode_parsed(encoded: bytes) -> ParsedDocument:
    """A document :func:`encode_value` encoded, as the chunk stage reads it back from a part (the
    same msgpack round trip): chunking it ahead of that stage gives it the very same input."""
    return _ONE_PARSED.decode(encoded)


def put_parsed(staging: StagingArea, batch: int, docs: Mapping[str, ParsedDocument]) -> StagedFile:
    """Stage a batch's parsed documents as one file, the layout before parts (tests, tools)."""
    return staging.put_bytes(f"parsed/parsed-{batch:04d}{PACKED_SUFFIX}", _ENCODER.encode(dict(docs)))


def put_chunks(staging: StagingArea, batch: int, chunks: Mapping[str, list[Chunk]]) -> StagedFile:
    """Stage a batch's chunks as one file, the layout before parts (tests, tools)."""
    return staging.put_bytes(f"chunks/chunked-{batch:04d}{PACKED_SUFFIX}", _ENCODER.encode(dict(chunks)))


class PackedReader:
    """Reads staged parsed documents and chunks, each part verified and decoded once.

    One reader lives for one stage of one batch: a part is checked against its recorded digest
    when first read, so a part changed between two stages is still refused by the next one.
    Only the current part is kept (items come in batch order, so each part is read once); a
    part that fails its check or its decoding fails every item pointing at it, read only once.
    """

    def __init__(self) -> None:
        self._key: tuple[str, int, str] | None = None
        self._entries: dict[str, Any] = {}
        self._error: StagingCorruptError | None = None

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
        if key != self._key:
            self._key, self._entries, self._error = key, {}, None  # the previous part goes first
            try:
                self._entries = _decode_part(ref, decoder)
            except StagingCorruptError as exc:
                self._error = exc
        if self._error is not None:
            raise StagingCorruptError(str(self._error))
        if item_key not in self._entries:
            raise StagingCorruptError(f"staged file {ref.path} holds nothing for {item_key!r}")
        return self._entries[item_key]


def _decode_part(ref: StagedRef, decoder: msgspec.msgpack.Decoder[Any]) -> dict[str, Any]:
    data = StagingArea.read_verified(ref.path, ref.digest())
    try:
        entries: dict[str, Any] = decoder.decode(data)
    except _DECODE_ERRORS as exc:  # the right size and hash, but not this format
        raise StagingCorruptError(f"staged file {ref.path}: {type(exc).__name__}: {str(exc)[:200]}") from None
    return entries
