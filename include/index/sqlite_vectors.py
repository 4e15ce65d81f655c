"""Chunk vectors inside the SQLite index file, through the ``sqlite-vec`` extension (``vec0``).

One ``vec0`` table per vector size, ``chunks_vec_<dims>``, created on the first write of that
size; its key is ``chunks.rowid`` (``chunk_rowid``), ``index_name`` is a partition key (KNN
searches only the index asked for) and ``source`` a metadata column (sqlite-vec applies both
filters during the KNN search, not after it, so a source filter still returns ``k`` hits).
Distances are cosine (``distance_metric=cosine``: 1 - cosine similarity). ``chunks`` records,
per chunk, the model and the size of its vector (``embedding_model``, ``embedding_dims``; NULL:
no vector), which say where the vector lives and key the embedding cache.

Driver: the extension must be loadable. Python builds without ``enable_load_extension`` (this
machine's pyenv build, macOS's system Python) use ``pysqlite3`` (PyPI ``pysqlite3-binary``, its
own recent SQLite) when it is installed. Without a loadable extension the index still works for
BM25; writing or searching vectors then fails with :class:`VectorsUnavailable`.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt
import sqlite_vec

from include.index._vector_checks import VectorWriteError, document_vectors, query_array
from include.vectors import VectorSet

# Optional: only needed where the stdlib sqlite3 cannot load extensions (no wheel on every platform).
try:
    import pysqlite3.dbapi2 as pysqlite3
except ImportError:  # pragma: no cover - platform without the wheel
    pysqlite3 = None

__all__ = [
    "DB_ERRORS",
    "MAX_VECTOR_BATCH",
    "StoredVector",
    "VectorWriteError",
    "VectorsUnavailable",
    "connect",
    "delete_vector",
    "document_vectors",
    "knn",
    "put_vector",
    "replace_vectors",
    "stored_vectors",
    "vec_table",
]

log = logging.getLogger(__name__)

# Both drivers' errors: the connection may come from either module.
DB_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error,) + ((pysqlite3.Error,) if pysqlite3 is not None else ())
_LOAD_ERRORS: tuple[type[Exception], ...] = (AttributeError, *DB_ERRORS)
_REPLACE_ERRORS: tuple[type[Exception], ...] = (*DB_ERRORS, VectorWriteError)  # one document's, not the batch's
MAX_VECTOR_BATCH = 500  # text hashes per cache lookup statement (SQLite's variable limit is 32766)


class VectorsUnavailable(RuntimeError):
    """The sqlite-vec extension could not be loaded into this connection."""


@dataclass(frozen=True, slots=True)
class StoredVector:
    """Where a stored chunk's vector is (``dims`` None: it has none)."""

    model: str | None
    dims: int | None


def _driver() -> ModuleType:
    if hasattr(sqlite3.Connection, "enable_load_extension") or pysqlite3 is None:
        return sqlite3
    driver: ModuleType = pysqlite3
    return driver


def connect(path: Path) -> tuple[Any, bool]:
    """An autocommit connection to ``path`` and whether sqlite-vec is loaded into it."""
    db = _driver().connect(str(path), timeout=60, isolation_level=None)
    try:
        db.enable_load_extension(True)
        sqlite_vec.load(db)
        db.enable_load_extension(False)
    except _LOAD_ERRORS as exc:
        log.warning("sqlite-vec could not be loaded (%s): the index %s serves BM25 only", exc, path)
        return db, False
    return db, True


def vec_table(dims: int) -> str:
    return f"chunks_vec_{int(dims)}"


def _ensure_table(cur: Any, dims: int) -> str:
    table = vec_table(dims)
    cur.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING vec0("
        " chunk_rowid INTEGER PRIMARY KEY, index_name TEXT PARTITION KEY, source TEXT,"
        f" embedding FLOAT[{int(dims)}] distance_metric=cosine)"
    )
    return table


def _blob(vector: npt.NDArray[np.float32]) -> bytes:
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


def put_vector(
    cur: Any, *, dims: int, rowid: int, index_name: str, source: str, vector: npt.NDArray[np.float32]
) -> None:
    table = _ensure_table(cur, dims)
    cur.execute(
        f"INSERT INTO {table} (chunk_rowid, index_name, source, embedding) VALUES (?, ?, ?, ?)",
        (rowid, index_name, source, _blob(vector)),
    )


def delete_vector(cur: Any, *, dims: int | None, rowid: int) -> None:
    if dims is not None and _table_exists(cur, vec_table(dims)):
        cur.execute(f"DELETE FROM {vec_table(dims)} WHERE chunk_rowid = ?", (rowid,))


def replace_vectors(db: Any, *, index_name: str, source: str, vectors: Mapping[str, VectorSet]) -> dict[str, str]:
    """Store new vectors for chunks of ``source`` already in the index (a re-embedding), by doc
    id, in one transaction: each document whole or not at all. Doc id -> error for the others."""
    errors: dict[str, str] = {}
    cur, now = db.cursor(), time.time()
    cur.execute("BEGIN IMMEDIATE")
    try:
        for doc_id, doc_vectors in vectors.items():
            cur.execute("SAVEPOINT doc")
            try:
                _replace_document(cur, index_name, source, doc_vectors, now)
            except _REPLACE_ERRORS as exc:  # that document's problem, not the others'
                cur.execute("ROLLBACK TO doc")
                errors[doc_id] = f"sqlite: {exc}"
            cur.execute("RELEASE doc")
        cur.execute("COMMIT")
    except BaseException:
        cur.execute("ROLLBACK")
        raise
    return errors


def _replace_document(cur: Any, index_name: str, source: str, vectors: VectorSet, now: float) -> None:
    if vectors.matrix.size and not np.isfinite(vectors.matrix).all():
        raise VectorWriteError(f"vectors of model {vectors.model!r} hold NaN or infinite values")
    for chunk_id, vector in zip(vectors.chunk_ids, vectors.matrix, strict=True):
        row = cur.execute(
            "SELECT rowid, embedding_dims FROM chunks WHERE index_name = ? AND source = ? AND chunk_id = ?",
            (index_name, source, chunk_id),
        ).fetchone()
        if row is None:
            raise VectorWriteError(f"chunk {chunk_id} is not in the index")
        delete_vector(cur, dims=row[1], rowid=row[0])
        put_vector(cur, dims=vectors.dimensions, rowid=row[0], index_name=index_name, source=source, vector=vector)
        cur.execute(
            "UPDATE chunks SET embedding_model = ?, embedding_dims = ?, updated_at = ? WHERE rowid = ?",
            (vectors.model, vectors.dimensions, now, row[0]),
        )


def _table_exists(cur: Any, table: str) -> bool:
    return cur.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone() is not None


def knn(
    db: Any,
    *,
    index_name: str,
    query_vector: npt.NDArray[np.float32],
    k: int,
    source: str | None,
    only: tuple[str, list[Any]] | None = None,
) -> list[tuple[int, float]]:
    """(chunk rowid, cosine similarity) of the ``k`` nearest stored vectors, nearest first.

    ``only``: a WHERE term on ``chunk_rowid`` and its arguments (the permitted chunks,
    ``include.index.sqlite_access``). sqlite-vec takes ``chunk_rowid IN (...)`` as a KNN
    constraint, skipping other rows while it scans, so ``k`` hits come back when that many pass.

    An index with no vectors gives ``[]``; a query whose size no stored vector of the index has
    is a ValueError naming both sizes (it was embedded with another model than the chunks).
    """
    query = query_array(query_vector)
    dims = int(query.shape[0])
    if k <= 0:
        return []
    if _dims_present(db, index_name, dims) is None:
        other = _dims_present(db, index_name, None)
        if other is None:
            return []  # nothing embedded in this index: the vector ranking is empty
        raise ValueError(
            f"the query vector has {dims} dimensions but the index {index_name!r} holds {other}-dimension "
            "vectors: embed the query with the model its chunks were embedded with"
        )
    sql = f"SELECT chunk_rowid, distance FROM {vec_table(dims)} WHERE embedding MATCH ? AND k = ? AND index_name = ?"
    args: list[Any] = [_blob(query), k, index_name]
    if source:
        sql += " AND source = ?"
        args.append(source)
    if only is not None:
        sql += f" AND {only[0]}"
        args.extend(only[1])
    return [(int(rowid), 1.0 - float(distance)) for rowid, distance in db.execute(sql + " ORDER BY distance", args)]


def _dims_present(db: Any, index_name: str, dims: int | None) -> int | None:
    """``dims`` if some chunk of the index has a vector of that size (None: of any size)."""
    args: list[Any]
    if dims is None:
        sql, args = "embedding_dims IS NOT NULL", [index_name]
    else:
        sql, args = "embedding_dims = ?", [index_name, dims]
    row = db.execute(f"SELECT embedding_dims FROM chunks WHERE index_name = ? AND {sql} LIMIT 1", args).fetchone()
    return None if row is None else int(row[0])


def stored_vectors(
    db: Any, *, index_name: str, model: str, text_hashes: Iterable[str]
) -> dict[str, npt.NDArray[np.float32]]:
    """Vectors of ``model`` stored in the index, by chunk text hash (the embedding cache).

    Should the model's vectors be stored at several sizes (a shortened model re-configured),
    the most recently written one wins; callers check the size they need.
    """
    found: dict[str, npt.NDArray[np.float32]] = {}
    for batch in _batches(dict.fromkeys(text_hashes), MAX_VECTOR_BATCH):
        marks = ",".join("?" * len(batch))
        rows = db.execute(
            "SELECT text_hash, rowid, embedding_dims FROM chunks WHERE index_name = ? AND embedding_model = ?"
            f" AND embedding_dims IS NOT NULL AND text_hash IN ({marks}) ORDER BY updated_at DESC",
            [index_name, model, *batch],
        ).fetchall()
        for text_hash, rowid, dims in rows:
            if text_hash in found:
                continue
            # a point query by key: vec0 scans the whole table for joins and IN lists
            blob = db.execute(f"SELECT embedding FROM {vec_table(dims)} WHERE chunk_rowid = ?", (rowid,)).fetchone()
            if blob is not None:
                found[text_hash] = np.frombuffer(blob[0], dtype="<f4").astype(np.float32)
    return found


def _batches(items: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
