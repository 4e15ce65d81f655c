"""Yuque -> engine -> SQLite FTS index, in-process (``run_pipeline``), against the simulator."""

from __future__ import annotations

import logging

import openpyxl
import pytest

from include.contract import document_id
from include.index import open_index
from include.stores import open_state_store
from plugins.engine import run_pipeline
from tests.yuque.conftest import TOKEN, yuque_source
from tests.yuque.sheet_models import GOLDEN


@pytest.fixture
def space(sim, yuque_conn, tributary_home):
    kb = sim.add_repo("alice", "kb", "知识库")
    notes = sim.add_repo("alice", "notes", "笔记")
    docs = {
        "md": sim.add_doc(kb, "入职指南", body="# 入职指南\n\n新同事第一天请到前台领取工牌。", toc_path=["入门"]),
        "html": sim.add_doc(kb, "停电公告", format="html", body="<h1>停电公告</h1><p>周五晚上机房检修停电。</p>"),
        "sheet": sim.add_doc(kb, "销售表", format="lakesheet", sheets=GOLDEN),
        "table": sim.add_doc(
            kb,
            "任务表",
            format="laketable",
            columns=[{"id": "c1", "name": "任务", "type": "text"}, {"id": "c2", "name": "负责人", "type": "text"}],
            records=[["整理报销单据", "小王"], ["更新值班表", "小李"]],
        ),
        "lake": sim.add_doc(notes, "随记", format="lake", body="会议纪要：下季度预算需要在月底前提交。"),
    }
    return sim, docs


def _key(sim, doc) -> str:
    repo = next(r for r in sim.repos.values() if doc.id in r.docs)
    return f"{repo.id}/{doc.id}"


def _search(source, query: str) -> set[str]:
    index = open_index(source.index)
    try:
        return {hit.doc_id for hit in index.search(query, k=20, source=source.source_id)}
    finally:
        index.close()


def _doc_fetches(sim) -> int:
    return sum(n for name, n in sim.counters.items() if name.startswith("doc:"))


def test_full_sync_then_no_change_edit_and_delete(space):
    sim, docs = space
    source = yuque_source()
    sid = source.source_id
    ids = {name: document_id(sid, _key(sim, d)) for name, d in docs.items()}

    first = run_pipeline(source)
    assert first.status == "success"
    assert (first.counts["new"], first.counts["failed"], first.counts["deleted"]) == (5, 0, 0)
    assert first.counts["listing_complete"] is True
    assert _search(source, "工牌") == {ids["md"]}
    assert _search(source, "检修") == {ids["html"]}
    assert _search(source, "苹果") == {ids["sheet"]}  # a cell of the rebuilt lakesheet
    assert _search(source, "报销") == {ids["table"]}
    assert _search(source, "预算") == {ids["lake"]}
    index = open_index(source.index)
    html_chunks = index.chunk_ids(source=sid, doc_id=ids["html"])
    index.close()
    assert html_chunks
    # the rebuilt lakesheet workbook stays in staging for audit, named in the lineage
    store = open_state_store()
    try:
        sheet_item = next(i for i in store.run_items(first.run_id) if i["doc_id"] == ids["sheet"])
    finally:
        store.close()
    workbook = openpyxl.load_workbook(sheet_item["staged_path"])
    assert any("苹果" in str(c.value) for ws in workbook.worksheets for row in ws.iter_rows() for c in row)

    # no change: one listing per repo, no document body, nothing written
    sim.reset_counters()
    second = run_pipeline(source)
    assert (second.counts["new"], second.counts["changed"], second.counts["unchanged"]) == (0, 0, 5)
    assert second.counts["fetched"] == 0 and _doc_fetches(sim) == 0
    # one incremental listing, one tombstone listing and one TOC per repo
    assert sim.counters["docs"] == 2 and sim.counters["toc"] == 2

    # an edited doc is fetched and re-indexed alone
    sim.edit_doc(docs["md"], body="# 入职指南\n\n新同事第一天请到三楼人事处报到。")
    sim.reset_counters()
    third = run_pipeline(source)
    assert (third.counts["changed"], third.counts["unchanged"], third.counts["new"]) == (1, 4, 0)
    assert sim.counters[f"doc:{docs['md'].id}"] == 1 and _doc_fetches(sim) == 1
    assert _search(source, "人事处") == {ids["md"]} and _search(source, "工牌") == set()
    store = open_state_store()
    try:
        changed = store.run_items(third.run_id, "changed")
        assert [row["item_key"] for row in changed] == [_key(sim, docs["md"])]
    finally:
        store.close()

    # a deleted doc leaves the index (explicit tombstone from ?deleted=true)
    sim.delete_doc(docs["html"])
    fourth = run_pipeline(source)
    assert fourth.counts["deleted"] == 1 and fourth.counts["unchanged"] == 4
    assert _search(source, "检修") == set()
    index = open_index(source.index)
    try:
        assert index.count(source=sid, doc_id=ids["html"]) == 0
        remaining = index.chunk_ids(source=sid)
        assert remaining and not remaining & html_chunks
    finally:
        index.close()


def test_malformed_record_skipped_and_reported(space, caplog):
    sim, docs = space
    docs["html"].list_override = {"content_updated_at": 20260105}  # a number where a timestamp belongs
    source = yuque_source()
    with caplog.at_level(logging.WARNING):
        summary = run_pipeline(source)
    assert summary.status == "success" and summary.counts["new"] == 4 and summary.counts["failed"] == 0
    assert summary.counts["listing_complete"] is True
    key = _key(sim, docs["html"])
    assert any(key in r.getMessage() and "content_updated_at" in r.getMessage() for r in caplog.records)
    assert _search(source, "检修") == set()
    store = open_state_store()
    try:
        assert store.get_item(source.source_id, key) is None
    finally:
        store.close()
    # the record heals: the next run picks it up like any new doc
    docs["html"].list_override = None
    assert run_pipeline(source).counts["new"] == 1
    assert _search(source, "检修") == {document_id(source.source_id, key)}


def test_unsupported_format_recorded_with_reason(space):
    sim, _ = space
    board = sim.add_doc(next(iter(sim.repos.values())), "白板", format="board")
    summary = run_pipeline(yuque_source())
    assert summary.counts["new"] == 5 and summary.counts["failed"] == 1
    store = open_state_store()
    try:
        (failed,) = store.run_items(summary.run_id, "failed")
    finally:
        store.close()
    assert failed["item_key"] == _key(sim, board)
    assert failed["reason"] == "fetch: skipped: unsupported format board"


@pytest.mark.redis
def test_request_budget_counted_in_redis(sim, yuque_conn, tributary_home, redis_url, monkeypatch):
    import redis

    repo = sim.add_repo("alice", "kb", "知识库")
    for i in range(3):
        sim.add_doc(repo, f"文档{i}", body=f"第{i}篇正文。")
    monkeypatch.setenv("TRIBUTARY_REDIS_URL", redis_url)
    assert run_pipeline(yuque_source()).counts["new"] == 3
    client = redis.Redis.from_url(redis_url)
    try:
        keys = sorted(client.keys("tributary:yuque:budget:*"))
        # one hourly count and one send schedule, both of alice's *account* (Yuque's limit is per
        # account, not per token); the token appears nowhere
        user_id = sim.accounts["alice"]["id"]
        assert [k.decode().rsplit(":", 1)[0] for k in keys] == [f"tributary:yuque:budget:account:{user_id}"] * 2
        assert not any(TOKEN.encode() in k for k in keys)
        (count_key,) = [k for k in keys if not k.endswith(b":pace")]
        assert int(client.get(count_key)) == sim.counters["requests"] > 0
    finally:
        client.close()


def test_doc_absent_from_complete_listing_is_deleted(sim, yuque_conn, tributary_home):
    repo = sim.add_repo("alice", "kb", "知识库")
    docs = [sim.add_doc(repo, f"文档{i}", body=f"第{i}篇正文，编号 doc{i}x。") for i in range(6)]
    source = yuque_source(deleted_listing=False)  # only the complete walk can tell
    assert run_pipeline(source).counts["new"] == 6
    del repo.docs[docs[2].id]  # gone without a tombstone
    summary = run_pipeline(source)
    assert summary.counts["deleted"] == 1 and summary.counts["unchanged"] == 5
    store = open_state_store()
    try:
        (row,) = store.run_items(summary.run_id, "deleted")
    finally:
        store.close()
    assert row["item_key"] == f"{repo.id}/{docs[2].id}" and "absent from 1 complete listing" in row["reason"]
    assert _search(source, "doc2x") == set() and _search(source, "doc3x")
