"""Chunk vectors between the embedding step and the index: one record, one compact file format.

A :class:`VectorSet` holds one model's vectors for a list of chunks (row ``i`` of ``matrix``
is chunk ``chunk_ids[i]``), float32, L2-normalised by the embedder. ``reused`` says, per row,
whether the vector came from the cache (the index already held a vector for the same model and
chunk text hash) or was computed in this run; lineage records it.

On disk (staging) a set is a small binary file rather than JSON lists of floats (a 384-float
vector is 1,536 bytes here and ~7 KB as JSON text)::

    b"TVEC" | u8 version | u32 header length | header JSON (utf-8) | float32 little-endian rows

The header names the model, the dimensions, the row count, the chunk ids and the reuse flags;
:func:`read_vectors` checks every one of them against the payload's size before it allocates,
so a truncated or forged file is a :class:`VectorFileError`, never a huge allocation.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = ["MAX_DIMENSIONS", "VectorFileError", "VectorSet", "decode_vectors", "encode_vectors", "read_vectors"]

_MAGIC = b"TVEC"
_VERSION = 1
_PREFIX = struct.Struct("<4sBI")
MAX_DIMENSIONS = 8192  # larger than any embedding model in use (OpenAI's largest: 3,072)
_MAX_HEADER = 64 << 20


class VectorFileError(ValueError):
    """A vector file that is not one, or whose header and payload disagree."""


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
    header = json.dumps(
        {
            "model": vectors.model,
            "dimensions": vectors.dimensions,
            "rows": len(vectors.chunk_ids),
            "chunk_ids": vectors.chunk_ids,
            "reused": vectors.reused,
        },
        ensure_ascii=False,
    ).encode("utf-8")
    payload = np.ascontiguousarray(vectors.matrix, dtype="<f4").tobytes()
    return _PREFIX.pack(_MAGIC, _VERSION, len(header)) + header + payload


def decode_vectors(data: bytes) -> VectorSet:
    if len(data) < _PREFIX.size:
        raise VectorFileError(f"vector file of {len(data)} bytes is shorter than its prefix")
    magic, version, header_len = _PREFIX.unpack_from(data)
    if magic != _MAGIC:
        raise VectorFileError("not a vector file (bad magic)")
    if version != _VERSION:
        raise VectorFileError(f"vector file version {version} is not {_VERSION}")
    if header_len > min(_MAX_HEADER, len(data) - _PREFIX.size):
        raise VectorFileError(f"vector file header of {header_len} bytes runs past the file")
    try:
        header = json.loads(data[_PREFIX.size : _PREFIX.size + header_len])
        model, dims, rows = str(header["model"]), int(header["dimensions"]), int(header["rows"])
        chunk_ids, reused = [str(c) for c in header["chunk_ids"]], [bool(r) for r in header["reused"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise VectorFileError(f"vector file header is malformed: {exc}") from None
    if not 0 < dims <= MAX_DIMENSIONS or rows != len(chunk_ids) or rows != len(reused):
        raise VectorFileError(f"vector file header is inconsistent ({rows} rows, {dims} dimensions)")
    payload = memoryview(data)[_PREFIX.size + header_len :]
    if len(payload) != rows * dims * 4:
        raise VectorFileError(f"vector file holds {len(payload)} payload bytes, not {rows} x {dims} float32")
    matrix = np.frombuffer(payload, dtype="<f4").reshape(rows, dims).astype(np.float32)
    return VectorSet(model, dims, chunk_ids, matrix, reused)


def read_vectors(path: str | Path) -> VectorSet:
    return decode_vectors(Path(path).read_bytes())
