"""Vectors in the Elasticsearch backend without a server: the vector mapping, the bulk bodies that
carry vectors, the partial updates of kept chunks, and the kNN / cache request builders.

``run_bulk`` goes through the official client and ``streaming_bulk`` to the bulk simulator
(``tests.index.bulk_server``), so what is checked is what would go over the wire.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from include.index._es_bulk import (
    build_chunk_source,
    index_op,
    plan_writes,
    run_bulk,
    source_to_record,
    stored_stamp,
    stored_state,
    update_op,
)
from include.index._es_mapping import (
    MAPPED_FIELDS,
    MAX_VECTOR_DIMS,
    VECTOR_FIELD,
    index_mappings,
    index_template,
    vector_dims_of,
    vector_properties,
)
from include.index._es_vectors import (
    MAX_NUM_CANDIDATES,
    cache_query,
    cosine_of_score,
    kept_update,
    knn_clause,
    vector_json,
    vector_source,
)
from tests.index.bulk_server import BulkCluster, bulk_cluster
from tests.index.helpers import make_write, unit, with_vectors

NOW = "2026-12-02T04:00:00.000+00:00"
MODEL = "test:model@1"


def _body(op: Any) -> dict[str, Any]:
    _header, body = op.payload.decode().splitlines()
    return dict(json.loads(body))


# --------------------------------------------------------------------------- mapping


@pytest.mark.parametrize(("dims", "index_type"), [(4, "hnsw"), (383, "hnsw"), (384, "int8_hnsw"), (3072, "int8_hnsw")])
def test_vector_mapping_is_cosine_and_quantised_from_384_dimensions(dims: int, index_type: str) -> None:
    spec = vector_properties(dims)[VECTOR_FIELD]
    assert spec == {
        "type": "dense_vector",
        "element_type": "float",
        "dims": dims,
        "index": True,
        "similarity": "cosine",
        "index_options": {"type": index_type},
    }


@pytest.mark.parametrize("dims", [0, MAX_VECTOR_DIMS + 1])
def test_vector_sizes_elasticsearch_cannot_index_are_refused(dims: int) -> None:
    with pytest.raises(ValueError, match="dense vectors of 1 to 4096"):
        vector_properties(dims)


def test_the_template_maps_the_model_but_leaves_the_vector_to_the_first_write() -> None:
    props = index_template("tributary")["template"]["mappings"]["properties"]
    assert props["embedding_model"] == {"type": "keyword"}
    assert VECTOR_FIELD not in props and VECTOR_FIELD not in index_mappings()["properties"]
    assert index_mappings()["dynamic"] == "strict"  # so the vector must be mapped before it is written


def test_the_mapped_vector_size_is_read_from_a_get_mapping_answer() -> None:
    live = {"tributary__v0": {"mappings": {"properties": {**index_mappings()["properties"], **vector_properties(8)}}}}
    assert vector_dims_of(live) == 8
    assert vector_dims_of({"tributary__v0": {"mappings": index_mappings()}}) is None
    assert vector_dims_of({}) is None


# --------------------------------------------------------------------------- bulk bodies


def test_an_index_op_carries_the_vector_as_float32_and_its_model() -> None:
    w = with_vectors(make_write("web:demo", "a.html", ["one", "two"]), [[0.1, 0.2, 0.3], [1e-5, -2.0, 3.0]])
    assert w.vectors is not None
    op = index_op("idx", w.chunks[1], w.document, updated_at=NOW, vector=w.vectors.matrix[1], model=MODEL)
    body = _body(op)
    assert body["embedding_model"] == MODEL
    # the JSON numbers are float32's shortest texts: parsed back as float32 they are the same bits
    np.testing.assert_array_equal(np.asarray(body[VECTOR_FIELD], dtype=np.float32), w.vectors.matrix[1])
    assert set(body) <= MAPPED_FIELDS, set(body) - MAPPED_FIELDS
    assert vector_json(np.asarray([0.1, -1e-05, 2.0], dtype=np.float32)) == b"[0.1,-1e-05,2.0]"
    plain = _body(index_op("idx", w.chunks[0], w.document, updated_at=NOW))
    assert VECTOR_FIELD not in plain and "embedding_model" not in plain


def test_a_stored_record_never_returns_the_vector() -> None:
    w = make_write("web:demo", "a.html", ["one"])
    src = {**build_chunk_source(w.chunks[0], w.document, updated_at=NOW, embedding_model=MODEL), VECTOR_FIELD: [1.0]}
    rec = source_to_record(w.chunks[0].chunk_id, src)
    assert VECTOR_FIELD not in rec and rec["embedding_model"] == MODEL
    assert source_to_record("x", build_chunk_source(w.chunks[0], w.document, updated_at=NOW))["embedding_model"] is None
    assert stored_state(src) == (0, MODEL)


def test_update_ops_are_sent_as_the_helper_sends_them_and_count_as_unchanged() -> None:
    w = make_write("web:demo", "a.html", ["one", "two"])
    moved = update_op("idx", w.document.doc_id, w.chunks[0].chunk_id, {"doc": {"sequence": 4}})
    vec = unit([0.1, 0.2, 0.3])
    gained = update_op(
        "idx",
        w.document.doc_id,
        w.chunks[1].chunk_id,
        kept_update(1, (1, None), MODEL, vec) or {},
    )
    cluster = BulkCluster()
    with bulk_cluster(cluster) as es:
        report = run_bulk(es, [moved, gained], max_count=1, max_bytes=1 << 20)
    assert cluster.bodies == [moved.payload, gained.payload]  # the byte budget counts what is sent
    header, body = (json.loads(line) for line in moved.payload.decode().splitlines())
    assert header == {"update": {"_id": w.chunks[0].chunk_id, "_index": "idx"}} and body == {"doc": {"sequence": 4}}
    assert report.errors == {} and report.written == {}


# --------------------------------------------------------------------------- kept chunks


def test_kept_chunk_updates() -> None:
    vec = unit([1.0, 2.0, 2.0])
    assert kept_update(3, (3, MODEL), MODEL, vec) is None  # as stored: nothing sent
    assert kept_update(3, (2, MODEL), MODEL, vec) == {"doc": {"sequence": 3}}  # moved only: no vector re-sent
    assert kept_update(3, (3, None), None, None) is None  # BM25-only, as before
    gained = kept_update(3, (3, None), MODEL, vec)
    assert gained is not None and gained["doc"]["embedding_model"] == MODEL
    assert np.asarray(gained["doc"][VECTOR_FIELD], dtype=np.float32).tolist() == vec.tolist()
    assert kept_update(3, (3, "old:model"), MODEL, vec) is not None  # another model: replaced
    dropped = kept_update(5, (3, MODEL), None, None)
    assert dropped is not None and dropped["script"]["params"] == {"sequence": 5}
    assert "remove('embedding')" in dropped["script"]["source"]


def _stored(write: Any, *, model: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    srcs = [build_chunk_source(c, write.document, updated_at=NOW, embedding_model=model) for c in write.chunks]
    return {s["chunk_id"]: stored_stamp(s) for s in srcs}, {s["chunk_id"]: stored_state(s) for s in srcs}


def test_plan_moves_kept_chunks_by_partial_update_and_writes_new_ones_with_vectors() -> None:
    texts = ["alpha", "beta"]
    old = with_vectors(make_write("web:demo", "a.html", texts, content_ids=True), [[1, 0], [0, 1]])
    stamps, states = _stored(old, model=MODEL)
    new = with_vectors(
        make_write("web:demo", "a.html", ["new top", *texts], content_ids=True), [[1, 1], [1, 0], [0, 1]]
    )
    [d] = plan_writes([new], index="idx", existing=stamps, states=states, index_dims=2, updated_at=NOW).docs
    assert (d.unchanged, d.error, d.delete_ops) == (2, None, [])
    kinds = [(op.kind, op.chunk_id) for op in d.index_ops]
    assert kinds == [
        ("index", new.chunks[0].chunk_id),
        ("update", new.chunks[1].chunk_id),
        ("update", new.chunks[2].chunk_id),
    ]
    assert [op.update for op in d.index_ops[1:]] == [{"doc": {"sequence": 1}}, {"doc": {"sequence": 2}}]
    assert _body(d.index_ops[0])["embedding_model"] == MODEL


def test_plan_fails_a_document_whose_vectors_do_not_fit_the_index() -> None:
    wrong = with_vectors(make_write("web:demo", "a.html", ["x"]), [[1, 0, 0]])
    nan = with_vectors(make_write("web:demo", "b.html", ["y"]), [[1, 0]])
    assert nan.vectors is not None
    nan.vectors.matrix[0, 0] = np.inf
    ok = with_vectors(make_write("web:demo", "c.html", ["z"]), [[1, 0]])
    plan = plan_writes([wrong, nan, ok], index="idx", existing={}, index_dims=2, updated_at=NOW)
    assert "holds 2-dimension vectors" in (plan.docs[0].error or "") and "have 3" in (plan.docs[0].error or "")
    assert "NaN or infinite" in (plan.docs[1].error or "")
    assert plan.docs[2].error is None
    assert [op.chunk_id for op in plan.first_wave()] == [ok.chunks[0].chunk_id]  # nothing sent for the failed ones
    unmapped = plan_writes([ok], index="idx", existing={}, index_dims=None, updated_at=NOW)
    assert "has no vector mapping" in (unmapped.docs[0].error or "")


# --------------------------------------------------------------------------- search and cache requests


def test_knn_clause_filters_by_source_and_asks_for_enough_candidates() -> None:
    q = unit([0.5, 0.5])
    clause = knn_clause(q, 10, "web:demo")
    assert clause == {
        "field": VECTOR_FIELD,
        "query_vector": q.tolist(),
        "k": 10,
        "num_candidates": 100,
        "filter": [{"term": {"source": "web:demo"}}],
    }
    assert knn_clause(q, 200, None)["num_candidates"] == 400 and "filter" not in knn_clause(q, 200, None)
    assert knn_clause(q, 20_000, None)["num_candidates"] == knn_clause(q, 20_000, None)["k"] == MAX_NUM_CANDIDATES


def test_cosine_scores_and_cache_requests() -> None:
    assert [cosine_of_score(s) for s in (1.0, 0.5, 0.0)] == [1.0, 0.0, -1.0]
    assert cache_query(MODEL, ["h1", "h2"]) == {
        "bool": {"filter": [{"term": {"embedding_model": MODEL}}, {"terms": {"text_hash": ["h1", "h2"]}}]}
    }
    # 9.2+ leaves vectors out of _source unless asked; older servers refuse the option
    assert vector_source((9, 2, 0), ["text_hash", VECTOR_FIELD]) == {
        "includes": ["text_hash", VECTOR_FIELD],
        "exclude_vectors": False,
    }
    assert vector_source((9, 1, 4), ["text_hash", VECTOR_FIELD]) == ["text_hash", VECTOR_FIELD]
