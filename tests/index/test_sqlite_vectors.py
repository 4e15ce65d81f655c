"""SQLite vector specifics: the sqlite-vec tables in the index file, migrations of old files,
cheap updates of kept chunks, the cache lookup in batches, and a Python without the extension."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from include.contract import text_hash
from include.index import sqlite_vectors
from include.index.sqlite_fts import SqliteFtsIndex
from include.vectors import VectorSet
from tests.index.helpers import make_write, unit, with_vectors
from tests.index.test_sqlite_fts import _OLD_SCHEMA, _old_index_file

SRC = "web:demo"
MODEL = "test:model@1"


def _vec_rows(index: SqliteFtsIndex, dims: int) -> int:
    return int(index._db.execute(f"SELECT count(*) FROM chunks_vec_{dims}").fetchone()[0])


def test_vectors_live_in_the_same_file_one_table_per_size(tmp_path: Path) -> None:
    a = SqliteFtsIndex(tmp_path / "i.db", index_name="a")
    b = SqliteFtsIndex(tmp_path / "i.db", index_name="b")
    a.upsert([with_vectors(make_write(SRC, "x.html", ["one", "two"]), [[1, 0, 0], [0, 1, 0]])])
    b.upsert([with_vectors(make_write(SRC, "x.html", ["uno"]), [[1, 0, 0, 0, 0]])])
    tables = {r[0] for r in a._db.execute("SELECT name FROM sqlite_master WHERE sql LIKE '%vec0%'")}
    assert tables == {"chunks_vec_3", "chunks_vec_5"}
    assert (_vec_rows(a, 3), _vec_rows(a, 5)) == (2, 1)
    # each named index searches its own vectors only
    assert [h.text for h in a.search("", mode="vector", query_vector=unit([1, 0, 0]))] == ["one", "two"]
    assert [h.text for h in b.search("", mode="vector", query_vector=unit([1, 0, 0, 0, 0]))] == ["uno"]
    with pytest.raises(ValueError, match="holds 5-dimension vectors"):
        b.search("", mode="vector", query_vector=unit([1, 0, 0]))
    # and reads its own cache
    assert set(a.vectors_for(MODEL, [text_hash("uno"), text_hash("one")])) == {text_hash("one")}
    assert list(a.search("", k=0, mode="vector", query_vector=unit([1, 0, 0]))) == []


def test_stale_and_rewritten_chunks_leave_no_vector_rows_behind(tmp_path: Path) -> None:
    index = SqliteFtsIndex(tmp_path / "i.db")
    w = with_vectors(make_write(SRC, "a.html", ["one", "two", "three"]), [[1, 0], [0, 1], [1, 1]])
    index.upsert([w])
    assert _vec_rows(index, 2) == 3
    edited = with_vectors(make_write(SRC, "a.html", ["one", "TWO changed"]), [[1, 0], [1, -1]])
    [res] = index.upsert([edited])
    assert (res.written, res.unchanged, res.deleted) == (1, 1, 1)
    assert _vec_rows(index, 2) == 2
    got = index.vectors_for(MODEL, [text_hash("TWO changed"), text_hash("two")])
    assert list(got) == [text_hash("TWO changed")]
    np.testing.assert_array_equal(got[text_hash("TWO changed")], unit([1, -1]))
    assert index.delete_documents(SRC, [w.document.doc_id]) == 2
    assert _vec_rows(index, 2) == 0 and index.vectors_for(MODEL, [text_hash("one")]) == {}


def test_replaced_vectors_move_tables_and_a_document_with_a_missing_chunk_keeps_its_own(tmp_path: Path) -> None:
    index = SqliteFtsIndex(tmp_path / "i.db")
    a = with_vectors(make_write(SRC, "a.html", ["one", "two"]), [[1, 0], [0, 1]])
    b = with_vectors(make_write(SRC, "b.html", ["three"]), [[1, 1]])
    index.upsert([a, b])
    wider = VectorSet("test:model@2", 3, [c.chunk_id for c in a.chunks], np.stack([unit([1, 0, 0]), unit([0, 1, 0])]))
    ghost = VectorSet("test:model@2", 3, [b.chunks[0].chunk_id, "no-such-chunk"], np.stack([unit([1, 1, 0])] * 2))
    errors = index.replace_vectors(SRC, {a.document.doc_id: wider, b.document.doc_id: ghost})
    assert list(errors) == [b.document.doc_id] and "no-such-chunk is not in the index" in errors[b.document.doc_id]
    # a's vectors moved to the 3-dimension table; b kept its own, in full (rolled back)
    assert (_vec_rows(index, 2), _vec_rows(index, 3)) == (1, 2)
    assert index.get_chunk(b.chunks[0].chunk_id)["embedding_model"] == MODEL  # type: ignore[index]
    assert set(index.vectors_for("test:model@2", [text_hash("one"), text_hash("two")])) == {
        text_hash("one"),
        text_hash("two"),
    }
    assert index.chunk_ids(source=SRC) == {c.chunk_id for c in (*a.chunks, *b.chunks)}


def test_a_moved_chunk_costs_an_update_of_its_sequence_only(tmp_path: Path) -> None:
    index = SqliteFtsIndex(tmp_path / "i.db")
    texts = ["alpha text", "beta text"]
    index.upsert([with_vectors(make_write(SRC, "a.html", texts, content_ids=True), [[1, 0], [0, 1]])])
    before = {r[0]: r[1:] for r in index._db.execute("SELECT chunk_id, rowid, updated_at FROM chunks")}
    fts_before = index._db.execute("SELECT rowid, body FROM chunks_fts ORDER BY rowid").fetchall()
    w = with_vectors(make_write(SRC, "a.html", ["gamma first", *texts], content_ids=True), [[1, 1], [1, 0], [0, 1]])
    [res] = index.upsert([w])
    assert (res.written, res.unchanged, res.deleted) == (1, 2, 0)
    after = {r[0]: r[1:] for r in index._db.execute("SELECT chunk_id, rowid, updated_at FROM chunks")}
    for chunk in w.chunks[1:]:
        assert after[chunk.chunk_id] == before[chunk.chunk_id]  # same row, not rewritten
        assert index.get_chunk(chunk.chunk_id)["seq"] == chunk.sequence  # type: ignore[index]
    fts_after = index._db.execute("SELECT rowid, body FROM chunks_fts ORDER BY rowid").fetchall()
    assert fts_after[: len(fts_before)] == fts_before and len(fts_after) == 3
    assert _vec_rows(index, 2) == 3


def test_the_cache_lookup_reads_in_batches(tmp_path: Path) -> None:
    index = SqliteFtsIndex(tmp_path / "i.db")
    n = sqlite_vectors.MAX_VECTOR_BATCH * 2 + 7
    texts = [f"chunk number {i}" for i in range(n)]
    rng = np.random.default_rng(7)
    index.upsert([with_vectors(make_write(SRC, "big.html", texts), rng.normal(size=(n, 3)).tolist())])
    got = index.vectors_for(MODEL, [text_hash(t) for t in texts] + ["missing"])
    assert len(got) == n


def test_an_old_index_file_gains_the_vector_columns_and_takes_vectors(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_index_file(path)  # the schema before the text hash rename, without vector columns
    index = SqliteFtsIndex(path)
    columns = {r[1] for r in index._db.execute("PRAGMA table_info(chunks)")}
    assert {"text_hash", "embedding_model", "embedding_dims"} <= columns and "content_hash" not in columns
    assert index.get_chunk("d1-00000")["embedding_model"] is None  # type: ignore[index]
    assert index.search("", mode="vector", query_vector=unit([1, 0])) == []  # no vectors yet, no table
    [hit] = index.search("river", mode="hybrid", query_vector=unit([1, 0]))
    assert (hit.chunk_id, hit.ranks) == ("d1-00000", {"bm25": 1})
    index.close()
    again = SqliteFtsIndex(path)
    assert again.count() == 2
    again.close()


def test_a_file_from_the_release_before_vectors_migrates_in_place(tmp_path: Path) -> None:
    path = tmp_path / "prev.db"
    db = sqlite3.connect(str(path))
    db.executescript(_OLD_SCHEMA.replace("content_hash TEXT NOT NULL", "text_hash TEXT NOT NULL"))
    db.execute(
        "INSERT INTO chunks (chunk_id, index_name, source, doc_id, item_key, seq, kind, text, token_count,"
        " text_hash, heading_path, positions, metadata, updated_at)"
        " VALUES ('d-0', 'tributary', ?, 'd', 'k', 0, 'text', 'kept text', 2, ?, '[]', '[]', '{}', 0)",
        (SRC, text_hash("kept text")),
    )
    db.commit()
    db.close()
    index = SqliteFtsIndex(path)
    w = make_write(SRC, "k", ["kept text"])
    w.document.doc_id = "d"
    w.document.url = w.document.title = None
    w.chunks[0].chunk_id, w.chunks[0].doc_id = "d-0", "d"
    [res] = index.upsert([with_vectors(w, [[0, 1]])])
    assert (res.ok, res.written, res.unchanged) == (True, 0, 1)  # the vector is added to the kept row
    assert set(index.vectors_for(MODEL, [text_hash("kept text")])) == {text_hash("kept text")}
    index.close()


def test_without_the_extension_bm25_works_and_vector_writes_fail_per_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(conn: object) -> None:
        raise sqlite3.OperationalError("not authorized")

    monkeypatch.setattr("include.index.sqlite_vectors.sqlite_vec.load", refuse)
    index = SqliteFtsIndex(tmp_path / "i.db")
    vectored = with_vectors(make_write(SRC, "v.html", ["with vectors"]), [[1, 0]])
    plain = make_write(SRC, "p.html", ["plain words"])
    bad, good = index.upsert([vectored, plain])
    assert not bad.ok and "sqlite-vec" in (bad.error or "") and good.ok
    assert [h.text for h in index.search("plain")] == ["plain words"]
    assert index.vectors_for(MODEL, [text_hash("plain words")]) == {}
    with pytest.raises(sqlite_vectors.VectorsUnavailable):
        index.search("plain", mode="vector", query_vector=unit([1, 0]))


def test_an_empty_vector_set_for_an_empty_document(tmp_path: Path) -> None:
    index = SqliteFtsIndex(tmp_path / "i.db")
    w = make_write(SRC, "a.html", ["one"])
    index.upsert([w])
    empty = make_write(SRC, "a.html", [], stale=[w.chunks[0].chunk_id])
    empty.vectors = VectorSet(MODEL, 4)
    [res] = index.upsert([empty])
    assert (res.ok, res.deleted) == (True, 1)


def test_full_text_search_matches_first_then_joins_chunks(tmp_path: Path) -> None:
    # SQLite 3.51 (pysqlite3) otherwise plans the chunks table's index_name index as the outer
    # loop, one FTS lookup per chunk: 55 s instead of 20 ms over 20,000 chunks
    index = SqliteFtsIndex(tmp_path / "i.db")
    index.upsert([make_write(SRC, "a.html", ["common words here", "more common words"])])
    statements: list[str] = []
    index._db.set_trace_callback(statements.append)
    assert len(index.search("common", k=5)) == 2
    index._db.set_trace_callback(None)
    [bm25_sql] = [s for s in statements if "bm25(" in s]
    plan = [row[3] for row in index._db.execute("EXPLAIN QUERY PLAN " + bm25_sql)]
    assert plan[0].startswith("SCAN chunks_fts"), plan
