"""The embedded default index: SQLite with an FTS5 full-text table and BM25 ranking.

One database file may hold several named indexes (``index_name`` column). ``chunks`` holds
every chunk with its document fields; ``chunks_fts`` (FTS5, rowid = ``chunks.rowid``) holds the
searchable text. CJK characters are indexed one per token (FTS5's ``unicode61`` tokenizer would
otherwise treat a whole run of Chinese as one word); queries turn CJK runs into phrases, so
"知识库" matches the adjacent characters 知 识 库.

Concurrency: WAL mode and a busy timeout let several Airflow task processes write in turn.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Self

from include.config import IndexConfig
from include.contract import Chunk, Position
from include.failpoints import failpoint
from include.index.base import DocumentWrite, IndexBackend, SearchHit, UpsertResult
from include.settings import get_settings

__all__ = ["SqliteFtsIndex", "fts_query", "segment_cjk"]

_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\uff66-\uff9f]+")
_QUERY_TERM = re.compile(r"[\w\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+", re.UNICODE)

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
    UNIQUE (index_name, chunk_id)
);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks (index_name, doc_id);
CREATE INDEX IF NOT EXISTS chunks_source ON chunks (index_name, source);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(body, title, tokenize = 'unicode61 remove_diacritics 2');
"""

# What ``chunks.text_hash`` was called in index files made before the rename (``SqliteFtsIndex._migrate``).
_LEGACY_TEXT_HASH_COLUMN = "content_hash"


def segment_cjk(text: str) -> str:
    """Space out CJK characters so each is its own FTS token."""
    # one substitution per run of CJK characters, not per character (~2.7x faster upserts)
    return _CJK_RUN.sub(lambda m: " " + " ".join(m.group()) + " ", text)


def fts_query(query: str, *, any_term: bool = False) -> str | None:
    """Turn free text into a safe FTS5 MATCH expression (terms quoted; CJK runs as phrases)."""
    terms = []
    for term in _QUERY_TERM.findall(query):
        spaced = " ".join(segment_cjk(term).split())
        terms.append('"' + spaced.replace('"', '""') + '"')
    if not terms:
        return None
    return (" OR " if any_term else " AND ").join(terms)


class SqliteFtsIndex(IndexBackend):
    backend_name = "sqlite"

    def __init__(self, path: str | Path, index_name: str = "tributary") -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.index_name = index_name
        self._db = sqlite3.connect(str(self.path), timeout=60, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=60000")
        self._db.executescript(_SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Bring an index file made by an older release up to ``_SCHEMA``.

        The chunk's text hash column was ``content_hash``, the name that now means a document's
        hash only (``doc_content_hash``). RENAME COLUMN rewrites the table's definition in place:
        rows, indexes and rowids stay, and ``chunks_fts`` (a separate FTS5 table joined on rowid,
        no triggers) does not name the column. Inside BEGIN IMMEDIATE, so two processes opening
        the same old file rename it once.
        """
        if _LEGACY_TEXT_HASH_COLUMN not in self._chunk_columns():  # the usual open: no write lock taken
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            columns = self._chunk_columns()  # again under the lock: another process may have renamed it
            if _LEGACY_TEXT_HASH_COLUMN in columns and "text_hash" not in columns:
                self._db.execute(f"ALTER TABLE chunks RENAME COLUMN {_LEGACY_TEXT_HASH_COLUMN} TO text_hash")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def _chunk_columns(self) -> set[str]:
        return {row[1] for row in self._db.execute("PRAGMA table_info(chunks)")}

    @classmethod
    def from_config(cls, config: IndexConfig) -> Self:
        """``options.path`` or the settings' index file (``$TRIBUTARY_INDEX_PATH``)."""
        path = config.options.get("path") or get_settings().index_path
        return cls(path, index_name=config.name)

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
                except sqlite3.Error as exc:  # one bad document never fails the batch
                    cur.execute("ROLLBACK TO doc")
                    cur.execute("RELEASE doc")
                    results.append(UpsertResult(write.document.doc_id, ok=False, error=f"sqlite: {exc}"))
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        return results

    def _upsert_one(self, cur: sqlite3.Cursor, write: DocumentWrite) -> UpsertResult:
        doc = write.document
        existing = {
            row[0]: (row[1], row[2], row[3:])
            for row in cur.execute(
                "SELECT chunk_id, rowid, text_hash, url, title FROM chunks WHERE index_name = ? AND doc_id = ?",
                (self.index_name, doc.doc_id),
            )
        }
        now = time.time()
        written = unchanged = 0
        # 1. new and changed chunks first ...
        for chunk in write.chunks:
            prior = existing.get(chunk.chunk_id)
            # same text and same place: nothing to write (a moved URL or a new title is rewritten)
            if prior is not None and prior[1] == chunk.text_hash and prior[2] == (doc.url, doc.title):
                unchanged += 1
                continue
            row = self._row(chunk, doc, now)
            if prior is None:
                cur.execute(
                    "INSERT INTO chunks (chunk_id, index_name, source, doc_id, item_key, seq, kind, text,"
                    " token_count, text_hash, heading_path, positions, metadata, title, url, media_type,"
                    " doc_version, doc_content_hash, run_id, updated_at)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    row,
                )
                rowid = cur.lastrowid
            else:
                rowid = prior[0]
                cur.execute(
                    "UPDATE chunks SET chunk_id=?, index_name=?, source=?, doc_id=?, item_key=?, seq=?, kind=?,"
                    " text=?, token_count=?, text_hash=?, heading_path=?, positions=?, metadata=?, title=?,"
                    " url=?, media_type=?, doc_version=?, doc_content_hash=?, run_id=?, updated_at=?"
                    " WHERE rowid=?",
                    (*row, rowid),
                )
                cur.execute("DELETE FROM chunks_fts WHERE rowid = ?", (rowid,))
            cur.execute(
                "INSERT INTO chunks_fts (rowid, body, title) VALUES (?, ?, ?)",
                (rowid, segment_cjk(chunk.text), segment_cjk(doc.title or "")),
            )
            written += 1
        # 2. ... and only then the stale ones: ids the document had and no longer has.
        keep = {c.chunk_id for c in write.chunks}
        stale = (set(existing) | set(write.stale_chunk_ids)) - keep
        deleted = self._delete_ids(cur, stale)
        return UpsertResult(doc.doc_id, ok=True, written=written, unchanged=unchanged, deleted=deleted)

    def _row(self, chunk: Chunk, doc: Any, now: float) -> tuple[Any, ...]:
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

    def _delete_ids(self, cur: sqlite3.Cursor, chunk_ids: Iterable[str]) -> int:
        deleted = 0
        for cid in chunk_ids:
            row = cur.execute(
                "SELECT rowid FROM chunks WHERE index_name = ? AND chunk_id = ?", (self.index_name, cid)
            ).fetchone()
            if row is None:
                continue
            cur.execute("DELETE FROM chunks_fts WHERE rowid = ?", (row[0],))
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
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        return total

    # ------------------------------------------------------------------------------- reads
    def search(self, query: str, *, k: int = 10, source: str | None = None) -> list[SearchHit]:
        hits = self._search(fts_query(query), k, source)
        if not hits:  # nothing has every term: fall back to any term, still BM25-ranked
            hits = self._search(fts_query(query, any_term=True), k, source)
        return hits

    def _search(self, match: str | None, k: int, source: str | None) -> list[SearchHit]:
        if match is None:
            return []
        sql = (
            "SELECT c.*, bm25(chunks_fts, 1.0, 0.5) AS score FROM chunks_fts JOIN chunks c ON c.rowid = chunks_fts.rowid"
            " WHERE chunks_fts MATCH ? AND c.index_name = ?"
        )
        args: list[Any] = [match, self.index_name]
        if source:
            sql += " AND c.source = ?"
            args.append(source)
        sql += " ORDER BY score LIMIT ?"
        args.append(k)
        cur = self._db.execute(sql, args)
        names = [d[0] for d in cur.description]
        hits = []
        for values in cur.fetchall():
            row = dict(zip(names, values, strict=True))
            hits.append(
                SearchHit(
                    chunk_id=row["chunk_id"],
                    doc_id=row["doc_id"],
                    source=row["source"],
                    score=-float(row["score"]),  # FTS5's bm25() is "lower is better"
                    text=row["text"],
                    title=row["title"],
                    url=row["url"],
                    heading_path=json.loads(row["heading_path"]),
                    run_id=row["run_id"],
                    doc_version=row["doc_version"],
                    text_hash=row["text_hash"],
                    metadata=json.loads(row["metadata"]),
                )
            )
        return hits

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
        return row

    def close(self) -> None:
        self._db.close()
