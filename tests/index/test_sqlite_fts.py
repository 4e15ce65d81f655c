"""SQLite FTS5 index specifics (the backend-independent contract lives in tests/index)."""

from __future__ import annotations

from pathlib import Path

from include.contract import Chunk, content_hash
from include.index.base import DocumentRecord, DocumentWrite
from include.index.sqlite_fts import SqliteFtsIndex, fts_query


def _chunk(doc: str, seq: int, text: str) -> Chunk:
    return Chunk(f"{doc}-{seq:05d}", doc, seq, text, len(text.split()), content_hash(text))


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
    assert fts_query("a-b OR c") == '"a" AND "b" AND "OR" AND "c"'
    assert fts_query("   ") is None


def test_two_named_indexes_share_a_file(tmp_path: Path) -> None:
    a = SqliteFtsIndex(tmp_path / "i.db", index_name="a")
    b = SqliteFtsIndex(tmp_path / "i.db", index_name="b")
    a.upsert([_write("d1", ["shared words here"])])
    assert a.count() == 1 and b.count() == 0 and b.search("shared") == []
