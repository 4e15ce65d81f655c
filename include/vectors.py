"""Chunk vectors between the embedding step and the index: one record, one compact file format.

A :class:`VectorSet` holds one model's vectors for a list of chunks (row ``i`` of ``matrix``
is chunk ``chunk_ids[i]``), float32, L2-normalised by the embedder. ``reused`` says, per row,
whether the vector came from the cache (the index already held a vector for the same model and
chunk text hash) or was computed in this run; lineage records it.

On disk (staging) a set is a small binary file rather than JSON lists of floats (a 384-float
vector is 1,536 bytes here and ~7 KB as JSON text)::

    b"TVEC" | u8 version | u32 header length | header JSON (utf-8) | float32 little-endian rows

The header names the model, the dimensions, the row count, the chunk ids and the reuse flags.
Reading one is bounded before anything is decoded: the header may hold at most
:data:`MAX_HEADER_BYTES`, and it is decoded straight into its typed shape (msgspec), so a value
of the wrong type (``Infinity``, ``1e400``, a 100k-deep array) is refused at its first byte
instead of being built; the row count and dimensions are then checked against the payload's
size before the matrix is allocated. Any file that is not a vector file of this version is a
:class:`VectorFileError`, which the upsert stage reads as a ``StagingCorruptError``: the item it
belongs to fails as ``staging_corrupt`` (retried next run), never its batch.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import msgspec
import numpy as np
import numpy.typing as npt

__all__ = [
    "MAX_DIMENSIONS",
    "MAX_HEADER_BYTES",
    "MAX_ROWS",
    "VectorFileError",
    "VectorSet",
    "decode_vectors",
    "encode_vectors",
    "read_vectors",
]

_MAGIC = b"TVEC"
_VERSION = 1
_PREFIX = struct.Struct("<4sBI")
MAX_DIMENSIONS = 8192  # larger than any embedding model in use (OpenAI's largest: 3,072)
# A header costs ~55 bytes per chunk (its id and reuse flag): 4 MiB hold ~75k chunks of one
# document, far more than any parsed document yields; the worst header under the cap (millions
# of two-character ids) decodes in ~50 MiB.
MAX_HEADER_BYTES = 4 << 20
MAX_ROWS = 1 << 20  # chunks of one document


class VectorFileError(ValueError):
    """A vector file that is not one, or whose header and payload disagree. The reader of a staged
    one (:func:`plugins.engine.manifests.load_vectors`) raises it as a ``StagingCorruptError``
    (not a subclass of it here: ``include`` would import ``include.staging``, a package cycle)."""


class _Header(msgspec.Struct, forbid_unknown_fields=True):
    """The header's one shape: decoding refuses any other type at the first byte of it."""

    model: str
    dimensions: Annotated[int, msgspec.Meta(gt=0, le=MAX_DIMENSIONS)]
    rows: Annotated[int, msgspec.Meta(ge=0, le=MAX_ROWS)]
    chunk_ids: list[str]
    reused: list[bool]


_HEADER = msgspec.json.Decoder(_Header)


@dataclass(slots=True)
class VectorSet:
    model: str
    dimensions: int
    chunk_ids: list[str] = field(default_factory=list)
    matrix: npt.NDArray[np.float32] = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    reused: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.matrix.size == 0:
            self.matrix = np.zeros((len(self.chunk_ids), self.dimensions), dtype=np.float32)
        if self.matrix.shape != (len(self.chunk_ids), self.dimensions):
            raise ValueError(
                f"vector matrix {self.matrix.shape} does not match {len(self.chunk_ids)} chunks x {self.dimensions}"
            )
        if not self.reused:
            self.reused = [False] * len(self.chunk_ids)
        if len(self.reused) != len(self.chunk_ids):
            raise ValueError("one reuse flag per chunk")

    def by_chunk(self) -> dict[str, npt.NDArray[np.float32]]:
        """Each chunk's vector (views into the matrix)."""
        return {cid: self.matrix[i] for i, cid in enumerate(self.chunk_ids)}


def encode_vectors(vectors: VectorSet) -> bytes:
    """The file of ``vectors`` (``ValueError`` when its header would pass :data:`MAX_HEADER_BYTES`)."""
    rows = len(vectors.chunk_ids)
    header = msgspec.json.encode(_Header(vectors.model, vectors.dimensions, rows, vectors.chunk_ids, vectors.reused))
    if len(header) > MAX_HEADER_BYTES or rows > MAX_ROWS:
        raise ValueError(f"{rows} vectors need a {len(header)}-byte header; a vector file holds {MAX_HEADER_BYTES}")
    payload = np.ascontiguousarray(vectors.matrix, dtype="<f4").tobytes()
    return _PREFIX.pack(_MAGIC, _VERSION, len(header)) + header + payload


def decode_vectors(data: bytes) -> VectorSet:
    """The vector set of a file's bytes (:class:`VectorFileError` if it is not a valid one)."""
    if len(data) < _PREFIX.size:
        raise VectorFileError(f"vector file of {len(data)} bytes is shorter than its prefix")
    magic, version, header_len = _PREFIX.unpack_from(data)
    if magic != _MAGIC:
        raise VectorFileError("not a vector file (bad magic)")
    if version != _VERSION:
        raise VectorFileError(f"vector file version {version} is not {_VERSION}")
    if header_len > MAX_HEADER_BYTES:
        raise VectorFileError(f"vector file header of {header_len} bytes is over the {MAX_HEADER_BYTES}-byte cap")
    if header_len > len(data) - _PREFIX.size:
        raise VectorFileError(f"vector file header of {header_len} bytes runs past the file")
    try:
        header = _HEADER.decode(memoryview(data)[_PREFIX.size : _PREFIX.size + header_len])
    except msgspec.DecodeError as exc:  # ValidationError included: a wrong type or an out-of-range count
        raise VectorFileError(f"vector file header is malformed: {exc}") from None
    rows, dims = header.rows, header.dimensions
    if rows != len(header.chunk_ids) or rows != len(header.reused):
        raise VectorFileError(
            f"vector file header is inconsistent ({rows} rows, {len(header.chunk_ids)} chunk ids, "
            f"{len(header.reused)} reuse flags)"
        )
    payload = memoryview(data)[_PREFIX.size + header_len :]
    if len(payload) != rows * dims * 4:  # before the matrix is allocated
        raise VectorFileError(f"vector file holds {len(payload)} payload bytes, not {rows} x {dims} float32")
    matrix = np.frombuffer(payload, dtype="<f4").reshape(rows, dims).astype(np.float32)
    return VectorSet(header.model, dims, header.chunk_ids, matrix, header.reused)


def read_vectors(path: str | Path) -> VectorSet:
    return decode_vectors(Path(path).read_bytes())
