"""``ElasticsearchIndex``'s vector paths end to end against the Elasticsearch stand-in
(``tests.index.es_simulator``): which requests it makes and what it does with the answers.
The same behaviour against a real server is the contract suite's (ELASTICSEARCH_URL)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from include.index._es_mapping import VECTOR_FIELD
from include.index.elasticsearch import ElasticsearchIndex
from include.index.fusion import fuse_hybrid, hybrid_depth
from include.vectors import VectorSet
from tests.index.es_simulator import EsSimulator, es_simulator
from tests.index.helpers import make_write, unit, with_vectors

ALIAS = "tributary-sim"
SRC = "web:demo"
MODEL = "test:model@1"
TEXTS = ["incremental sync of sources", "chunks never rewritten", "incremental sync again"]
ROWS = [[0.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]]
QUERY = unit([0.2, 1.0, 0.5, 0.0])


@pytest.fixture
def sim() -> Iterator[tuple[EsSimulator, ElasticsearchIndex]]:
    with es_simulator(ALIAS) as (simulator, client):
        index = ElasticsearchIndex(client, ALIAS, refresh="false", owns_client=False, initial_backoff=0.01)
        yield simulator, index


def test_the_first_vector_write_maps_the_vector_at_its_size_and_stores_it(
    sim: tuple[EsSimulator, ElasticsearchIndex],
) -> None:
    simulator, index = sim
    index.upsert([make_write(SRC, "plain.html", ["no vectors here"])])
    assert simulator.bodies("PUT", f"{ALIAS}/_mapping") and VECTOR_FIELD not in simulator.properties
    w = with_vectors(make_write(SRC, "a.html", TEXTS), ROWS)
    [res] = index.upsert([w])
    assert (res.ok, res.written) == (True, 3), res.error
    assert simulator.properties[VECTOR_FIELD]["dims"] == 4
    assert simulator.properties[VECTOR_FIELD]["index_options"] == {"type": "hnsw"}
    stored = simulator.docs[w.chunks[1].chunk_id]
    assert stored["embedding_model"] == MODEL and stored[VECTOR_FIELD] == [0.0, 1.0, 0.0, 0.0]
    # another size into the same index: that document fails, clearly, and the batch goes on
    wider = with_vectors(make_write(SRC, "b.html", ["eight dims"]), [[1.0] * 8])
    ok = with_vectors(make_write(SRC, "c.html", ["four dims"]), [[1.0] * 4])
    bad, good = index.upsert([wider, ok])
    assert not bad.ok and "holds 4-dimension vectors" in (bad.error or "") and good.ok
    assert index.get_chunk(w.chunks[0].chunk_id)["embedding_model"] == MODEL  # type: ignore[index]


def test_knn_and_hybrid_search_requests_and_scores(sim: tuple[EsSimulator, ElasticsearchIndex]) -> None:
    simulator, index = sim
    assert index.search("sync", mode="vector", query_vector=QUERY) == []  # no vector mapped yet
    w = with_vectors(make_write(SRC, "a.html", TEXTS), ROWS)
    index.upsert([w])
    hits = index.search("", k=2, mode="vector", query_vector=QUERY, source=SRC)
    [knn] = [b["knn"] for b in simulator.bodies("POST", "/_search") if b and "knn" in b]
    assert (knn["k"], knn["num_candidates"], knn["filter"]) == (2, 100, [{"term": {"source": SRC}}])
    assert [h.chunk_id for h in hits] == [w.chunks[1].chunk_id, w.chunks[2].chunk_id]
    assert hits[0].score == pytest.approx(float(QUERY[1]), abs=1e-6)  # ES's (1 + cos) / 2 turned back
    assert (hits[0].sequence, hits[0].embedding_model) == (1, MODEL)
    with pytest.raises(ValueError, match="3 dimensions but the index"):
        index.search("", mode="vector", query_vector=unit([1.0, 0.0, 0.0]))
    fused = index.search("incremental sync", k=3, mode="hybrid", query_vector=QUERY)
    bm25 = index.search("incremental sync", k=hybrid_depth(3))
    vector = index.search("incremental sync", k=hybrid_depth(3), mode="vector", query_vector=QUERY)
    assert [h.chunk_id for h in bm25] == [w.chunks[0].chunk_id, w.chunks[2].chunk_id]  # the simulator's tie order
    expected = fuse_hybrid(bm25, vector, 3)  # the vector ranking weighted 3 (the default)
    assert [(h.chunk_id, h.ranks) for h in fused] == [(h.chunk_id, h.ranks) for h in expected]
    # 1/62 + 3/62 beats 1/61 + 3/63 and 3/61
    assert fused[0].ranks == {"bm25": 2, "vector": 2} and fused[2].ranks == {"vector": 1}


def test_vectors_for_asks_for_the_vectors_and_reads_them_back(sim: tuple[EsSimulator, ElasticsearchIndex]) -> None:
    simulator, index = sim
    w = with_vectors(make_write(SRC, "a.html", TEXTS), [[0.1, 0.2, 0.3, 0.4], [1e-5, 2.0, -3.0, 0.25], [1, 1, 1, 1]])
    assert w.vectors is not None
    index.upsert([w])
    hashes = [c.text_hash for c in w.chunks]
    got = index.vectors_for(MODEL, hashes)
    for i, h in enumerate(hashes):
        np.testing.assert_array_equal(got[h], w.vectors.matrix[i])
    cache_search = [
        b for b in simulator.bodies("POST", "/_search") if b and "filter" in b.get("query", {}).get("bool", {})
    ]
    assert cache_search[-1]["_source"] == {"includes": ["text_hash", VECTOR_FIELD], "exclude_vectors": False}
    assert index.vectors_for("other:model", hashes) == {}


def test_a_moved_chunk_is_updated_in_place_and_a_bm25_write_drops_the_vector(
    sim: tuple[EsSimulator, ElasticsearchIndex],
) -> None:
    simulator, index = sim
    first = with_vectors(make_write(SRC, "a.html", TEXTS, content_ids=True), ROWS)
    index.upsert([first])
    edited = ["a new first paragraph", *TEXTS]
    second = with_vectors(make_write(SRC, "a.html", edited, run_id="run-2", content_ids=True), [[1, 0, 0, 0], *ROWS])
    [res] = index.upsert([second])
    assert (res.ok, res.written, res.unchanged, res.deleted) == (True, 1, 3, 0), res.error
    last_bulk = [b for m, p, b in simulator.requests if p == "/_bulk"][-1]
    assert last_bulk.count('"update"') == 3 and VECTOR_FIELD not in last_bulk.split('"update"', 1)[1]
    assert [simulator.docs[c.chunk_id]["sequence"] for c in second.chunks] == [0, 1, 2, 3]
    assert simulator.docs[second.chunks[1].chunk_id]["run_id"] == "run-1"
    [res] = index.upsert([make_write(SRC, "a.html", edited, content_ids=True)])
    assert (res.ok, res.written, res.unchanged) == (True, 0, 4)
    assert all(VECTOR_FIELD not in d and "embedding_model" not in d for d in simulator.docs.values())


def test_replace_vectors_updates_the_stored_chunks_in_place(sim: tuple[EsSimulator, ElasticsearchIndex]) -> None:
    simulator, index = sim
    w = with_vectors(make_write(SRC, "a.html", TEXTS), ROWS)
    index.upsert([w])
    ids = [c.chunk_id for c in w.chunks]
    new = VectorSet("test:model@2", 4, ids, np.stack([unit(r) for r in reversed(ROWS)]))
    wider = VectorSet("test:model@2", 8, ["x"], np.ones((1, 8), dtype=np.float32))
    errors = index.replace_vectors(SRC, {w.document.doc_id: new, "other-doc": wider})
    assert list(errors) == ["other-doc"] and "holds 4-dimension vectors, not 8" in errors["other-doc"]
    # partial updates of the three chunks (nothing re-indexed), each with its new vector and model
    updates = [(a, cid) for a, cid, _ in simulator.actions[-3:]]
    assert updates == [("update", cid) for cid in ids]
    assert [simulator.docs[c][VECTOR_FIELD] for c in ids] == list(reversed(ROWS))
    assert {simulator.docs[c]["embedding_model"] for c in ids} == {"test:model@2"}
    assert simulator.docs[ids[0]]["content_with_weight"] == TEXTS[0]  # the text stands
