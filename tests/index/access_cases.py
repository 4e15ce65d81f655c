"""Access-filtered search cases shared by the SQLite and Elasticsearch access tests.

The corpus: 50 one-chunk documents, all matching the query ``report``. Documents 0-39 are
Bob's alone, and 0-19 hold the vectors nearest the query; 40-44 have no entries (permissions
unknown: an unrestricted search only); 45-49 belong to the ``eng`` group, with vectors far from
the query. Alice (in ``eng``) may read 10% of the corpus, none of it among the nearest vectors.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from include.acl import PUBLIC
from include.index.base import DocumentWrite, IndexBackend, SearchMode
from tests.index.helpers import make_write, unit, with_vectors

__all__ = [
    "ALICE",
    "BOB",
    "BOB_ENTRY",
    "CAROL",
    "ENG",
    "QUERY",
    "SRC",
    "build_corpus",
    "check_access_of_and_get_chunk",
    "check_empty_access_matches_nothing",
    "check_entries_follow_a_reupsert_of_unchanged_chunks",
    "check_k_permitted_hits_when_the_nearest_are_forbidden",
    "check_only_permitted_documents_in_every_mode",
    "check_set_access_changes_results",
    "check_unknown_access_is_unrestricted_only",
    "corpus_write",
    "doc_ids",
    "search_docs",
]

SRC = "web:acl"
ENG = "group:static:eng"
BOB_ENTRY = "user:email:bob@example.com"
ALICE = (PUBLIC, "user:email:alice@example.com", ENG)
BOB = (PUBLIC, BOB_ENTRY)
CAROL = (PUBLIC, "user:email:carol@example.com")
N_DOCS = 50
DIMS = 8
QUERY = unit([1.0, 0, 0, 0, 0, 0, 0, 0])
MODES: tuple[SearchMode, ...] = ("bm25", "vector", "hybrid")


def _entries(i: int) -> tuple[str, ...]:
    if i < 40:
        return (BOB_ENTRY,)
    if i < 45:
        return ()
    return (ENG,)


def _vector(i: int) -> list[float]:
    # 0-19 nearest the query (in that order), the rest further, 45-49 furthest
    lean = 0.01 * (i + 1) if i < 20 else 2.0 + 0.1 * i
    row = [1.0, lean, 0, 0, 0, 0, 0, 0]
    row[2 + i % 6] += 0.001 * i  # no two alike
    return row


def corpus_write(i: int, entries: tuple[str, ...] | None = None) -> DocumentWrite:
    w = with_vectors(make_write(SRC, f"doc-{i:02d}.html", [f"quarterly report number {i} w{i}"]), [_vector(i)])
    w.document.access = _entries(i) if entries is None else entries
    return w


def build_corpus(idx: IndexBackend) -> list[DocumentWrite]:
    writes = [corpus_write(i) for i in range(N_DOCS)]
    assert all(r.ok for r in idx.upsert(writes))
    return writes


def doc_ids(writes: list[DocumentWrite], numbers: range | list[int]) -> set[str]:
    return {writes[i].document.doc_id for i in numbers}


def search_docs(idx: IndexBackend, mode: SearchMode, access: tuple[str, ...] | None, k: int = 100) -> list[str]:
    vector: npt.NDArray[np.float32] | None = None if mode == "bm25" else QUERY
    return [h.doc_id for h in idx.search("report", k=k, mode=mode, query_vector=vector, access=access)]


def check_only_permitted_documents_in_every_mode(idx: IndexBackend, writes: list[DocumentWrite]) -> None:
    for mode in MODES:
        assert set(search_docs(idx, mode, ALICE)) == doc_ids(writes, range(45, 50)), mode
        assert set(search_docs(idx, mode, BOB)) == doc_ids(writes, range(40)), mode
        assert search_docs(idx, mode, CAROL) == [], mode
        assert set(search_docs(idx, mode, None)) == doc_ids(writes, range(N_DOCS)), mode


def check_k_permitted_hits_when_the_nearest_are_forbidden(idx: IndexBackend, writes: list[DocumentWrite]) -> None:
    nearest = search_docs(idx, "vector", None, k=5)
    assert set(nearest) <= doc_ids(writes, range(20))  # unrestricted: Bob's documents are nearest
    for mode in ("vector", "hybrid"):
        assert sorted(search_docs(idx, mode, ALICE, k=5)) == sorted(doc_ids(writes, range(45, 50))), mode
    assert len(search_docs(idx, "bm25", ALICE, k=5)) == 5


def check_unknown_access_is_unrestricted_only(idx: IndexBackend, writes: list[DocumentWrite]) -> None:
    unknown = doc_ids(writes, range(40, 45))
    everyone = (*ALICE, *BOB, *CAROL)  # every entry any document of the corpus holds
    for mode in MODES:
        assert unknown <= set(search_docs(idx, mode, None)), mode
        assert not unknown & set(search_docs(idx, mode, everyone)), mode


def check_set_access_changes_results(
    idx: IndexBackend, writes: list[DocumentWrite], snapshot: Callable[[], object]
) -> None:
    """Alice loses ``eng`` documents 45-46, gains Bob's 0-1 and the public 2; no chunk rewritten."""
    before = snapshot()
    changes = {
        writes[0].document.doc_id: ["user:email:alice@example.com"],
        writes[1].document.doc_id: [ENG, BOB_ENTRY],
        writes[2].document.doc_id: [PUBLIC],
        writes[45].document.doc_id: [BOB_ENTRY],
        writes[46].document.doc_id: [],
        writes[47].document.doc_id: [ENG],  # as it was: not counted
        "no-such-document": [PUBLIC],  # not in the index: skipped
    }
    assert idx.set_access(SRC, changes) == 5
    assert snapshot() == before
    allowed = doc_ids(writes, [0, 1, 2, 47, 48, 49])
    for mode in MODES:
        assert set(search_docs(idx, mode, ALICE)) == allowed, mode
        assert set(search_docs(idx, mode, CAROL)) == doc_ids(writes, [2]), mode
        assert writes[46].document.doc_id not in search_docs(idx, mode, (*ALICE, *BOB)), mode
    # a vector search as Alice: k=5 of her 6 documents, still none forbidden
    assert set(search_docs(idx, "vector", ALICE, k=5)) < allowed
    assert idx.set_access(SRC, changes) == 0  # nothing left to change


def check_entries_follow_a_reupsert_of_unchanged_chunks(idx: IndexBackend, writes: list[DocumentWrite]) -> None:
    again = corpus_write(45, entries=(PUBLIC,))
    [res] = idx.upsert([again])
    assert (res.ok, res.written, res.unchanged) == (True, 0, 1)
    assert idx.access_of(SRC, [again.document.doc_id]) == {again.document.doc_id: (PUBLIC,)}
    assert search_docs(idx, "vector", CAROL) == [again.document.doc_id]
    [res] = idx.upsert([corpus_write(45)])  # and back
    assert search_docs(idx, "bm25", CAROL) == []


def check_access_of_and_get_chunk(idx: IndexBackend, writes: list[DocumentWrite]) -> None:
    ids = [writes[i].document.doc_id for i in (0, 40, 45)]
    assert idx.access_of(SRC, [*ids, "no-such-document"]) == {ids[0]: (BOB_ENTRY,), ids[1]: (), ids[2]: (ENG,)}
    assert idx.access_of("web:other", ids) == {}
    chunk = idx.get_chunk(writes[45].chunks[0].chunk_id)
    assert chunk is not None and chunk["access"] == [ENG]


def check_empty_access_matches_nothing(idx: IndexBackend) -> None:
    for mode in MODES:
        assert search_docs(idx, mode, ()) == [], mode
