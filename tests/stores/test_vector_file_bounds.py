"""Vector files are decoded within bounds (issue 33, point 14, the vector-file half).

A staged vector file whose header is forged or damaged must end as a ``VectorFileError`` (read
by the upsert stage as a :class:`~include.staging.StagingCorruptError`) before anything large is
built: ``dimensions: Infinity`` and ``rows: 1e400`` were an ``OverflowError``, a 100k-deep
header a ``RecursionError``, and a 60 MiB header of chunk ids cost ~2 GB (traced; 5.3 GB RSS)
before the typed error. The upsert stage then fails that item alone, as ``staging_corrupt``.
"""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from include.contract import Change, ChangeKind
from include.staging import StagingArea, StagingCorruptError
from include.vectors import MAX_HEADER_BYTES, VectorFileError, VectorSet, decode_vectors, encode_vectors
from plugins.engine.manifests import load_vectors
from plugins.engine.records import EmbedOutcome, ItemRecord, StagedRef

_PREFIX = struct.Struct("<4sBI")
PEAK_BOUND = 64 << 20  # the old decoder's peak on the 60 MiB header: ~2 GB traced


def _file(header: bytes, payload: bytes = b"") -> bytes:
    return _PREFIX.pack(b"TVEC", 1, len(header)) + header + payload


def _header(**fields: str) -> bytes:
    values = {"model": '"m"', "dimensions": "4", "rows": "0", "chunk_ids": "[]", "reused": "[]", **fields}
    return ("{" + ",".join(f'"{k}":{v}' for k, v in values.items()) + "}").encode()


HOSTILE: dict[str, Callable[[], bytes]] = {
    "dimensions_infinity": lambda: _file(_header(dimensions="Infinity")),
    "dimensions_nan": lambda: _file(_header(dimensions="NaN")),
    "rows_1e400": lambda: _file(_header(rows="1e400")),
    "rows_huge_int": lambda: _file(_header(rows="9" * 4000, dimensions="1")),
    "dimensions_float": lambda: _file(_header(dimensions="4.0")),
    "rows_negative": lambda: _file(_header(rows="-1")),
    "deep_header_100k": lambda: _file(b"[" * 100_000 + b"]" * 100_000),
    "deep_field_100k": lambda: _file(_header(chunk_ids="[" * 100_000 + "]" * 100_000)),
    "deep_unknown_field": lambda: _file(b'{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    # the old 2 GB case: one row claimed, 30 M chunk ids in a 60 MiB header
    "header_60mib": lambda: _file(_header(rows="1", chunk_ids="[" + "0," * (30 << 20) + "0]")),
    "header_past_file": lambda: _PREFIX.pack(b"TVEC", 1, 1000) + b"{}",
    "rows_not_payload": lambda: _file(_header(rows="1", chunk_ids='["a"]', reused="[false]"), b"\0" * 12),
    "rows_not_ids": lambda: _file(_header(rows="2", chunk_ids='["a"]', reused="[false]"), b"\0" * 32),
    "bad_magic": lambda: b"XVEC" + b"\0" * 20,
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_vector_file_is_staging_corrupt_within_memory(case: str) -> None:
    data = HOSTILE[case]()
    tracemalloc.start()
    try:
        with pytest.raises(VectorFileError):
            decode_vectors(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BOUND, f"{case}: {peak / 2**20:.1f} MiB traced while refusing it"


def test_the_worst_header_under_the_cap_decodes_within_bounds() -> None:
    """Two-character ids filling the cap: the most objects a header within it can build."""
    count = (MAX_HEADER_BYTES - 200) // 5
    data = _file(_header(rows="1", chunk_ids="[" + '"ab",' * count + '"ab"]'))
    tracemalloc.start()
    try:
        with pytest.raises(VectorFileError, match="inconsistent"):
            decode_vectors(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * PEAK_BOUND, f"{peak / 2**20:.1f} MiB"


def test_a_vector_file_round_trips() -> None:
    vectors = VectorSet("m", 3, ["c1", "c2"], np.arange(6, dtype=np.float32).reshape(2, 3), [True, False])
    back = decode_vectors(encode_vectors(vectors))
    assert (back.model, back.dimensions, back.chunk_ids, back.reused) == ("m", 3, ["c1", "c2"], [True, False])
    assert np.array_equal(back.matrix, vectors.matrix)


def test_a_file_written_by_the_json_encoder_before_still_reads() -> None:
    """The header as ``json.dumps`` wrote it (spaces after separators) still decodes."""
    header = b'{"model": "m", "dimensions": 2, "rows": 1, "chunk_ids": ["c"], "reused": [false]}'
    back = decode_vectors(_file(header, np.ones(2, dtype="<f4").tobytes()))
    assert back.chunk_ids == ["c"] and back.matrix.shape == (1, 2)


def test_a_document_too_large_for_one_header_is_refused_when_written() -> None:
    ids = [f"{i:040d}" for i in range(MAX_HEADER_BYTES // 40)]
    with pytest.raises(ValueError, match="header"):
        encode_vectors(VectorSet("m", 1, ids, np.zeros((len(ids), 1), dtype=np.float32)))


@pytest.mark.parametrize("case", ["dimensions_infinity", "rows_1e400", "deep_header_100k", "header_60mib"])
def test_the_upsert_stage_reads_a_hostile_staged_file_as_staging_corrupt(case: str, tmp_path: Path) -> None:
    """``load_vectors`` (what the upsert stage calls per item, catching StagingCorruptError) on
    a file whose recorded digest matches its hostile bytes: the item's error, not an untyped one."""
    staging = StagingArea.at(tmp_path / "run")
    staged = staging.put_bytes("vectors/doc.tvec", HOSTILE[case]())
    change = Change(item_key="a.md", kind=ChangeKind.NEW)
    embedded = EmbedOutcome(model="m", dimensions=4, file=StagedRef.of(staged), computed=0, reused=0)
    with pytest.raises(StagingCorruptError, match="staged vectors"):
        load_vectors(ItemRecord(change=change, embedded=embedded), [])
