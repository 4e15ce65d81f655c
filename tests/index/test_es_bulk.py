"""The Elasticsearch bulk builders: chunk documents, write plans, batching, response handling.

``run_bulk`` is exercised with a ``send`` function that answers the way Elasticsearch's bulk
API does (shape per the ES 9 docs): it plays the server's part deterministically so the retry
rules can be checked without a cluster. The same code runs against a real server in the
contract suite when ELASTICSEARCH_URL is set.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from elastic_transport import ApiResponseMeta, HttpHeaders, NodeConfig
from elasticsearch import ApiError, BadRequestError, ConnectionError

from include.contract import Position
from include.index._es_bulk import (
    BulkOp,
    batch_ops,
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
from include.index._es_client import _retryable
from tests.index.helpers import make_write

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


def _op(i: int, size: int) -> BulkOp:
    return BulkOp("delete", "d", f"c{i}", b"x" * (size - 1) + b"\n")


def test_batches_are_bounded_by_count_and_bytes_and_keep_order() -> None:
    ops = [_op(i, 100) for i in range(10)]
    by_count = list(batch_ops(ops, max_count=3, max_bytes=10_000))
    assert [len(b) for b in by_count] == [3, 3, 3, 1]
    by_bytes = list(batch_ops(ops, max_count=100, max_bytes=250))
    assert [len(b) for b in by_bytes] == [2] * 5
    assert [op.chunk_id for b in by_bytes for op in b] == [f"c{i}" for i in range(10)]
    assert all(sum(o.size for o in b) <= 250 for b in by_bytes)


def test_an_op_over_the_byte_budget_travels_alone_rather_than_vanishing() -> None:
    ops = [_op(0, 10), _op(1, 1000), _op(2, 10)]
    assert [[o.chunk_id for o in b] for b in batch_ops(ops, max_count=10, max_bytes=100)] == [["c0"], ["c1"], ["c2"]]
    assert list(batch_ops([], max_count=1, max_bytes=1)) == []
    with pytest.raises(ValueError):
        list(batch_ops(ops, max_count=0, max_bytes=1))


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
    assert stored_stamp(src) == chunk_stamp(w.chunks[0], w.document) == (w.chunks[0].content_hash, None, "")


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
    ("item", "ok", "retry", "deleted"),
    [
        (_item("index", 201, result="created"), True, False, False),
        (_item("index", 200, result="updated"), True, False, False),
        (_item("delete", 200, result="deleted"), True, False, True),
        (_item("delete", 404, result="not_found"), True, False, False),
        (_item("index", 429, "es_rejected_execution_exception"), False, True, False),
        (_item("index", 503, "unavailable_shards_exception"), False, True, False),
        (_item("index", 500, "internal_server_error"), False, True, False),
        (_item("index", 400, "document_parsing_exception"), False, False, False),
        (_item("index", 409, "version_conflict_engine_exception"), False, False, False),
    ],
)
def test_classify_bulk_items(item: dict[str, Any], ok: bool, retry: bool, deleted: bool) -> None:
    out = classify_item(item)
    assert (out.ok, out.retry, out.deleted) == (ok, retry, deleted)
    if not ok:
        assert out.error and str(next(iter(item.values()))["status"]) in out.error


class _Cluster:
    """Answers bulk bodies like ES: per-item status from a script keyed by chunk id and attempt."""

    def __init__(self, script: Mapping[str, list[int]]) -> None:
        self.script = script
        self.seen: dict[str, int] = {}
        self.requests: list[list[str]] = []

    def __call__(self, lines: list[bytes]) -> dict[str, Any]:
        items, ids = [], []
        for payload in lines:
            header = json.loads(payload.split(b"\n", 1)[0])
            ((action, meta),) = header.items()
            cid = meta["_id"]
            ids.append(cid)
            n = self.seen.get(cid, 0)
            self.seen[cid] = n + 1
            statuses = self.script.get(cid, [])
            status = statuses[n] if n < len(statuses) else (201 if action == "index" else 200)
            err = {429: "es_rejected_execution_exception", 400: "document_parsing_exception", 503: "unavailable"}.get(
                status
            )
            items.append(_item(action, status, err, "deleted" if action == "delete" and status == 200 else None))
        self.requests.append(ids)
        return {"errors": any("error" in next(iter(i.values())) for i in items), "items": items}


def test_run_bulk_retries_rejected_items_with_backoff_until_they_land() -> None:
    w = make_write("web:demo", "a.html", ["a", "b", "c"])
    ops = [index_op("idx", c, w.document, updated_at=NOW) for c in w.chunks]
    cluster = _Cluster({w.chunks[1].chunk_id: [429, 503], w.chunks[2].chunk_id: [429]})
    sleeps: list[float] = []
    report = run_bulk(ops, cluster, max_count=2, max_bytes=1 << 20, sleep=sleeps.append, initial_backoff=1.0)
    assert report.errors == {}
    assert report.written == {w.document.doc_id: 3}
    # first pass in two bulks (count bound 2), then only the rejected items go again
    assert cluster.requests == [
        [w.chunks[0].chunk_id, w.chunks[1].chunk_id],
        [w.chunks[2].chunk_id],
        [w.chunks[1].chunk_id, w.chunks[2].chunk_id],
        [w.chunks[1].chunk_id],
    ]
    assert len(sleeps) == 2 and 0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 2.0  # exponential, jittered


def test_run_bulk_reports_items_that_never_land_and_hard_failures_per_document() -> None:
    a = make_write("web:demo", "a.html", ["a0", "a1"])
    b = make_write("web:demo", "b.html", ["b0"])
    ops = [index_op("idx", c, w.document, updated_at=NOW) for w in (a, b) for c in w.chunks]
    ops.append(delete_op("idx", b.document.doc_id, "gone-00009"))
    cluster = _Cluster({a.chunks[1].chunk_id: [429] * 10, b.chunks[0].chunk_id: [400]})
    report = run_bulk(ops, cluster, max_count=100, max_bytes=1 << 20, max_attempts=3, sleep=lambda s: None)
    assert report.written == {a.document.doc_id: 1}
    assert report.deleted == {b.document.doc_id: 1}
    assert list(report.errors) == [b.document.doc_id, a.document.doc_id]
    assert "document_parsing_exception" in report.errors[b.document.doc_id][0]
    assert "429 es_rejected_execution_exception" in report.errors[a.document.doc_id][0]
    assert cluster.seen[a.chunks[1].chunk_id] == 3  # max_attempts, then reported
    assert cluster.seen[b.chunks[0].chunk_id] == 1  # a 400 is not retried


def test_run_bulk_reports_a_malformed_response_instead_of_guessing() -> None:
    w = make_write("web:demo", "a.html", ["a", "b"])
    ops = [index_op("idx", c, w.document, updated_at=NOW) for c in w.chunks]
    report = run_bulk(ops, lambda lines: {"items": []}, max_count=10, max_bytes=1 << 20)
    assert len(report.errors[w.document.doc_id]) == 2 and report.written == {}


def test_run_bulk_turns_a_failed_request_into_failures_of_that_batchs_documents() -> None:
    a = make_write("web:demo", "a.html", ["a0"])
    b = make_write("web:demo", "b.html", ["b0"])
    ops = [index_op("idx", w.chunks[0], w.document, updated_at=NOW) for w in (a, b)]
    calls: list[int] = []

    def send(lines: list[bytes]) -> dict[str, Any]:
        calls.append(len(lines))
        if len(calls) == 1:
            raise ConnectionError("connection refused")
        return _Cluster({})(lines)

    report = run_bulk(ops, send, max_count=1, max_bytes=1 << 20)
    assert "bulk request failed: ConnectionError" in report.errors[a.document.doc_id][0]
    assert report.written == {b.document.doc_id: 1} and b.document.doc_id not in report.errors


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
