"""SQLite FTS5 index specifics (the backend-independent contract lives in tests/index)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from include.contract import Chunk, text_hash
from include.index.base import DocumentRecord, DocumentWrite
from include.index.sqlite_fts import SqliteFtsIndex, fts_query


def _chunk(doc: str, seq: int, text: str) -> Chunk:
    return Chunk(f"{doc}-{seq:05d}", doc, seq, text, len(text.split()), text_hash(text))


def _write(doc: str, texts: list[str], stale: list[str] | None = None) -> DocumentWrite:
    return DocumentWrite(
        DocumentRecord("web:t", doc, f"key-{doc}", title=f"T {doc}"),
        [_chunk(doc, i, t) for i, t in enumerate(texts)],
        stale or [],
    )


def test_failed_write_keeps_the_old_version(tmp_path: Path) -> None:
    index = SqliteFtsIndex(tmp_path / "i.db")
    index.upsert([_write("d1", ["the old river text", "second old chunk"])])
    broken = _write("d1", ["a brand new first chunk"])
    # text None breaks the NOT NULL constraint: the database refuses the document's second chunk
    broken.chunks.append(Chunk("d1-00001", "d1", 1, None, 1, "x"))  # type: ignore[arg-type]
    ok = _write("d2", ["another document entirely"])
    results = index.upsert([broken, ok])
    assert [r.ok for r in results] == [False, True]
    assert "sqlite" in (results[0].error or "")
    # the failed document still has exactly its old chunks; the other one landed
    assert {h.text for h in index.search("old", k=10)} == {"the old river text", "second old chunk"}
    assert index.chunk_ids(doc_id="d1") == {"d1-00000", "d1-00001"}
    assert index.count(doc_id="d2") == 1


def test_unchanged_chunks_are_not_rewritten_and_stale_ones_go(tmp_path: Path) -> None:
    index = SqliteFtsIndex(tmp_path / "i.db")
    first = index.upsert([_write("d1", ["alpha", "beta", "gamma"])])[0]
    assert (first.written, first.unchanged, first.deleted) == (3, 0, 0)
    second = index.upsert([_write("d1", ["alpha", "BETA changed"])])[0]
    assert (second.written, second.unchanged, second.deleted) == (1, 1, 1)
    assert index.chunk_ids(doc_id="d1") == {"d1-00000", "d1-00001"}
    assert index.search("gamma") == []
    assert index.delete_documents("web:t", ["d1"]) == 2
    assert index.count() == 0


def test_cjk_search_and_query_safety(tmp_path: Path) -> None:
    index = SqliteFtsIndex(tmp_path / "i.db")
    index.upsert([_write("zh", ["所有团队文档统一存放在语雀知识库中", "unrelated english text"])])
    hits = index.search("知识库")
    assert [h.chunk_id for h in hits] == ["zh-00000"]
    assert index.search('"; DROP TABLE chunks; --') == []  # quoted terms: no FTS syntax injection
    assert fts_query("a-b OR c") == '"b" OR "c"'  # "OR" is a word here (a stop word), not FTS syntax
    assert fts_query("   ") is None


def test_a_query_is_its_terms_ored_with_cjk_runs_as_bigrams() -> None:
    assert fts_query("How do I reset the password?") == '"how" OR "do" OR "i" OR "reset" OR "password"'
    assert fts_query("知识库") == '"知 识" OR "识 库"'  # overlapping bigrams, each a two-character phrase
    assert fts_query("库") == '"库"'  # a lone CJK character is itself
    assert fts_query("什么是Debian软件包？") == '"什 么" OR "么 是" OR "debian" OR "软 件" OR "件 包"'
    assert fts_query("to be or not to be") == '"to" OR "be" OR "or" OR "not"'  # only stop words: kept
    assert fts_query("Sync sync SYNC os_path") == '"sync" OR "os_path"'  # each term once; an identifier whole
    assert fts_query("_ __ ？") is None


def test_bm25_ranks_chunks_that_hold_some_of_the_terms(tmp_path: Path) -> None:
    index = SqliteFtsIndex(tmp_path / "i.db")
    index.upsert([_write("en", ["open settings to reset the password", "password rules", "trains run late"])])
    index.upsert([_write("zh", ["所有团队文档统一存放在语雀知识库中", "知识就是力量"])])
    # an AND of every word matched nothing here; any term matches, and BM25 ranks by how many and how rare
    assert [h.chunk_id for h in index.search("How do I reset my password?")] == ["en-00000", "en-00001"]
    # "知识库在哪里": the phrase of all six characters is in no chunk; its bigrams 知识 and 识库 are
    assert [h.chunk_id for h in index.search("知识库在哪里")] == ["zh-00000", "zh-00001"]


def test_two_named_indexes_share_a_file(tmp_path: Path) -> None:
    a = SqliteFtsIndex(tmp_path / "i.db", index_name="a")
    b = SqliteFtsIndex(tmp_path / "i.db", index_name="b")
    a.upsert([_write("d1", ["shared words here"])])
    assert a.count() == 1 and b.count() == 0 and b.search("shared") == []


# The chunks table as index files made before the chunk's hash column was renamed have it
# (copied from the old _SCHEMA, not derived from the new one, so the test keeps meaning it).
_OLD_SCHEMA = """
CREATE TABLE chunks (
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
    content_hash TEXT NOT NULL,
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
CREATE INDEX chunks_doc ON chunks (index_name, doc_id);
CREATE INDEX chunks_source ON chunks (index_name, source);
CREATE VIRTUAL TABLE chunks_fts USING fts5(body, title, tokenize = 'unicode61 remove_diacritics 2');
"""


def _old_index_file(path: Path) -> None:
    """An index file as the old schema wrote it: two chunks of document d1, searchable."""
    db = sqlite3.connect(str(path))
    db.executescript(_OLD_SCHEMA)
    for seq, text in enumerate(["the old river text", "second old chunk"]):
        db.execute(
            "INSERT INTO chunks (chunk_id, index_name, source, doc_id, item_key, seq, kind, text, token_count,"
            " content_hash, heading_path, positions, metadata, title, url, doc_content_hash, updated_at)"
            " VALUES (?, 'tributary', 'web:t', 'd1', 'key-d1', ?, 'text', ?, ?, ?, '[]', '[]', '{}', 'T d1',"
            " NULL, 'doc-hash', 0)",
            (f"d1-{seq:05d}", seq, text, len(text.split()), text_hash(text)),
        )
        db.execute("INSERT INTO chunks_fts (rowid, body, title) VALUES (last_insert_rowid(), ?, 'T d1')", (text,))
    db.commit()
    db.close()


def test_an_index_file_from_the_old_schema_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_index_file(path)
    index = SqliteFtsIndex(path)
    columns = {r[1] for r in index._db.execute("PRAGMA table_info(chunks)")}
    assert "text_hash" in columns and "content_hash" not in columns and "doc_content_hash" in columns
    # the rows kept their values under the new name, and the FTS table still finds them by rowid
    got = index.get_chunk("d1-00000")
    assert got is not None and got["text_hash"] == text_hash("the old river text")
    assert got["doc_content_hash"] == "doc-hash"
    [hit] = index.search("river")
    assert (hit.chunk_id, hit.text_hash) == ("d1-00000", text_hash("the old river text"))
    # the upsert compares against the migrated hashes: the kept chunk is not rewritten
    result = index.upsert([_write("d1", ["the old river text", "a new second chunk"])])[0]
    assert (result.written, result.unchanged, result.deleted) == (1, 1, 0)
    assert {h.text for h in index.search("second", k=10)} == {"a new second chunk"}
    index.close()
    # opening a migrated file again changes nothing
    again = SqliteFtsIndex(path)
    assert again.count(doc_id="d1") == 2 and again.get_chunk("d1-00001") is not None
    again.close()
