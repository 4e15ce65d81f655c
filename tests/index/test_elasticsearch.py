"""Elasticsearch-only behaviour beyond the shared contract (needs ELASTICSEARCH_URL), plus the
connection set-up, which needs no server."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from include.config import IndexConfig
from include.index import open_index
from include.index._es_mapping import physical_index_pattern, rebuild_alias, template_name
from tests.index.helpers import make_write, unit, with_vectors
from tests.support.server import serve_asgi

SRC = "web:demo"


@pytest.fixture
def es_index(es_url: str) -> Iterator[tuple[str, object]]:
    from elasticsearch import Elasticsearch

    from include.index.elasticsearch import ElasticsearchIndex

    alias = f"tributary-test-{uuid.uuid4().hex[:10]}"
    index = ElasticsearchIndex(Elasticsearch(es_url), alias, refresh="true", initial_backoff=0.1)
    yield alias, index
    index.close()
    admin = Elasticsearch(es_url)
    admin.options(ignore_status=404).indices.delete(index=physical_index_pattern(alias))
    admin.options(ignore_status=404).indices.delete_index_template(name=template_name(alias))
    admin.close()


def test_open_index_builds_the_backend_from_config(es_url: str) -> None:
    from elasticsearch import Elasticsearch

    alias = f"tributary-test-{uuid.uuid4().hex[:10]}"
    cfg = IndexConfig(backend="elasticsearch", name=alias, options={"url": es_url, "refresh": "true"})
    idx = open_index(cfg)
    try:
        assert idx.backend_name == "elasticsearch"
        [res] = idx.upsert([make_write(SRC, "a.html", ["hello world"])])
        assert res.ok and idx.count() == 1
        admin = Elasticsearch(es_url)
        # the name is an alias over generation 0, created from our template
        assert list(admin.indices.get_alias(name=alias).body) == [f"{alias}__v0"]
        mapping = admin.indices.get_mapping(index=alias).body[f"{alias}__v0"]["mappings"]
        assert mapping["dynamic"] == "strict" and mapping["properties"]["content_sm_ltks"]["analyzer"] == "cjk"
        admin.close()
    finally:
        idx.close()
        admin = Elasticsearch(es_url)
        admin.options(ignore_status=404).indices.delete(index=physical_index_pattern(alias))
        admin.options(ignore_status=404).indices.delete_index_template(name=template_name(alias))
        admin.close()


def test_stored_chunk_carries_the_memorybear_fields(es_index) -> None:  # type: ignore[no-untyped-def]
    _, idx = es_index
    w = make_write(SRC, "docs/r.pdf", ["第一页的内容", "second page"], title="报告", positions=True)
    idx.upsert([w])
    got = idx.get_chunk(w.chunks[0].chunk_id)
    assert got["docnm_kwd"] == "r.pdf" and got["content_with_weight"] == "第一页的内容"
    assert got["title_tks"] == got["title_sm_tks"] == "报告"
    assert got["page_num_int"] == [1] and got["position_int"] == [[1, 10, 200, 20, 40]] and got["top_int"] == [20]
    # searchable through the copied, analysed fields and through the title
    assert [h.chunk_id for h in idx.search("页的内")] == [w.chunks[0].chunk_id]
    assert {h.chunk_id for h in idx.search("报告")} == {c.chunk_id for c in w.chunks}


def test_item_failure_is_reported_for_its_document_only_and_keeps_its_old_chunks(es_index) -> None:  # type: ignore[no-untyped-def]
    _, idx = es_index
    old = make_write(SRC, "bad.html", ["old one", "old two", "old three"])
    idx.upsert([old])
    bad = make_write(SRC, "bad.html", ["new one"], stale=[c.chunk_id for c in old.chunks[1:]])
    bad.chunks[0].token_count = "not-a-number"  # type: ignore[assignment]  # rejected by the mapping
    good = make_write(SRC, "good.html", ["fine"])
    res_bad, res_good = idx.upsert([bad, good])
    assert not res_bad.ok and "document_parsing_exception" in (res_bad.error or "")
    assert (res_bad.written, res_bad.deleted) == (0, 0)
    assert res_good.ok and res_good.written == 1
    # new chunks first, stale after: the failed write deleted nothing
    assert idx.chunk_ids(doc_id=old.document.doc_id) == {c.chunk_id for c in old.chunks}
    assert idx.get_chunk(old.chunks[0].chunk_id)["text"] == "old one"


def test_rebuild_scoped_to_one_source_keeps_the_other_sources(es_index, es_url: str) -> None:  # type: ignore[no-untyped-def]
    alias, idx = es_index
    mine_old = make_write(SRC, "old.html", ["dropped by the rebuild"])
    theirs = make_write("feishu:wiki", "n1", ["another source's chunk"])
    idx.upsert([mine_old, theirs])
    idx.begin_rebuild(source=SRC)
    mine_new = make_write(SRC, "new.html", ["rebuilt content"])
    late = make_write("feishu:wiki", "n2", ["written by the other source during the rebuild"])
    idx.upsert([mine_new, late])
    # the other source's write went live at once; the rebuilt source's waits for the swap
    assert idx.count(source="feishu:wiki") == 2 and idx.count(source=SRC) == 1
    idx.finish_rebuild(True)
    assert idx.chunk_ids(source=SRC) == {mine_new.chunks[0].chunk_id}
    assert idx.chunk_ids(source="feishu:wiki") == {theirs.chunks[0].chunk_id, late.chunks[0].chunk_id}
    from elasticsearch import Elasticsearch

    admin = Elasticsearch(es_url)
    assert len(admin.indices.get(index=physical_index_pattern(alias)).body) == 1  # the old one is gone
    assert not admin.indices.exists_alias(name=rebuild_alias(alias))
    admin.close()


def test_rebuilds_keep_vectors_working(es_index, es_url: str) -> None:  # type: ignore[no-untyped-def]
    """A scoped rebuild's new generation maps the live vector size and carries the other
    sources' vectors over; a full rebuild takes its size from its first vector write."""
    from elasticsearch import Elasticsearch

    alias, idx = es_index
    q = unit([1.0, 0.0, 0.0, 0.0])
    mine = with_vectors(make_write(SRC, "a.html", ["mine"]), [[1.0, 0.1, 0.0, 0.0]])
    theirs = with_vectors(make_write("feishu:wiki", "n1", ["theirs"]), [[1.0, 0.0, 0.0, 0.0]])
    idx.upsert([mine, theirs])
    admin = Elasticsearch(es_url)
    [live] = admin.indices.get_mapping(index=alias).body.values()
    assert live["mappings"]["properties"]["embedding"]["dims"] == 4
    assert live["mappings"]["properties"]["embedding"]["index_options"]["type"] == "hnsw"
    idx.begin_rebuild(source=SRC)
    [res] = idx.upsert([mine])
    assert res.ok and res.written == 1
    idx.finish_rebuild(True)
    assert [h.chunk_id for h in idx.search("", k=2, mode="vector", query_vector=q)] == [
        theirs.chunks[0].chunk_id,
        mine.chunks[0].chunk_id,
    ]
    assert set(idx.vectors_for("test:model@1", [theirs.chunks[0].text_hash])) == {theirs.chunks[0].text_hash}
    # a full rebuild with another model of another size
    idx.begin_rebuild()
    wide = with_vectors(make_write(SRC, "a.html", ["mine"]), [[1.0] * 8], model="wide:model@1")
    [res] = idx.upsert([wide])
    assert res.ok, res.error
    idx.finish_rebuild(True)
    [hit] = idx.search("", k=1, mode="vector", query_vector=unit([1.0] * 8))
    assert (hit.chunk_id, hit.embedding_model) == (wide.chunks[0].chunk_id, "wide:model@1")
    admin.close()


def test_document_deleted_during_a_rebuild_does_not_come_back(es_index) -> None:  # type: ignore[no-untyped-def]
    _, idx = es_index
    a, b = make_write(SRC, "a.html", ["a"]), make_write(SRC, "b.html", ["b"])
    idx.upsert([a, b])
    idx.begin_rebuild()
    idx.upsert([a, b])
    assert idx.delete_documents(SRC, [b.document.doc_id]) == 1
    assert idx.count() == 1  # gone from the live index at once
    idx.finish_rebuild(True)
    assert idx.chunk_ids() == {a.chunks[0].chunk_id}


def test_a_second_process_sees_the_rebuild_in_progress(es_index, es_url: str) -> None:  # type: ignore[no-untyped-def]
    from elasticsearch import Elasticsearch

    from include.index.elasticsearch import ElasticsearchIndex

    alias, idx = es_index
    old = make_write(SRC, "old.html", ["old"])
    idx.upsert([old])
    idx.begin_rebuild()
    other = ElasticsearchIndex(Elasticsearch(es_url), alias, refresh="true")  # e.g. another worker
    new = make_write(SRC, "new.html", ["new"])
    [res] = other.upsert([new])
    assert res.ok and other.chunk_ids() == {old.chunks[0].chunk_id}  # readers still see the live one
    other.close()
    idx.finish_rebuild(True)
    assert idx.chunk_ids() == {new.chunks[0].chunk_id}


# --------------------------------------------------------------------------- connection set-up


def test_client_from_url_option_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from include.index.elasticsearch import client_from_options

    monkeypatch.setenv("ELASTICSEARCH_URL", "http://elastic:s3cret@127.0.0.1:9299")
    client = client_from_options({})
    node = client.transport.node_pool.get()
    assert (node.config.host, node.config.port) == ("127.0.0.1", 9299)
    assert node.config.headers["authorization"].startswith("Basic ")  # credentials from the URL
    client.close()
    client = client_from_options({"url": "http://127.0.0.1:9301"})
    assert client.transport.node_pool.get().config.port == 9301
    client.close()


def _header_echo() -> tuple[Starlette, list[dict[str, str]]]:
    """A server answering ``GET /`` as Elasticsearch does, keeping each request's headers."""
    seen: list[dict[str, str]] = []

    async def info(request: Request) -> JSONResponse:
        seen.append(dict(request.headers))
        body = {
            "name": "echo",
            "cluster_name": "echo",
            "version": {"number": "9.5.1"},
            "tagline": "You Know, for Search",
        }
        return JSONResponse(body, headers={"X-Elastic-Product": "Elasticsearch"})

    return Starlette(routes=[Route("/", info)]), seen


def test_client_from_an_airflow_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    from include.index.elasticsearch import client_from_options

    app, seen = _header_echo()
    with serve_asgi(app) as url:
        port = int(url.rsplit(":", 1)[1])
        monkeypatch.setenv("ELASTICSEARCH_URL", "http://127.0.0.1:1")  # an explicit conn_id wins
        conn = {"conn_type": "elasticsearch", "host": "127.0.0.1", "port": port, "schema": "http"}
        monkeypatch.setenv("AIRFLOW_CONN_ES_TRIBUTARY", json.dumps({**conn, "login": "u", "password": "p"}))
        client = client_from_options({"conn_id": "es_tributary"})
        assert client.info().body["version"]["number"] == "9.5.1"
        client.close()
    assert seen[0]["authorization"] == "Basic " + base64.b64encode(b"u:p").decode()


def test_client_from_a_connection_record_takes_its_extras_as_client_arguments() -> None:
    from include.connections import ConnectionRecord
    from include.index._es_client import client_from_connection

    app, seen = _header_echo()
    with serve_asgi(app) as url:
        port = int(url.rsplit(":", 1)[1])
        # fetch_size belongs to the provider's SQL cursor: not a client argument
        extra = {"api_key": "k3y", "request_timeout": 7, "fetch_size": 500}
        record = ConnectionRecord("es", "elasticsearch", host="127.0.0.1", schema="http", port=port, extra=extra)
        client = client_from_connection(record)
        client.info()
        client.close()
    assert seen[0]["authorization"] == "ApiKey k3y"


def test_bad_options_are_refused_before_any_request() -> None:
    from elasticsearch import Elasticsearch

    from include.index.elasticsearch import ElasticsearchIndex

    with pytest.raises(ValueError, match="refresh"):
        ElasticsearchIndex(Elasticsearch("http://127.0.0.1:1"), "tributary", refresh="sometimes")
    with pytest.raises(ValueError, match="index name"):
        ElasticsearchIndex(Elasticsearch("http://127.0.0.1:1"), "Bad Name")


def test_an_index_from_before_the_text_hash_rename_keeps_working(es_url: str) -> None:
    """Chunks stored with the text hash under its old name (``content_hash``), in an index whose
    mapping has that field: readers see it as ``text_hash``, the next write of the document
    rewrites the chunk under the new name, and a rebuild carries the other sources' old chunks
    over renamed (the new generation's strict mapping has no old field)."""
    from elasticsearch import Elasticsearch

    from include.index._es_bulk import build_chunk_source
    from include.index._es_mapping import LEGACY_TEXT_HASH_FIELD, index_mappings
    from include.index.elasticsearch import ElasticsearchIndex

    alias = f"tributary-test-{uuid.uuid4().hex[:10]}"
    admin = Elasticsearch(es_url)
    old_mappings = index_mappings()
    old_mappings["properties"][LEGACY_TEXT_HASH_FIELD] = old_mappings["properties"].pop("text_hash")
    admin.indices.create(index=f"{alias}__v0", mappings=old_mappings, aliases={alias: {"is_write_index": True}})
    mine, theirs = make_write(SRC, "a.html", ["old river"]), make_write("feishu:wiki", "n1", ["old lake"])
    for w in (mine, theirs):
        src = build_chunk_source(w.chunks[0], w.document, updated_at="2026-01-01T00:00:00+00:00")
        src[LEGACY_TEXT_HASH_FIELD] = src.pop("text_hash")
        admin.index(index=alias, id=w.chunks[0].chunk_id, document=src, refresh=True)
    idx = ElasticsearchIndex(Elasticsearch(es_url), alias, refresh="true", initial_backoff=0.1)
    try:
        [hit] = idx.search("river")
        assert hit.text_hash == mine.chunks[0].text_hash
        assert idx.get_chunk(theirs.chunks[0].chunk_id)["text_hash"] == theirs.chunks[0].text_hash
        [res] = idx.upsert([mine])
        assert (res.written, res.unchanged) == (1, 0)  # no stored text_hash: rewritten once
        raw = admin.get(index=alias, id=mine.chunks[0].chunk_id).body["_source"]
        assert raw["text_hash"] == mine.chunks[0].text_hash and LEGACY_TEXT_HASH_FIELD not in raw
        assert idx.upsert([mine])[0].unchanged == 1
        idx.begin_rebuild(source=SRC)
        idx.upsert([mine])
        idx.finish_rebuild(True)
        carried = admin.get(index=alias, id=theirs.chunks[0].chunk_id).body["_source"]
        assert carried["text_hash"] == theirs.chunks[0].text_hash and LEGACY_TEXT_HASH_FIELD not in carried
    finally:
        idx.close()
        admin.options(ignore_status=404).indices.delete(index=physical_index_pattern(alias))
        admin.options(ignore_status=404).indices.delete_index_template(name=template_name(alias))
        admin.close()
