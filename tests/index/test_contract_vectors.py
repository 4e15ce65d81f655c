"""The IndexBackend contract for vectors and search modes, run against every backend (SQLite with
sqlite-vec always, Elasticsearch when ELASTICSEARCH_URL is set; see conftest)."""

from __future__ import annotations

import numpy as np
import pytest

from include.index.base import IndexBackend, SearchMode
from include.index.fusion import fuse_hybrid, hybrid_depth
from include.vectors import VectorSet
from tests.index.helpers import make_write, unit, with_vectors

SRC = "web:demo"
MODEL = "test:model@1"
E0, E1, E2, E3 = ([1.0 if i == j else 0.0 for j in range(4)] for i in range(4))
Q = [0.2, 1.0, 0.5, 0.0]
TEXTS = [
    "Airflow schedules the incremental sync of every knowledge source.",
    "Chunks whose content hash did not change are never rewritten.",
    "Incremental sync, incremental sync.",
]
QUERY = unit(Q)  # nearest: E1, then E2, then E0 and E3 (orthogonal)


def _indexed(backend: IndexBackend) -> list[str]:
    w = with_vectors(make_write(SRC, "a.html", TEXTS), [E3, E1, E2])
    [res] = backend.upsert([w])
    assert res.ok, res.error
    return [c.chunk_id for c in w.chunks]


def test_vectors_round_trip_through_the_cache_lookup_by_model(backend: IndexBackend) -> None:
    rows = [[0.1, -0.2, 0.3, 0.4], [1e-5, 2.0, -3.0, 0.25], [0.7, 0.7, 0.0, -0.1]]
    w = with_vectors(make_write(SRC, "a.html", TEXTS), rows)
    assert w.vectors is not None
    [res] = backend.upsert([w])
    assert (res.ok, res.written) == (True, 3)
    hashes = [c.text_hash for c in w.chunks]
    got = backend.vectors_for(MODEL, [*hashes, "no-such-hash"])
    assert set(got) == set(hashes)
    for i, h in enumerate(hashes):
        assert got[h].dtype == np.float32
        np.testing.assert_array_equal(got[h], w.vectors.matrix[i])  # float32 in, the same float32 out
    assert backend.vectors_for("another:model@1", hashes) == {}  # another model: every one a miss
    assert backend.vectors_for(MODEL, []) == {}
    stored = backend.get_chunk(w.chunks[0].chunk_id)
    assert stored is not None and stored["embedding_model"] == MODEL


def test_vector_search_ranks_by_cosine_similarity(backend: IndexBackend) -> None:
    ids = _indexed(backend)
    hits = backend.search("", k=3, mode="vector", query_vector=QUERY)
    assert [h.chunk_id for h in hits] == [ids[1], ids[2], ids[0]]
    want = [float(QUERY @ unit(v)) for v in (E1, E2, E3)]
    assert [h.score for h in hits] == pytest.approx(want, abs=2e-3)
    top = hits[0]
    assert (top.text, top.sequence, top.embedding_model, top.source) == (TEXTS[1], 1, MODEL, SRC)
    assert top.run_id == "run-1" and top.url == "http://127.0.0.1/a.html"
    assert len(backend.search("", k=1, mode="vector", query_vector=QUERY)) == 1


def test_vector_search_filters_by_source_and_still_returns_k_hits(backend: IndexBackend) -> None:
    ids = _indexed(backend)
    other = with_vectors(make_write("web:other", "o.html", ["closest of all", "close too"]), [Q, Q])
    backend.upsert([other])
    everywhere = backend.search("", k=2, mode="vector", query_vector=QUERY)
    assert {h.source for h in everywhere} == {"web:other"}
    mine = backend.search("", k=2, mode="vector", query_vector=QUERY, source=SRC)
    assert [h.chunk_id for h in mine] == [ids[1], ids[2]]


def test_hybrid_fuses_bm25_and_vector_rankings_by_rrf(backend: IndexBackend) -> None:
    ids = _indexed(backend)
    bm25 = backend.search("incremental sync", k=hybrid_depth(3))
    vector = backend.search("incremental sync", k=hybrid_depth(3), mode="vector", query_vector=QUERY)
    assert [h.chunk_id for h in bm25] == [ids[2], ids[0]]  # the repeated terms win
    assert [h.chunk_id for h in vector] == [ids[1], ids[2], ids[0]]
    hits = backend.search("incremental sync", k=3, mode="hybrid", query_vector=QUERY)
    # k 10, the vector ranking weighs 2 (HYBRID_RANK_CONSTANT, DEFAULT_VECTOR_WEIGHT): ids[2]: 1/11 + 2/12;
    # ids[0]: 1/12 + 2/13; ids[1]: 2/11 (in the vector ranking only)
    assert [h.chunk_id for h in hits] == [ids[2], ids[0], ids[1]]
    assert [h.ranks for h in hits] == [{"bm25": 1, "vector": 2}, {"bm25": 2, "vector": 3}, {"vector": 1}]
    assert hits[0].score == pytest.approx(1 / 11 + 2 / 12)
    assert [h.chunk_id for h in hits] == [h.chunk_id for h in fuse_hybrid(bm25, vector, 3)]
    assert hits[0].text == TEXTS[2] and hits[0].embedding_model == MODEL
    assert len(backend.search("incremental sync", k=1, mode="hybrid", query_vector=QUERY)) == 1


def test_an_index_without_vectors_gives_an_empty_vector_ranking(backend: IndexBackend) -> None:
    backend.upsert([make_write(SRC, "a.html", TEXTS)])
    assert backend.search("", mode="vector", query_vector=QUERY) == []
    bm25 = backend.search("incremental sync", k=5)
    hybrid = backend.search("incremental sync", k=5, mode="hybrid", query_vector=QUERY)
    assert [h.chunk_id for h in hybrid] == [h.chunk_id for h in bm25]
    assert all(set(h.ranks) == {"bm25"} for h in hybrid)
    assert backend.get_chunk(bm25[0].chunk_id)["embedding_model"] is None  # type: ignore[index]


def test_a_query_vector_of_the_wrong_size_is_refused_clearly(backend: IndexBackend) -> None:
    _indexed(backend)
    modes: tuple[SearchMode, ...] = ("vector", "hybrid")
    for mode in modes:
        with pytest.raises(ValueError, match="3 dimensions"):
            backend.search("sync", mode=mode, query_vector=unit([1.0, 0.0, 0.0]))
        with pytest.raises(ValueError, match="query_vector"):
            backend.search("sync", mode=mode)
    with pytest.raises(ValueError, match="unknown search mode"):
        backend.search("sync", mode="semantic")  # type: ignore[arg-type]


def test_a_stale_chunks_vector_goes_with_it(backend: IndexBackend) -> None:
    w1 = with_vectors(make_write(SRC, "a.html", TEXTS), [E3, E1, E2])
    backend.upsert([w1])
    stale = [c.chunk_id for c in w1.chunks[1:]]
    [res] = backend.upsert([with_vectors(make_write(SRC, "a.html", TEXTS[:1], stale=stale), [E3])])
    assert (res.ok, res.unchanged, res.deleted) == (True, 1, 2)
    assert backend.vectors_for(MODEL, [c.text_hash for c in w1.chunks]).keys() == {w1.chunks[0].text_hash}
    assert [h.chunk_id for h in backend.search("", k=5, mode="vector", query_vector=QUERY)] == [w1.chunks[0].chunk_id]


def test_a_chunk_that_only_moved_gets_its_new_sequence_without_a_rewrite(backend: IndexBackend) -> None:
    first = with_vectors(make_write(SRC, "a.html", TEXTS, content_ids=True), [E3, E1, E2])
    backend.upsert([first])
    # a paragraph inserted at the top: the later chunks keep their ids and shift by one
    edited = ["A new opening paragraph about vectors.", *TEXTS]
    second = with_vectors(make_write(SRC, "a.html", edited, run_id="run-2", content_ids=True), [E0, E3, E1, E2])
    [res] = backend.upsert([second])
    assert (res.ok, res.written, res.unchanged, res.deleted) == (True, 1, 3, 0)
    for seq, chunk in enumerate(second.chunks):
        got = backend.get_chunk(chunk.chunk_id)
        assert got is not None and got["seq"] == seq
        assert got["run_id"] == ("run-2" if seq == 0 else "run-1")  # the moved ones were not rewritten
    [hit] = backend.search("", k=1, mode="vector", query_vector=QUERY)
    assert (hit.chunk_id, hit.sequence) == (first.chunks[1].chunk_id, 2)
    assert backend.search("never rewritten")[0].sequence == 2


def test_a_kept_chunk_gains_loses_or_changes_its_vector_without_a_rewrite(backend: IndexBackend) -> None:
    plain = make_write(SRC, "a.html", TEXTS)
    backend.upsert([plain])
    hashes = [c.text_hash for c in plain.chunks]
    [res] = backend.upsert([with_vectors(make_write(SRC, "a.html", TEXTS, run_id="run-2"), [E3, E1, E2])])
    assert (res.ok, res.written, res.unchanged) == (True, 0, 3)
    assert set(backend.vectors_for(MODEL, hashes)) == set(hashes)
    assert backend.search("", k=1, mode="vector", query_vector=QUERY)[0].chunk_id == plain.chunks[1].chunk_id
    assert backend.get_chunk(plain.chunks[1].chunk_id)["run_id"] == "run-1"  # type: ignore[index]
    # another model: its vectors replace the old ones
    other = with_vectors(make_write(SRC, "a.html", TEXTS), [E1, E3, E2], model="other:model@2")
    [res] = backend.upsert([other])
    assert (res.ok, res.written, res.unchanged) == (True, 0, 3)
    assert backend.vectors_for(MODEL, hashes) == {}
    assert set(backend.vectors_for("other:model@2", hashes)) == set(hashes)
    assert backend.search("", k=1, mode="vector", query_vector=QUERY)[0].chunk_id == plain.chunks[0].chunk_id
    # a BM25-only write again: the chunks are left without vectors
    [res] = backend.upsert([make_write(SRC, "a.html", TEXTS)])
    assert (res.ok, res.written, res.unchanged) == (True, 0, 3)
    assert backend.vectors_for("other:model@2", hashes) == {}
    assert backend.search("", mode="vector", query_vector=QUERY) == []
    assert backend.get_chunk(plain.chunks[0].chunk_id)["embedding_model"] is None  # type: ignore[index]


def test_a_document_whose_vectors_are_bad_fails_alone(backend: IndexBackend) -> None:
    old = with_vectors(make_write(SRC, "a.html", TEXTS[:1]), [E1])
    backend.upsert([old])
    nan = with_vectors(make_write(SRC, "a.html", ["a new version that never lands"]), [E2])
    assert nan.vectors is not None
    nan.vectors.matrix[0, 1] = np.nan
    short = with_vectors(make_write(SRC, "b.html", ["two chunks", "but one vector"]), [E1, E2])
    assert short.vectors is not None
    short.vectors.chunk_ids = short.vectors.chunk_ids[:1]
    short.vectors.matrix = short.vectors.matrix[:1]
    good = with_vectors(make_write(SRC, "c.html", ["this document lands"]), [E0])
    results = backend.upsert([nan, short, good])
    assert [r.ok for r in results] == [False, False, True]
    assert "NaN" in (results[0].error or "") and "no vector" in (results[1].error or "")
    assert backend.chunk_ids(doc_id=old.document.doc_id) == {old.chunks[0].chunk_id}
    assert backend.get_chunk(old.chunks[0].chunk_id)["text"] == TEXTS[0]  # type: ignore[index]
    assert backend.count(doc_id=short.document.doc_id) == 0
    assert backend.vectors_for(MODEL, [good.chunks[0].text_hash]).keys() == {good.chunks[0].text_hash}


def test_replace_vectors_gives_the_stored_chunks_new_vectors_in_place(backend: IndexBackend) -> None:
    """A re-embedding: the same chunk ids and texts, the vectors of another model."""
    w = with_vectors(make_write(SRC, "a.html", TEXTS), [E3, E1, E2])
    backend.upsert([w])
    ids = [c.chunk_id for c in w.chunks]
    matrix = np.stack([unit(E1), unit(E3), unit(E2)])
    assert backend.replace_vectors(SRC, {w.document.doc_id: VectorSet("other:model@2", 4, ids, matrix)}) == {}
    assert backend.chunk_ids(source=SRC) == set(ids)
    assert {backend.get_chunk(c)["embedding_model"] for c in ids} == {"other:model@2"}  # type: ignore[index]
    assert backend.vectors_for(MODEL, [c.text_hash for c in w.chunks]) == {}
    assert set(backend.vectors_for("other:model@2", [c.text_hash for c in w.chunks])) == {c.text_hash for c in w.chunks}
    hits = backend.search("", k=1, mode="vector", query_vector=QUERY)
    assert hits[0].chunk_id == ids[0] and hits[0].text == TEXTS[0]  # chunk 0 now holds E1
