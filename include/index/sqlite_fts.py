"""The embedded default index: SQLite with an FTS5 full-text table and BM25 ranking.

One database file may hold several named indexes (``index_name`` column). ``chunks`` holds
every chunk with its document fields; ``chunks_fts`` (FTS5, rowid = ``chunks.rowid``) holds the
searchable text. CJK characters are indexed one per token (FTS5's ``unicode61`` tokenizer would
otherwise treat a whole run of Chinese as one word).

Queries (``fts_query``) are ranked retrieval, not boolean filters: the query's terms are OR'd
and BM25 ranks what matches any of them (Elasticsearch's ``match`` and Lucene's query parser
default to OR too; an AND of every word of a natural-language question matches almost nothing).
A CJK run is queried as its overlapping bigrams, each a two-character phrase (``"知 识" OR
"识 库"`` for 知识库), as Lucene's CJKBigramFilter and Elasticsearch's ``cjk`` analyzer do; a
lone CJK character is itself. English stop words (Lucene's ``EnglishAnalyzer`` default set) are
left out of a query that has other terms: under OR each would match nearly every chunk, so FTS5
would score almost every row for a term whose IDF is ~0 anyway. At most ``MAX_QUERY_TERMS`` (64)
distinct terms are searched (:mod:`include.index.query_text`), and every search statement runs
under a progress handler that stops it at the search's time limit (:class:`SearchTimeout`).

Vectors live in the same file, in ``sqlite-vec`` tables (``include.index.sqlite_vectors``);
``search`` ranks by BM25, by cosine similarity to a query vector, or by both fused (RRF).
Documents' access entries live in ``doc_access`` (``include.index.sqlite_access``), joined
inside both rankings when a search is restricted, and not at all when it is not.

Concurrency: WAL mode and a busy timeout let several Airflow task processes write in turn.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from include.config import IndexConfig
from include.contract import Chunk, Position
from include.failpoints import failpoint
from include.index import sqlite_access as acl
from include.index.base import (
    DEFAULT_SEARCH_TIME_LIMIT,
    DocumentRecord,
    DocumentWrite,
    IndexBackend,
    SearchDeadline,
    SearchHit,
    UpsertResult,
    check_time_limit,
)
from include.index.fusion import (
    DEFAULT_VECTOR_WEIGHT,
    check_vector_weight,
)
from include.index.query_text import ENGLISH_STOP_WORDS, fts_query, query_terms, segment_cjk
from include.index.sqlite_vectors import (
    DB_ERRORS,
    StoredVector,
    VectorsUnavailable,
    VectorWriteError,
    connect,
    delete_vector,
    document_vectors,
    knn,
    put_vector,
    replace_vectors,
    stored_vectors,
)
from include.settings import get_settings
from include.vectors import VectorSet

__all__ = ["ENGLISH_STOP_WORDS", "SqliteFtsIndex", "fts_query", "query_terms", "segment_cjk"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (
    rowid INTEGER PRIMARY KEY,
    chunk_id TEXT NOT NULL,
    index_name TEXT NOT NULL,
    source TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    item_key TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    token_count INTEGER NOT NULL,
    text_hash TEXT NOT NULL,
    heading_path TEXT NOT NULL,
    positions TEXT NOT NULL,
    metadata TEXT NOT NULL,
    title TEXT,
    url TEXT,
    media_type TEXT,
    doc_version TEXT,
    doc_content_hash TEXT,
    run_id TEXT,
    updated_at REAL NOT NULL,
    embedding_model TEXT,
    embedding_dims INTEGER,
    UNIQUE (index_name, chunk_id)
);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks (index_name, doc_id);
CREATE INDEX IF NOT EXISTS chunks_source ON chunks (index_name, source);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(body, title, tokenize = 'unicode61 remove_diacritics 2');
"""

# Indexes on columns an old file gains in ``_migrate`` (created after it, not in ``_SCHEMA``).
_MIGRATED_INDEXES = """
CREATE INDEX IF NOT EXISTS chunks_text_hash ON chunks (index_name, text_hash);
CREATE INDEX IF NOT EXISTS chunks_vector_dims ON chunks (index_name, embedding_dims);
"""

# What ``chunks.text_hash`` was called in index files made before the rename (``SqliteFtsIndex._migrate``).
_LEGACY_TEXT_HASH_COLUMN = "content_hash"
# Columns added since the first release (NULL in old rows: no vector).
_ADDED_COLUMNS = {"embedding_model": "TEXT", "embedding_dims": "INTEGER"}
_INSERT_COLUMNS = (
    "chunk_id, index_name, source, doc_id, item_key, seq, kind, text, token_count, text_hash, heading_path,"
    " positions, metadata, title, url, media_type, doc_version, doc_content_hash, run_id, updated_at,"
    " embedding_model, embedding_dims"
)
# what fails one document of a batch (the database refused it, or its vectors cannot be stored)
_DOCUMENT_ERRORS: tuple[type[Exception], ...] = (*DB_ERRORS, VectorWriteError, VectorsUnavailable)
# how many SQLite VM instructions run between two looks at a search's deadline (a look is one
# time.monotonic(); 10,000 instructions are well under a millisecond)
_PROGRESS_INSTRUCTIONS = 10_000
_UPDATE_ASSIGNMENTS = ", ".join(f"{c.strip()}=?" for c in _INSERT_COLUMNS.split(","))


class SqliteFtsIndex(IndexBackend):
    backend_name = "sqlite"

    def __init__(
        self,
        path: str | Path,
        index_name: str = "tributary",
        *,
        hybrid_vector_weight: float = DEFAULT_VECTOR_WEIGHT,
        search_time_limit: float = DEFAULT_SEARCH_TIME_LIMIT,
    ) -> None:
        self.hybrid_vector_weight = check_vector_weight(hybrid_vector_weight)
        self.search_time_limit = check_time_limit(search_time_limit)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.index_name = index_name
        self._db, self._vectors_loaded = connect(self.path)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=60000")
        self._db.executescript(_SCHEMA + acl.ACCESS_SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Bring an index file made by an older release up to ``_SCHEMA``.

        The chunk's text hash column was ``content_hash``, the name that now means a document's
        hash only (``doc_content_hash``). RENAME COLUMN rewrites the table's definition in place:
        rows, indexes and rowids stay, and ``chunks_fts`` (a separate FTS5 table joined on rowid,
        no triggers) does not name the column. The vector columns (``_ADDED_COLUMNS``) are added
        as NULL (no chunk has a vector yet; the ``vec0`` tables appear on the first vector write).
        Inside BEGIN IMMEDIATE, so two processes opening the same old file migrate it once.
        """
        if not self._needs_migration(self._chunk_columns()):  # the usual open: no write lock taken
            self._db.executescript(_MIGRATED_INDEXES)
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            columns = self._chunk_columns()  # again under the lock: another process may have migrated it
            if _LEGACY_TEXT_HASH_COLUMN in columns and "text_hash" not in columns:
                self._db.execute(f"ALTER TABLE chunks RENAME COLUMN {_LEGACY_TEXT_HASH_COLUMN} TO text_hash")
            for name, decl in _ADDED_COLUMNS.items():
                if name not in columns:
                    self._db.execute(f"ALTER TABLE chunks ADD COLUMN {name} {decl}")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.executescript(_MIGRATED_INDEXES)

    @staticmethod
    def _needs_migration(columns: set[str]) -> bool:
        return _LEGACY_TEXT_HASH_COLUMN in columns or not set(_ADDED_COLUMNS) <= columns

    def _chunk_columns(self) -> set[str]:
        return {row[1] for row in self._db.execute("PRAGMA table_info(chunks)")}

    @classmethod
    def from_config(cls, config: IndexConfig) -> Self:
        """``options.path`` or the settings' index file (``$TRIBUTARY_INDEX_PATH``);
        ``options.hybrid_vector_weight`` (see :mod:`include.index.fusion`); ``options.search_time_limit``
        (seconds, see :mod:`include.index.base`)."""
        path = config.options.get("path") or get_settings().index_path
        weight = config.options.get("hybrid_vector_weight", DEFAULT_VECTOR_WEIGHT)
        limit = config.options.get("search_time_limit", DEFAULT_SEARCH_TIME_LIMIT)
        return cls(path, index_name=config.name, hybrid_vector_weight=weight, search_time_limit=limit)

    # ------------------------------------------------------------------------------- writes
    def upsert(self, writes: Sequence[DocumentWrite]) -> list[UpsertResult]:
        results: list[UpsertResult] = []
        cur = self._db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            for n, write in enumerate(writes):
                cur.execute("SAVEPOINT doc")
                try:
                    results.append(self._upsert_one(cur, write))
                    failpoint(f"upsert:doc:{n}")  # mid-transaction: document n written, not committed
                    cur.execute("RELEASE doc")
                except _DOCUMENT_ERRORS as exc:  # one bad document never fails the batch
                    cur.execute("ROLLBACK TO doc")
                    cur.execute("RELEASE doc")
                    results.append(UpsertResult(write.document.doc_id, ok=False, error=f"sqlite: {exc}"))
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        return results

    def _upsert_one(self, cur: Any, write: DocumentWrite) -> UpsertResult:
        doc = write.document
        vectors = document_vectors(write)
        if vectors is not None and not self._vectors_loaded:
            raise VectorsUnavailable("the sqlite-vec extension is not loaded: vectors cannot be stored")
        acl.write_entries(cur, self.index_name, doc.doc_id, doc.access)  # even if no chunk changed
        model = write.vectors.model if write.vectors is not None else None
        existing = {
            row[0]: (row[1], row[2], (row[3], row[4]), row[5], StoredVector(row[6], row[7]))
            for row in cur.execute(
                "SELECT chunk_id, rowid, text_hash, url, title, seq, embedding_model, embedding_dims"
                " FROM chunks WHERE index_name = ? AND doc_id = ?",
                (self.index_name, doc.doc_id),
            )
        }
        now = time.time()
        written = unchanged = 0
        # 1. new and changed chunks first ...
        for chunk in write.chunks:
            vector = vectors[chunk.chunk_id] if vectors is not None else None
            want = StoredVector(model, int(vector.shape[0])) if vector is not None else StoredVector(None, None)
            prior = existing.get(chunk.chunk_id)
            # same text and same place: nothing to rewrite (a moved URL or a new title is rewritten)
            if prior is not None and prior[1] == chunk.text_hash and prior[2] == (doc.url, doc.title):
                self._refresh_kept(cur, prior[0], chunk, doc, (prior[3], prior[4]), want, vector)
                unchanged += 1
                continue
            row = (*self._row(chunk, doc, now), want.model, want.dims)
            if prior is None:
                cur.execute(f"INSERT INTO chunks ({_INSERT_COLUMNS}) VALUES ({','.join('?' * len(row))})", row)
                rowid = int(cur.lastrowid)
            else:
                rowid = prior[0]
                cur.execute(f"UPDATE chunks SET {_UPDATE_ASSIGNMENTS} WHERE rowid=?", (*row, rowid))
                cur.execute("DELETE FROM chunks_fts WHERE rowid = ?", (rowid,))
                delete_vector(cur, dims=prior[4].dims, rowid=rowid)  # the old text's vector
            cur.execute(
                "INSERT INTO chunks_fts (rowid, body, title) VALUES (?, ?, ?)",
                (rowid, segment_cjk(chunk.text), segment_cjk(doc.title or "")),
            )
            if vector is not None and want.dims is not None:
                put_vector(
                    cur, dims=want.dims, rowid=rowid, index_name=self.index_name, source=doc.source, vector=vector
                )
            written += 1
        # 2. ... and only then the stale ones: ids the document had and no longer has.
        keep = {c.chunk_id for c in write.chunks}
        stale = (set(existing) | set(write.stale_chunk_ids)) - keep
        deleted = self._delete_ids(cur, stale)
        return UpsertResult(doc.doc_id, ok=True, written=written, unchanged=unchanged, deleted=deleted)

    def _refresh_kept(
        self,
        cur: Any,
        rowid: int,
        chunk: Chunk,
        doc: DocumentRecord,
        stored: tuple[int, StoredVector],
        want: StoredVector,
        vector: npt.NDArray[np.float32] | None,
    ) -> None:
        """A kept chunk (same id, text and place): update only its sequence and its vector.

        Chunk ids follow content, so inserting a paragraph shifts the ``sequence`` of the chunks
        after it: a cheap UPDATE of ``seq``, no FTS rewrite. Its vector is stored when it has none
        (or one of another model) and the write brings one, and dropped when the write has none.
        """
        seq, had = stored
        if seq == chunk.sequence and had == want:
            return
        if had != want:
            delete_vector(cur, dims=had.dims, rowid=rowid)
            if vector is not None and want.dims is not None:
                put_vector(
                    cur, dims=want.dims, rowid=rowid, index_name=self.index_name, source=doc.source, vector=vector
                )
        cur.execute(
            "UPDATE chunks SET seq = ?, embedding_model = ?, embedding_dims = ? WHERE rowid = ?",
            (chunk.sequence, want.model, want.dims, rowid),
        )

    def _row(self, chunk: Chunk, doc: DocumentRecord, now: float) -> tuple[Any, ...]:
        return (
            chunk.chunk_id,
            self.index_name,
            doc.source,
            doc.doc_id,
            doc.item_key,
            chunk.sequence,
            chunk.kind,
            chunk.text,
            chunk.token_count,
            chunk.text_hash,
            json.dumps(chunk.heading_path, ensure_ascii=False),
            json.dumps([p.to_dict() for p in chunk.positions]),
            json.dumps({**doc.metadata, **chunk.metadata}, ensure_ascii=False, default=str),
            doc.title,
            doc.url,
            doc.media_type,
            doc.doc_version,
            doc.content_hash,
            doc.run_id,
            now,
        )

    def _delete_ids(self, cur: Any, chunk_ids: Iterable[str]) -> int:
        deleted = 0
        for cid in chunk_ids:
            row = cur.execute(
                "SELECT rowid, embedding_dims FROM chunks WHERE index_name = ? AND chunk_id = ?", (self.index_name, cid)
            ).fetchone()
            if row is None:
                continue
            cur.execute("DELETE FROM chunks_fts WHERE rowid = ?", (row[0],))
            delete_vector(cur, dims=row[1], rowid=row[0])
            cur.execute("DELETE FROM chunks WHERE rowid = ?", (row[0],))
            deleted += 1
        return deleted

    def delete_documents(self, source: str, doc_ids: Iterable[str]) -> int:
        cur = self._db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            total = 0
            for doc_id in doc_ids:
                ids = [
                    r[0]
                    for r in cur.execute(
                        "SELECT chunk_id FROM chunks WHERE index_name = ? AND source = ? AND doc_id = ?",
                        (self.index_name, source, doc_id),
                    )
                ]
                total += self._delete_ids(cur, ids)
                acl.delete_entries(cur, self.index_name, doc_id)
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        return total

    # ------------------------------------------------------------------------------- reads
    @contextmanager
    def _time_limited(self, deadline: SearchDeadline) -> Iterator[None]:
        """Run the statements of the block until ``deadline``: SQLite's progress handler
        (https://sqlite.org/c3ref/progress_handler.html) interrupts the statement once it has
        passed, which surfaces as "interrupted" and is turned into :class:`SearchTimeout`."""
        self._db.set_progress_handler(lambda: int(deadline.left() < 0), _PROGRESS_INSTRUCTIONS)
        try:
            yield
        except DB_ERRORS as exc:
            if "interrupt" in str(exc).lower() and deadline.left() < 0:
                raise deadline.timeout(self.backend_name) from None
            raise
        finally:
            self._db.set_progress_handler(None, 0)

    def _bm25(
        self, query: str, k: int, source: str | None, deadline: SearchDeadline, access: tuple[str, ...] | None = None
    ) -> list[SearchHit]:
        match = fts_query(query)
        if match is None:
            return []
        # CROSS JOIN keeps the FTS match as the outer loop: SQLite 3.51's planner (pysqlite3)
        # would otherwise walk an index_name index of chunks and run one FTS lookup per chunk
        # (measured: 55 s instead of 20 ms for a common term over 20,000 chunks)
        sql = (
            "SELECT c.*, bm25(chunks_fts, 1.0, 0.5) AS score FROM chunks_fts CROSS JOIN chunks c"
            " ON c.rowid = chunks_fts.rowid WHERE chunks_fts MATCH ? AND c.index_name = ?"
        )
        args: list[Any] = [match, self.index_name]
        if source:
            sql += " AND c.source = ?"
            args.append(source)
        if access is not None:  # a semi-join on the permitted documents, inside the ranking
            term, term_args = acl.permitted_doc_ids("c.doc_id", self.index_name, access)
            sql += f" AND {term}"
            args.extend(term_args)
        sql += " ORDER BY score LIMIT ?"
        args.append(k)
        with self._time_limited(deadline):
            cur = self._db.execute(sql, args)
            names = [d[0] for d in cur.description]
            values = cur.fetchall()
        # FTS5's bm25() is "lower is better"
        return [_hit(row, -float(row["score"])) for row in (dict(zip(names, v, strict=True)) for v in values)]

    def _nearest(
        self,
        query_vector: npt.NDArray[np.float32],
        k: int,
        source: str | None,
        deadline: SearchDeadline,
        access: tuple[str, ...] | None = None,
    ) -> list[SearchHit]:
        if not self._vectors_loaded:
            raise VectorsUnavailable("the sqlite-vec extension is not loaded: this index cannot search vectors")

        def nearest_of(n: int, only: tuple[str, list[Any]] | None) -> list[tuple[int, float]]:
            return knn(self._db, index_name=self.index_name, query_vector=query_vector, k=n, source=source, only=only)

        with self._time_limited(deadline):
            if access is None:
                nearest = nearest_of(k, None)
            else:  # k permitted hits whenever they exist: filtered inside the KNN, or widened and refilled
                nearest = acl.nearest_permitted(self._db, self.index_name, access, k, nearest_of)
            if not nearest:
                return []
            cur = self._db.execute(
                f"SELECT * FROM chunks WHERE rowid IN ({','.join('?' * len(nearest))})", [r for r, _ in nearest]
            )
            names = [d[0] for d in cur.description]
            values = cur.fetchall()
        rows = {row["rowid"]: row for row in (dict(zip(names, v, strict=True)) for v in values)}
        return [_hit(rows[rowid], similarity) for rowid, similarity in nearest if rowid in rows]

    def set_access(self, source: str, access: Mapping[str, Sequence[str]]) -> int:
        return acl.set_entries(self._db, self.index_name, source, access)

    def access_of(self, source: str, doc_ids: Iterable[str]) -> dict[str, tuple[str, ...]]:
        return acl.stored_entries(self._db, self.index_name, source, doc_ids)

    def vectors_for(self, model: str, text_hashes: Iterable[str]) -> dict[str, npt.NDArray[np.float32]]:
        if not self._vectors_loaded:
            return {}  # nothing readable: every chunk is a cache miss
        return stored_vectors(self._db, index_name=self.index_name, model=model, text_hashes=text_hashes)

    def replace_vectors(self, source: str, vectors: Mapping[str, VectorSet]) -> dict[str, str]:
        if not self._vectors_loaded:
            return dict.fromkeys(vectors, "the sqlite-vec extension is not loaded: vectors cannot be stored")
        return replace_vectors(self._db, index_name=self.index_name, source=source, vectors=vectors)

    def count(self, *, source: str | None = None, doc_id: str | None = None) -> int:
        sql, args = self._filter("SELECT count(*) FROM chunks", source, doc_id)
        return int(self._db.execute(sql, args).fetchone()[0])

    def chunk_ids(self, *, source: str | None = None, doc_id: str | None = None) -> set[str]:
        sql, args = self._filter("SELECT chunk_id FROM chunks", source, doc_id)
        return {r[0] for r in self._db.execute(sql, args)}

    def _filter(self, sql: str, source: str | None, doc_id: str | None) -> tuple[str, list[Any]]:
        sql += " WHERE index_name = ?"
        args: list[Any] = [self.index_name]
        if source:
            sql += " AND source = ?"
            args.append(source)
        if doc_id:
            sql += " AND doc_id = ?"
            args.append(doc_id)
        return sql, args

    def get_chunk(self, chunk_id: str) -> dict[str, Any] | None:
        cur = self._db.execute(
            "SELECT * FROM chunks WHERE index_name = ? AND chunk_id = ?", (self.index_name, chunk_id)
        )
        values = cur.fetchone()
        if values is None:
            return None
        row = dict(zip([d[0] for d in cur.description], values, strict=True))
        row.pop("rowid", None)
        for key in ("heading_path", "positions", "metadata"):
            row[key] = json.loads(row[key])
        row["positions"] = [Position.from_dict(p).to_dict() for p in row["positions"]]
        row["access"] = list(
            acl.stored_entries(self._db, self.index_name, row["source"], [row["doc_id"]])[row["doc_id"]]
        )
        return row

    def close(self) -> None:
        self._db.close()


def _hit(row: dict[str, Any], score: float) -> SearchHit:
    return SearchHit(
        chunk_id=row["chunk_id"],
        doc_id=row["doc_id"],
        source=row["source"],
        score=score,
        text=row["text"],
        title=row["title"],
        url=row["url"],
        heading_path=json.loads(row["heading_path"]),
        run_id=row["run_id"],
        doc_version=row["doc_version"],
        text_hash=row["text_hash"],
        metadata=json.loads(row["metadata"]),
        sequence=row["seq"],
        embedding_model=row["embedding_model"],
    )
