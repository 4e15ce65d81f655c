"""Access-filtered search in the Elasticsearch backend: ``acl``/``public`` on every chunk, the
filter in the bool query and inside kNN, ``set_access`` by partial updates.

Every case runs against the Elasticsearch stand-in (``tests.index.es_simulator``, which
evaluates the filters and records the request bodies) and, when ``ELASTICSEARCH_URL`` is set,
against that server too (as the contract suite does); the request-body checks are the
stand-in's only.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from include.acl import PUBLIC
from include.index._es_acl import access_query
from include.index._es_mapping import VECTOR_FIELD, physical_index_pattern, template_name
from include.index.base import DocumentWrite
from include.index.elasticsearch import ElasticsearchIndex
from tests.index import access_cases as cases
from tests.index.conftest import ES_SKIP_REASON, ES_URL
from tests.index.es_simulator import EsSimulator, es_simulator
from tests.index.helpers import make_write, with_vectors

# what set_access may write on a chunk: nothing else of it changes
_ACCESS_KEYS = {"acl", "public", "updated_at"}


@dataclass
class Corpus:
    idx: ElasticsearchIndex
    writes: list[DocumentWrite]
    sim: EsSimulator | None  # None: a real server


def _server_index() -> Iterator[ElasticsearchIndex]:
    if not ES_URL:
        pytest.skip(ES_SKIP_REASON)
    from elasticsearch import Elasticsearch

    alias = f"tributary-test-{uuid.uuid4().hex[:10]}"
    idx = ElasticsearchIndex(Elasticsearch(ES_URL), alias, refresh="true", initial_backoff=0.1)
    try:
        yield idx
    finally:
        idx.close()
        admin = Elasticsearch(ES_URL)
        admin.options(ignore_status=404).indices.delete(index=physical_index_pattern(alias))
        admin.options(ignore_status=404).indices.delete_index_template(name=template_name(alias))
        admin.close()


@pytest.fixture(params=["simulator", "server"])
def es(request: pytest.FixtureRequest) -> Iterator[tuple[ElasticsearchIndex, EsSimulator | None]]:
    if request.param == "server":
        for idx in _server_index():
            yield idx, None
        return
    with es_simulator("tributary-acl") as (sim, client):
        yield ElasticsearchIndex(client, "tributary-acl", refresh="false", owns_client=False, initial_backoff=0.01), sim


@pytest.fixture
def corpus(es: tuple[ElasticsearchIndex, EsSimulator | None]) -> Corpus:
    idx, sim = es
    return Corpus(idx, cases.build_corpus(idx), sim)


def _chunks(c: Corpus) -> dict[str, Any]:
    """Every chunk as stored, its access fields aside (what an ACL change must not write)."""
    out = {}
    for w in c.writes:
        cid = w.chunks[0].chunk_id
        got = c.idx.get_chunk(cid) or {}
        out[cid] = {k: v for k, v in got.items() if k not in {*_ACCESS_KEYS, "access"}}
        if c.sim is not None:  # the stand-in holds the vector too
            out[cid][VECTOR_FIELD] = c.sim.docs[cid].get(VECTOR_FIELD)
    return out


def test_each_mode_returns_only_the_permitted_documents(corpus: Corpus) -> None:
    cases.check_only_permitted_documents_in_every_mode(corpus.idx, corpus.writes)


def test_vector_and_hybrid_return_k_permitted_hits_when_the_nearest_are_forbidden(corpus: Corpus) -> None:
    cases.check_k_permitted_hits_when_the_nearest_are_forbidden(corpus.idx, corpus.writes)


def test_documents_without_entries_are_seen_by_an_unrestricted_search_only(corpus: Corpus) -> None:
    cases.check_unknown_access_is_unrestricted_only(corpus.idx, corpus.writes)


def test_set_access_changes_results_by_partial_updates_only(corpus: Corpus) -> None:
    sent_before = len(corpus.sim.actions) if corpus.sim else 0
    cases.check_set_access_changes_results(corpus.idx, corpus.writes, lambda: _chunks(corpus))
    if corpus.sim is not None:
        sent = corpus.sim.actions[sent_before:]
        # one partial update per changed chunk, of the access fields only: no index op, no vector
        assert len(sent) == 5 and {a for a, _, _ in sent} == {"update"}
        assert all(set(payload["doc"]) == _ACCESS_KEYS for _, _, payload in sent)


def test_a_reupsert_with_other_entries_updates_them_though_no_chunk_changed(corpus: Corpus) -> None:
    cases.check_entries_follow_a_reupsert_of_unchanged_chunks(corpus.idx, corpus.writes)


def test_access_of_and_get_chunk_report_the_entries(corpus: Corpus) -> None:
    cases.check_access_of_and_get_chunk(corpus.idx, corpus.writes)


def test_an_empty_access_matches_nothing(corpus: Corpus) -> None:
    cases.check_empty_access_matches_nothing(corpus.idx)


def test_the_filter_is_sent_in_the_bool_query_and_inside_knn(corpus: Corpus) -> None:
    if corpus.sim is None:
        pytest.skip("request bodies are the stand-in's to record")
    sim = corpus.sim
    seen = len(sim.requests)
    cases.search_docs(corpus.idx, "hybrid", cases.ALICE, k=5)
    bodies = [b for m, p, b in sim.requests[seen:] if p.endswith("/_search")]
    wanted = access_query(sorted(cases.ALICE))
    assert wanted == {
        "bool": {
            "should": [{"term": {"public": True}}, {"terms": {"acl": sorted(cases.ALICE)}}],
            "minimum_should_match": 1,
        }
    }
    [bm25] = [b for b in bodies if "query" in b]
    [knn] = [b["knn"] for b in bodies if "knn" in b]
    assert wanted in bm25["query"]["bool"]["filter"]
    assert wanted in knn["filter"] and knn["k"] == 50  # inside kNN: the hybrid depth of permitted hits
    # a searcher without "public" (an internal caller's own entries) does not match public documents
    assert access_query([cases.ENG]) == {
        "bool": {"should": [{"terms": {"acl": [cases.ENG]}}], "minimum_should_match": 1}
    }
    seen = len(sim.requests)
    for mode in ("bm25", "vector", "hybrid"):
        cases.search_docs(corpus.idx, mode, None, k=5)
    unrestricted = [b for m, p, b in sim.requests[seen:] if p.endswith("/_search")]
    assert len(unrestricted) == 4 and not any('"acl"' in json.dumps(b) for b in unrestricted)


def test_the_access_fields_are_mapped_on_the_live_index(es: tuple[ElasticsearchIndex, EsSimulator | None]) -> None:
    idx, sim = es
    if sim is None:
        mapping = idx._es.indices.get_mapping(index=idx.alias).body
        properties = next(iter(mapping.values()))["mappings"]["properties"]
    else:  # the stand-in answers "the alias exists": ensure_index put the new fields on it
        properties = sim.properties
    assert properties["acl"] == {"type": "keyword"} and properties["public"] == {"type": "boolean"}


def test_a_kept_chunk_losing_its_vector_gets_its_new_entries_in_the_same_update(
    es: tuple[ElasticsearchIndex, EsSimulator | None],
) -> None:
    idx, _ = es
    w = with_vectors(make_write(cases.SRC, "v.html", ["a vector report"]), [[1.0, 0, 0, 0, 0, 0, 0, 0]])
    w.document.access = (cases.ENG,)
    idx.upsert([w])
    plain = make_write(cases.SRC, "v.html", ["a vector report"])  # same text, no vector, now public
    [res] = idx.upsert([plain])
    assert (res.ok, res.unchanged) == (True, 1), res.error
    chunk = idx.get_chunk(w.chunks[0].chunk_id)
    assert chunk is not None and chunk["access"] == [PUBLIC] and chunk["public"] is True
    assert chunk["embedding_model"] is None
    assert [h.doc_id for h in idx.search("vector", access=cases.CAROL)] == [w.document.doc_id]
