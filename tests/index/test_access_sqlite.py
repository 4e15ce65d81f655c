"""Access-filtered search in the SQLite index: entries stored with documents (``doc_access``),
joined inside the BM25 and KNN queries, replaced by ``set_access`` without touching a chunk."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from include.acl import PUBLIC
from include.index.base import DocumentWrite
from include.index.sqlite_fts import SqliteFtsIndex
from tests.index import access_cases as cases
from tests.index.helpers import make_write


@pytest.fixture
def corpus(tmp_path: Path) -> Iterator[tuple[SqliteFtsIndex, list[DocumentWrite]]]:
    idx = SqliteFtsIndex(tmp_path / "index.db", index_name="acl")
    writes = cases.build_corpus(idx)
    yield idx, writes
    idx.close()


def _stored_chunks(idx: SqliteFtsIndex) -> tuple[list[Any], ...]:
    """Every chunk row, FTS row and vector of the index (what an ACL change must not write)."""
    db = idx._db
    return (
        db.execute("SELECT * FROM chunks ORDER BY rowid").fetchall(),
        db.execute("SELECT rowid, body, title FROM chunks_fts ORDER BY rowid").fetchall(),
        db.execute("SELECT chunk_rowid, embedding FROM chunks_vec_8 ORDER BY chunk_rowid").fetchall(),
    )


def test_each_mode_returns_only_the_permitted_documents(corpus: tuple[SqliteFtsIndex, list[DocumentWrite]]) -> None:
    cases.check_only_permitted_documents_in_every_mode(*corpus)


def test_vector_and_hybrid_return_k_permitted_hits_when_the_nearest_are_forbidden(
    corpus: tuple[SqliteFtsIndex, list[DocumentWrite]],
) -> None:
    cases.check_k_permitted_hits_when_the_nearest_are_forbidden(*corpus)


def test_documents_without_entries_are_seen_by_an_unrestricted_search_only(
    corpus: tuple[SqliteFtsIndex, list[DocumentWrite]],
) -> None:
    cases.check_unknown_access_is_unrestricted_only(*corpus)


def test_set_access_changes_results_and_writes_only_acl_rows(
    corpus: tuple[SqliteFtsIndex, list[DocumentWrite]],
) -> None:
    idx, writes = corpus
    cases.check_set_access_changes_results(idx, writes, lambda: _stored_chunks(idx))


def test_set_access_is_one_transaction(corpus: tuple[SqliteFtsIndex, list[DocumentWrite]]) -> None:
    idx, writes = corpus
    ids = [w.document.doc_id for w in writes[:2]]
    with pytest.raises(ValueError, match="non-empty string"):
        idx.set_access(cases.SRC, {ids[0]: [PUBLIC], ids[1]: [""]})  # the bad entry refuses the whole call
    assert idx.access_of(cases.SRC, ids) == {ids[0]: (cases.BOB_ENTRY,), ids[1]: (cases.BOB_ENTRY,)}


def test_a_reupsert_with_other_entries_updates_them_though_no_chunk_changed(
    corpus: tuple[SqliteFtsIndex, list[DocumentWrite]],
) -> None:
    cases.check_entries_follow_a_reupsert_of_unchanged_chunks(*corpus)


def test_access_of_and_get_chunk_report_the_entries(corpus: tuple[SqliteFtsIndex, list[DocumentWrite]]) -> None:
    cases.check_access_of_and_get_chunk(*corpus)


def test_an_empty_access_matches_nothing(corpus: tuple[SqliteFtsIndex, list[DocumentWrite]]) -> None:
    cases.check_empty_access_matches_nothing(corpus[0])


def test_an_unrestricted_search_runs_the_unfiltered_statements(
    corpus: tuple[SqliteFtsIndex, list[DocumentWrite]],
) -> None:
    idx, _ = corpus
    statements: list[str] = []
    idx._db.set_trace_callback(statements.append)
    try:
        for mode in ("bm25", "vector", "hybrid"):
            assert len(cases.search_docs(idx, mode, None, k=10)) == 10
        assert not [s for s in statements if "doc_access" in s]  # no join on the access path
        statements.clear()
        cases.search_docs(idx, "hybrid", cases.ALICE, k=10)
        # both rankings filtered inside their statement (Alice may read 10%: no widening)
        assert [s for s in statements if "chunks_fts MATCH" in s and "doc_access" in s]
        assert [s for s in statements if "embedding MATCH" in s and "doc_access" in s]
    finally:
        idx._db.set_trace_callback(None)


def _knn_statements(idx: SqliteFtsIndex, run: Callable[[], object]) -> list[str]:
    statements: list[str] = []
    idx._db.set_trace_callback(statements.append)
    try:
        run()
    finally:
        idx._db.set_trace_callback(None)
    return [s for s in statements if "embedding MATCH" in s]


def test_a_widened_knn_is_refilled_by_a_filtered_one_when_its_nearest_are_forbidden(
    corpus: tuple[SqliteFtsIndex, list[DocumentWrite]],
) -> None:
    idx, writes = corpus
    # Alice now reads 15 of the 45 documents with entries (a third: KNN widens), the furthest ones
    idx.set_access(cases.SRC, {writes[i].document.doc_id: [cases.ENG] for i in range(30, 40)})
    got: list[str] = []
    knn = _knn_statements(idx, lambda: got.extend(cases.search_docs(idx, "vector", cases.ALICE, k=5)))
    assert got == [writes[i].document.doc_id for i in range(30, 35)]  # the 5 nearest she may read
    assert len(knn) == 2 and "doc_access" not in knn[0] and "doc_access" in knn[1]  # widened, then filtered
    # Bob reads most documents, the nearest among them: the widened KNN alone answers
    knn = _knn_statements(idx, lambda: got.extend(cases.search_docs(idx, "vector", cases.BOB, k=5)))
    assert got[5:] == [writes[i].document.doc_id for i in range(5)]
    assert len(knn) == 1 and "doc_access" not in knn[0]


def test_deleting_a_document_removes_its_entries(corpus: tuple[SqliteFtsIndex, list[DocumentWrite]]) -> None:
    idx, writes = corpus
    doc_id = writes[45].document.doc_id
    assert idx.delete_documents(cases.SRC, [doc_id]) == 1
    rows = idx._db.execute("SELECT count(*) FROM doc_access WHERE doc_id = ?", (doc_id,)).fetchone()
    assert rows[0] == 0 and idx.access_of(cases.SRC, [doc_id]) == {}


def test_a_document_written_without_access_is_public(tmp_path: Path) -> None:
    idx = SqliteFtsIndex(tmp_path / "index.db")
    try:
        w = make_write(cases.SRC, "plain.html", ["an open report"])
        idx.upsert([w])
        assert idx.access_of(cases.SRC, [w.document.doc_id]) == {w.document.doc_id: (PUBLIC,)}
        assert [h.doc_id for h in idx.search("report", access=cases.CAROL)] == [w.document.doc_id]
    finally:
        idx.close()
