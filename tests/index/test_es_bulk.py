"""The Elasticsearch bulk writes: chunk documents, write plans, and ``run_bulk``'s outcomes.

``run_bulk`` sends through ``elasticsearch.helpers.streaming_bulk`` and the official client,
over real HTTP, to a bulk simulator on 127.0.0.1 (``tests.index.bulk_server``) that answers the
way Elasticsearch's bulk API does (shape per the ES 9 docs) from a per-chunk script, so the
chunking and retry rules can be checked without a cluster. The same code runs against a real
server in the contract suite when ELASTICSEARCH_URL is set.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from elastic_transport import ApiResponseMeta, HttpHeaders, NodeConfig
from elasticsearch import ApiError, BadRequestError, ConnectionError, Elasticsearch

from include.contract import Position
from include.index._es_bulk import (
    BulkOp,
    build_chunk_source,
    chunk_stamp,
    classify_item,
    delete_op,
    index_op,
    plan_writes,
    run_bulk,
    source_to_record,
    stored_stamp,
)
from include.index._es_client import _retryable, bulk_client
from include.index._es_mapping import LEGACY_TEXT_HASH_FIELD, MAPPED_FIELDS
from tests.index.bulk_server import BulkCluster, bulk_cluster
from tests.index.helpers import make_write
from tests.support.server import free_port

NOW = "2026-11-30T04:00:00.000+00:00"


def _lines(op: BulkOp) -> list[dict[str, Any]]:
    return [json.loads(line) for line in op.payload.decode().splitlines()]


# --------------------------------------------------------------------------- documents


def test_chunk_source_fills_the_memorybear_fields() -> None:
    w = make_write("web:demo", "docs/report.pdf", ["first page text", "second"], title="年度报告", positions=True)
    src = build_chunk_source(w.chunks[1], w.document, updated_at=NOW)
    assert src["docnm_kwd"] == "report.pdf"
    assert src["title_tks"] == src["title_sm_tks"] == src["title"] == "年度报告"
    assert src["content_with_weight"] == "second"
    assert src["page_num_int"] == [2]
    # bbox (x0, top, x1, bottom) = (10, 21.5, 200, 41) -> (page, x0, x1, top, bottom), ints
    assert src["position_int"] == [[2, 10, 200, 22, 41]]
    assert src["top_int"] == [22]
    assert "doc_type_kwd" not in src  # plain text: MemoryBear leaves it empty
    assert (src["chunk_id"], src["doc_id"], src["sequence"]) == (w.chunks[1].chunk_id, w.document.doc_id, 1)
    assert (src["run_id"], src["doc_version"], src["doc_content_hash"]) == ("run-1", "v1", w.document.content_hash)
    assert (src["chunker"], src["chunker_version"], src["chunker_options_hash"]) == ("token", "1", "abc123")
    assert src["metadata"] == {
        "lang": "en",
        "chunker": "token",
        "chunker_version": "1",
        "chunker_options_hash": "abc123",
    }
    assert src["updated_at"] == NOW


def test_chunk_source_without_positions_title_or_optional_fields() -> None:
    w = make_write("feishu:wiki", "node/abc", ["x"], title="")
    w.document.title = None
    w.document.url = w.document.run_id = w.document.doc_version = None
    w.document.metadata = {"file_name": "Design.docx", "when": object()}
    w.chunks[0].kind = "table"
    src = build_chunk_source(w.chunks[0], w.document, updated_at=NOW)
    assert src["docnm_kwd"] == "Design.docx"  # the connector's file name wins over the key
    assert src["title_tks"] == ""
    assert (src["page_num_int"], src["position_int"], src["top_int"]) == ([], [], [])
    assert src["doc_type_kwd"] == "table"
    for absent in ("title", "url", "run_id", "doc_version"):
        assert absent not in src
    assert isinstance(src["metadata"]["when"], str)  # non-JSON values are stringified, not dropped


def test_slides_count_as_pages() -> None:
    w = make_write("web:demo", "deck.pptx", ["s"])
    w.chunks[0].positions = [Position(slide=4), Position(slide=4), Position(slide=5)]
    assert build_chunk_source(w.chunks[0], w.document, updated_at=NOW)["page_num_int"] == [4, 5]


def test_source_to_record_gives_the_sqlite_backends_keys() -> None:
    w = make_write("web:demo", "a.html", ["hello"])
    rec = source_to_record(w.chunks[0].chunk_id, build_chunk_source(w.chunks[0], w.document, updated_at=NOW))
    assert rec["text"] == "hello" and rec["seq"] == 0 and rec["chunk_id"] == w.chunks[0].chunk_id
    assert rec["docnm_kwd"] == "a.html"  # the ES-only fields stay visible


def test_index_and_delete_ops_are_ndjson_with_deterministic_ids() -> None:
    w = make_write("web:demo", "a.html", ["hello"])
    op = index_op("idx", w.chunks[0], w.document, updated_at=NOW)
    header, body = _lines(op)
    assert header == {"index": {"_index": "idx", "_id": w.chunks[0].chunk_id}}
    assert body["content_with_weight"] == "hello"
    assert op.payload.endswith(b"\n") and op.size == len(op.payload)
    d = delete_op("idx", "doc", "doc-00003")
    assert _lines(d) == [{"delete": {"_index": "idx", "_id": "doc-00003"}}]
    assert (d.kind, d.doc_id, d.chunk_id) == ("delete", "doc", "doc-00003")
    # Chinese stays UTF-8 (not \\u escapes): byte budgets count what is really sent
    zh = index_op("idx", make_write("s:x", "z", ["中文"]).chunks[0], w.document, updated_at=NOW)
    assert "中文".encode() in zh.payload


# --------------------------------------------------------------------------- batching


def _deletes(n: int) -> list[BulkOp]:
    return [delete_op("idx", "d", f"c{i}") for i in range(n)]


def test_requests_are_bounded_by_count_and_bytes_and_keep_order() -> None:
    ops = _deletes(10)
    cluster = BulkCluster()
    with bulk_cluster(cluster) as es:
        run_bulk(es, ops, max_count=3, max_bytes=10_000)
    assert [len(r) for r in cluster.requests] == [3, 3, 3, 1]
    budget = 2 * ops[0].size + 1  # room for two deletes, not three
    cluster = BulkCluster()
    with bulk_cluster(cluster) as es:
        report = run_bulk(es, ops, max_count=100, max_bytes=budget)
    assert [len(r) for r in cluster.requests] == [2] * 5
    assert [cid for r in cluster.requests for cid in r] == [f"c{i}" for i in range(10)]
    assert report.deleted == {"d": 10} and report.errors == {}


def test_an_ops_size_is_the_bytes_the_helper_sends_for_it() -> None:
    w = make_write("web:demo", "中文.html", ["中文的内容", "two"])
    ops = [index_op("idx", w.chunks[0], w.document, updated_at=NOW), delete_op("idx", "d", "d-00001")]
    cluster = BulkCluster()
    with bulk_cluster(cluster) as es:
        run_bulk(es, ops, max_count=1, max_bytes=1 << 20)
    assert cluster.bodies == [op.payload for op in ops]


def test_an_op_over_the_byte_budget_travels_alone_rather_than_vanishing() -> None:
    w = make_write("web:demo", "a.html", ["small", "big " * 200, "small too"])
    ops = [index_op("idx", c, w.document, updated_at=NOW) for c in w.chunks]
    budget = ops[0].size + ops[2].size  # the two small ones would fit together; the big one not
    cluster = BulkCluster()
    with bulk_cluster(cluster) as es:
        report = run_bulk(es, ops, max_count=10, max_bytes=budget)
    assert cluster.requests == [[c.chunk_id] for c in w.chunks]
    assert report.written == {w.document.doc_id: 3}
    with pytest.raises(ValueError):
        run_bulk(es, ops, max_count=0, max_bytes=1)


def test_a_request_refused_whole_fails_its_own_documents_only() -> None:
    # Elasticsearch refuses a body over http.max_content_length with a 413 for the request
    big = make_write("web:demo", "big.html", ["big " * 200])
    small = make_write("web:demo", "small.html", ["small"])
    ops = [index_op("idx", w.chunks[0], w.document, updated_at=NOW) for w in (big, small)]
    cluster = BulkCluster(max_content_length=ops[0].size - 1)
    with bulk_cluster(cluster) as es:
        report = run_bulk(es, ops, max_count=1, max_bytes=1 << 20)
    assert len(cluster.requests) == 2  # a 413 is not retried
    [error] = report.errors[big.document.doc_id]
    assert error.startswith(f"index {big.chunks[0].chunk_id}: 413")
    assert report.written == {small.document.doc_id: 1} and small.document.doc_id not in report.errors


# --------------------------------------------------------------------------- plans


def test_plan_skips_unchanged_chunks_and_orders_writes_before_deletes() -> None:
    old = make_write("web:demo", "a.html", ["one", "two", "three", "four"])
    new = make_write("web:demo", "a.html", ["one", "TWO!"], stale=[old.chunks[2].chunk_id])
    grown = make_write("web:demo", "b.html", ["b0"])
    ids = {old.document.doc_id: {c.chunk_id for c in old.chunks}}  # chunk 3 is stale but unlisted
    plan = plan_writes([new, grown], index="idx", existing=_stored(old), existing_ids=ids, updated_at=NOW)
    a, b = plan.docs
    assert (a.doc_id, a.unchanged, [o.chunk_id for o in a.index_ops]) == (
        new.document.doc_id,
        1,
        [new.chunks[1].chunk_id],
    )
    assert [o.chunk_id for o in a.delete_ops] == [old.chunks[2].chunk_id, old.chunks[3].chunk_id]
    assert (b.unchanged, len(b.index_ops), b.delete_ops) == (0, 1, [])
    # first wave: only writes (a has writes, so its deletes wait for them)
    assert [o.kind for o in plan.first_wave()] == ["index", "index"]
    assert [o.chunk_id for o in plan.second_wave(set())] == [old.chunks[2].chunk_id, old.chunks[3].chunk_id]
    # a document whose writes failed keeps its old chunks
    assert plan.second_wave({new.document.doc_id}) == []


def test_plan_sends_deletes_in_the_first_bulk_when_a_document_has_nothing_to_write() -> None:
    old = make_write("web:demo", "a.html", ["one", "two"])
    shrunk = make_write("web:demo", "a.html", ["one"], stale=[old.chunks[1].chunk_id])
    plan = plan_writes([shrunk], index="idx", existing=_stored(old, only=1), updated_at=NOW)
    assert [(o.kind, o.chunk_id) for o in plan.first_wave()] == [("delete", old.chunks[1].chunk_id)]
    assert plan.second_wave(set()) == []


def test_plan_never_deletes_a_chunk_it_keeps_and_rewrites_a_hash_mismatch() -> None:
    w = make_write("web:demo", "a.html", ["one", "two"], stale=[])
    w.stale_chunk_ids = [w.chunks[0].chunk_id]  # a confused caller
    stored = {w.chunks[0].chunk_id: ("other-hash", w.document.url, w.document.title)}
    plan = plan_writes([w], index="idx", existing=stored, updated_at=NOW)
    [d] = plan.docs
    assert d.delete_ops == [] and [o.chunk_id for o in d.index_ops] == [c.chunk_id for c in w.chunks]


def test_noop_reupsert_plans_nothing() -> None:
    w = make_write("web:demo", "a.html", ["one", "two"])
    stored = _stored(w)
    plan = plan_writes([w], index="idx", existing=stored, existing_ids={w.document.doc_id: set(stored)}, updated_at=NOW)
    assert plan.first_wave() == [] and plan.second_wave(set()) == [] and plan.docs[0].unchanged == 2


@pytest.mark.parametrize("moved", ["url", "title"])
def test_plan_rewrites_unchanged_text_whose_document_moved(moved: str) -> None:
    # a Yuque slug rename or TOC move: same chunks, new URL (or title); SQLite rewrites them too
    old = make_write("yuque:kb", "42/1001", ["one", "two"], title="Old title")
    new = make_write("yuque:kb", "42/1001", ["one", "two"], title="Old title")
    setattr(new.document, moved, "http://127.0.0.1/team/renamed/doc" if moved == "url" else "New title")
    [d] = plan_writes([new], index="idx", existing=_stored(old), updated_at=NOW).docs
    assert (d.unchanged, [o.chunk_id for o in d.index_ops]) == (0, [c.chunk_id for c in new.chunks])
    assert {_lines(o)[1][moved] for o in d.index_ops} == {getattr(new.document, moved)}


def test_stored_stamp_reads_what_build_chunk_source_stores() -> None:
    w = make_write("web:demo", "a.html", ["one"], title="")
    w.document.url = None
    src = build_chunk_source(w.chunks[0], w.document, updated_at=NOW)
    assert stored_stamp(src) == chunk_stamp(w.chunks[0], w.document) == (w.chunks[0].text_hash, None, "")


def _stored(write: Any, only: int | None = None) -> dict[str, tuple[Any, ...]]:
    """What ``_existing_stamps`` reads back for ``write`` once indexed (its first ``only`` chunks)."""
    doc = write.document
    sources = [build_chunk_source(c, doc, updated_at=NOW) for c in write.chunks[:only]]
    return {src["chunk_id"]: stored_stamp(src) for src in sources}


# --------------------------------------------------------------------------- responses


def _item(action: str, status: int, error_type: str | None = None, result: str | None = None) -> dict[str, Any]:
    info: dict[str, Any] = {"_index": "idx", "_id": "x", "status": status}
    if error_type:
        info["error"] = {"type": error_type, "reason": f"{error_type} happened"}
    if result:
        info["result"] = result
    return {action: info}


@pytest.mark.parametrize(
    ("item", "ok", "deleted"),
    [
        (_item("index", 201, result="created"), True, False),
        (_item("index", 200, result="updated"), True, False),
        (_item("delete", 200, result="deleted"), True, True),
        (_item("delete", 404, result="not_found"), True, False),
        (_item("index", 429, "es_rejected_execution_exception"), False, False),
        (_item("index", 400, "document_parsing_exception"), False, False),
        (_item("index", 409, "version_conflict_engine_exception"), False, False),
    ],
)
def test_classify_bulk_items(item: dict[str, Any], ok: bool, deleted: bool) -> None:
    out = classify_item(item)
    assert (out.ok, out.deleted) == (ok, deleted)
    if not ok:
        info = next(iter(item.values()))
        assert out.error == f"{info['status']} {info['error']['type']}: {info['error']['reason']}"


def test_classify_a_failed_requests_item_copy() -> None:
    # streaming_bulk's item for an action whose whole request failed: the error is a string
    out = classify_item({"index": {"_id": "x", "status": 413, "error": "ApiError(413, 'request too large')"}})
    assert (out.ok, out.error) == (False, "413 ApiError(413, 'request too large')")


def test_run_bulk_retries_rejected_items_with_backoff_until_they_land() -> None:
    w = make_write("web:demo", "a.html", ["a", "b", "c"])
    ops = [index_op("idx", c, w.document, updated_at=NOW) for c in w.chunks]
    a, b, c = (ch.chunk_id for ch in w.chunks)
    cluster = BulkCluster({b: [429, 503], c: [429]})
    with bulk_cluster(cluster) as es:
        report = run_bulk(es, ops, max_count=2, max_bytes=1 << 20, initial_backoff=0.01)
    assert report.errors == {}
    assert report.written == {w.document.doc_id: 3}
    # two requests (count bound 2); each is retried, with only its rejected items, before the next
    assert cluster.requests == [[a, b], [b], [b], [c], [c]]


def test_run_bulk_reports_items_that_never_land_and_hard_failures_per_document() -> None:
    a = make_write("web:demo", "a.html", ["a0", "a1"])
    b = make_write("web:demo", "b.html", ["b0"])
    ops = [index_op("idx", c, w.document, updated_at=NOW) for w in (a, b) for c in w.chunks]
    ops.append(delete_op("idx", b.document.doc_id, "gone-00009"))
    ops.append(delete_op("idx", b.document.doc_id, "never-there-00010"))
    cluster = BulkCluster({a.chunks[1].chunk_id: [429] * 10, b.chunks[0].chunk_id: [400], "never-there-00010": [404]})
    with bulk_cluster(cluster) as es:
        report = run_bulk(es, ops, max_count=100, max_bytes=1 << 20, max_attempts=3, initial_backoff=0.01)
    assert report.written == {a.document.doc_id: 1}
    assert report.deleted == {b.document.doc_id: 1}  # the 404 is done, but removed nothing
    assert list(report.errors) == [b.document.doc_id, a.document.doc_id]
    assert "document_parsing_exception" in report.errors[b.document.doc_id][0]
    assert "429 es_rejected_execution_exception" in report.errors[a.document.doc_id][0]
    assert cluster.seen[a.chunks[1].chunk_id] == 3  # max_attempts, then reported
    assert cluster.seen[b.chunks[0].chunk_id] == 1  # a 400 is not retried


def test_run_bulk_reports_a_malformed_response_instead_of_guessing() -> None:
    w = make_write("web:demo", "a.html", ["a", "b"])
    ops = [index_op("idx", c, w.document, updated_at=NOW) for c in w.chunks]
    with bulk_cluster(BulkCluster(answer_items=False)) as es:
        report = run_bulk(es, ops, max_count=10, max_bytes=1 << 20)
    assert report.written == {}
    assert [e.split(": ", 1)[1] for e in report.errors[w.document.doc_id]] == [
        "no answer for it in the bulk response"
    ] * 2


def test_a_dropped_connection_is_retried_by_the_transport() -> None:
    w = make_write("web:demo", "a.html", ["a0"])
    cluster = BulkCluster(drop_requests={1})
    with bulk_cluster(cluster) as es:
        report = run_bulk(
            es, [index_op("idx", w.chunks[0], w.document, updated_at=NOW)], max_count=1, max_bytes=1 << 20
        )
    assert report.written == {w.document.doc_id: 1} and report.errors == {}
    assert len(cluster.requests) == 2


def test_a_cluster_lost_mid_stream_fails_every_op_not_yet_answered() -> None:
    a, b, c = (make_write("web:demo", f"{n}.html", [f"{n}0"]) for n in "abc")
    ops = [index_op("idx", w.chunks[0], w.document, updated_at=NOW) for w in (a, b, c)]
    cluster = BulkCluster(drop_requests={2, 3, 4})  # the second request, and both its retries
    with bulk_cluster(cluster, max_attempts=3) as es:
        report = run_bulk(es, ops, max_count=1, max_bytes=1 << 20)
    assert report.written == {a.document.doc_id: 1} and a.document.doc_id not in report.errors
    assert len(cluster.requests) == 4  # c is never sent: the cluster is gone
    for w in (b, c):
        [error] = report.errors[w.document.doc_id]
        assert "bulk request failed: ConnectionError" in error


def test_an_unreachable_cluster_fails_every_op() -> None:
    w = make_write("web:demo", "a.html", ["a0", "a1"])
    ops = [index_op("idx", c, w.document, updated_at=NOW) for c in w.chunks]
    base = Elasticsearch(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    es = bulk_client(base, max_attempts=2, initial_backoff=0.01, max_backoff=0.05)
    report = run_bulk(es, ops, max_count=1, max_bytes=1 << 20)
    base.close()
    assert report.written == {} and len(report.errors[w.document.doc_id]) == 2


# --------------------------------------------------------------------------- request-level retries


def _api_error(cls: type[ApiError], status: int, error_type: str) -> ApiError:
    meta = ApiResponseMeta(
        status=status,
        http_version="1.1",
        headers=HttpHeaders(),
        duration=0.0,
        node=NodeConfig("http", "127.0.0.1", 9200),
    )
    return cls(message=error_type, meta=meta, body={"error": {"type": error_type, "reason": "r"}, "status": status})


def test_request_level_retry_rules() -> None:
    assert _retryable(ConnectionError("refused"))
    assert _retryable(_api_error(ApiError, 429, "es_rejected_execution_exception"))
    assert _retryable(_api_error(ApiError, 503, "unavailable_shards_exception"))
    assert _retryable(_api_error(ApiError, 502, "bad_gateway"))
    assert not _retryable(_api_error(BadRequestError, 400, "illegal_argument_exception"))
    assert not _retryable(ValueError("bug"))


# --------------------------------------------------------------------------- indexes from before the rename


def _legacy_source(write: Any) -> dict[str, Any]:
    """A chunk's ``_source`` as releases before the rename stored it (the text hash as content_hash)."""
    src = build_chunk_source(write.chunks[0], write.document, updated_at=NOW)
    src[LEGACY_TEXT_HASH_FIELD] = src.pop("text_hash")
    return src


def test_a_chunk_stored_under_the_old_field_is_rewritten_once_under_the_new_one() -> None:
    w = make_write("web:demo", "a.html", ["one"])
    stored = {w.chunks[0].chunk_id: stored_stamp(_legacy_source(w))}
    [d] = plan_writes([w], index="idx", existing=stored, updated_at=NOW).docs
    assert d.unchanged == 0 and [o.chunk_id for o in d.index_ops] == [w.chunks[0].chunk_id]
    rewritten = _lines(d.index_ops[0])[1]
    assert rewritten["text_hash"] == w.chunks[0].text_hash and LEGACY_TEXT_HASH_FIELD not in rewritten
    # once rewritten, its stamp matches: the next upsert skips it
    again = {w.chunks[0].chunk_id: stored_stamp(rewritten)}
    assert plan_writes([w], index="idx", existing=again, updated_at=NOW).docs[0].unchanged == 1


def test_get_chunk_of_a_chunk_not_yet_rewritten_reads_the_old_field_as_text_hash() -> None:
    w = make_write("web:demo", "a.html", ["one"])
    rec = source_to_record(w.chunks[0].chunk_id, _legacy_source(w))
    assert rec["text_hash"] == w.chunks[0].text_hash and LEGACY_TEXT_HASH_FIELD not in rec
    assert rec["doc_content_hash"] == w.document.content_hash


def test_new_generations_map_the_new_name_only() -> None:
    # strict mapping: a new generation refuses the old field, so nothing writes it there again
    assert "text_hash" in MAPPED_FIELDS and LEGACY_TEXT_HASH_FIELD not in MAPPED_FIELDS
