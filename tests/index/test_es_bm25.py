"""The Elasticsearch backend's BM25 request: any of the query's terms (``operator: or``), one
request, over the ``standard`` and ``cjk`` fields (the body as built, and as the stand-in sees it)."""

from __future__ import annotations

from include.index._es_mapping import SEARCH_FIELDS
from include.index.elasticsearch import ElasticsearchIndex, bm25_query
from tests.index.es_simulator import es_simulator
from tests.index.helpers import make_write

ALIAS = "tributary-sim"
SRC = "web:demo"


def test_the_bm25_body_matches_any_term_over_both_analyzers() -> None:
    body = bm25_query("How do I reset 知识库?", SRC)
    [clause] = body["bool"]["must"]
    assert clause == {"multi_match": {"query": "How do I reset 知识库?", "fields": SEARCH_FIELDS, "operator": "or"}}
    assert {"content_ltks", "content_sm_ltks"} <= set(SEARCH_FIELDS)  # standard words, cjk bigrams
    assert body["bool"]["filter"] == [{"term": {"source": SRC}}]
    assert "filter" not in bm25_query("reset", None)["bool"]


def test_a_bm25_search_is_one_or_request_that_ranks_partial_matches() -> None:
    with es_simulator(ALIAS) as (simulator, client):
        index = ElasticsearchIndex(client, ALIAS, refresh="false", owns_client=False, initial_backoff=0.01)
        w = make_write(SRC, "a.html", ["reset the password", "password rules", "trains run late"])
        index.upsert([w])
        before = len(simulator.bodies("POST", "/_search"))
        hits = index.search("reset password", k=5, source=SRC)
        sent = simulator.bodies("POST", "/_search")[before:]
    assert [b["query"] for b in sent] == [bm25_query("reset password", SRC)]  # no AND-first round trip
    assert [h.chunk_id for h in hits] == [w.chunks[0].chunk_id, w.chunks[1].chunk_id]
