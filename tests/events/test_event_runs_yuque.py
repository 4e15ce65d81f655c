"""Runs started by Yuque webhooks (issue 37, point 3), in-process against the simulator: a
publish/update and a delete, stored as the receiver stores them, re-read by one run that fetches
only the named docs; the deleted one leaves through the listing's tombstone (an explicit
deletion, mass-delete guarded), never on the event's word alone."""

from __future__ import annotations

from typing import Any

import pytest

from include.contract import document_id
from include.index import open_index
from include.stores import open_state_store
from include.stores.events import EventHint, EventStore
from plugins.engine import run_pipeline
from tests.yuque.conftest import sim, yuque_conn, yuque_source, yuque_url  # noqa: F401  # the Yuque fixtures

EVENTS = {"mode": "callback", "debounce_seconds": 0}


@pytest.fixture
def space(sim: Any, yuque_conn: str, tributary_home: Any) -> tuple[Any, dict[str, Any]]:  # noqa: F811
    kb = sim.add_repo("alice", "kb", "知识库")
    docs = {
        "guide": sim.add_doc(kb, "入职指南", body="# 入职指南\n\n新同事第一天请到前台领取工牌。"),
        "notice": sim.add_doc(kb, "停电公告", body="# 停电公告\n\n周五晚上机房检修停电。"),
        "faq": sim.add_doc(kb, "常见问题", body="# 常见问题\n\n报销请找财务。"),
        "rules": sim.add_doc(kb, "值班规则", body="# 值班规则\n\n每周轮换。"),
        "wifi": sim.add_doc(kb, "无线网络", body="# 无线网络\n\n访客网络每天换密码。"),
        "lunch": sim.add_doc(kb, "午餐", body="# 午餐\n\n食堂十二点开门。"),
    }
    return sim, docs


def _key(space_sim: Any, doc: Any) -> str:
    repo = next(r for r in space_sim.repos.values() if doc.id in r.docs)
    return f"{repo.id}/{doc.id}"


def _doc_fetches(space_sim: Any) -> int:
    return sum(n for name, n in space_sim.counters.items() if name.startswith("doc:"))


def _search(source: Any, query: str) -> set[str]:
    index = open_index(source.index)
    try:
        return {hit.doc_id for hit in index.search(query, k=20, source=source.source_id)}
    finally:
        index.close()


def test_update_and_delete_webhooks_re_read_only_those_docs(space: tuple[Any, dict[str, Any]]) -> None:
    simulator, docs = space
    source = yuque_source()
    source = source.model_copy(update={"events": source.events.model_copy(update=EVENTS)})
    sid = source.source_id
    assert run_pipeline(source).counts["new"] == 6
    simulator.edit_doc(docs["guide"], body="# 入职指南\n\nwebhookdelta 第一天先去找导师。")
    simulator.delete_doc(docs["notice"])
    state = open_state_store()
    try:
        events = EventStore(state)
        events.record(
            sid,
            [
                EventHint("yq-1", _key(simulator, docs["guide"]), "changed", "update"),
                EventHint("yq-2", _key(simulator, docs["notice"]), "deleted", "delete"),
            ],
        )
        batch = events.claim_due(sid, "sync", debounce_s=0, lease_s=900)
        assert batch is not None
        fetches = _doc_fetches(simulator)
        summary = run_pipeline(source, event_batches=[batch.batch_id])
        assert (summary.counts["changed"], summary.counts["deleted"], summary.counts["new"]) == (1, 1, 0)
        assert _doc_fetches(simulator) - fetches == 1  # the updated doc alone is fetched
        assert _search(source, "webhookdelta") == {document_id(sid, _key(simulator, docs["guide"]))}
        assert _search(source, "机房检修") == set()
        assert _search(source, "报销") == {document_id(sid, _key(simulator, docs["faq"]))}  # untouched
        run = state.get_run(summary.run_id, sid)
        assert run is not None and run["params"]["trigger"]["event_ids"] == ["yq-1", "yq-2"]
        assert events.batches([batch.batch_id])[0].run_id == summary.run_id
    finally:
        state.close()


def test_a_delete_webhook_for_a_doc_still_there_deletes_nothing(space: tuple[Any, dict[str, Any]]) -> None:
    """Yuque signs nothing: a forged "delete" is a hint, re-checked against the API."""
    simulator, docs = space
    source = yuque_source()
    source = source.model_copy(update={"events": source.events.model_copy(update=EVENTS)})
    run_pipeline(source)
    state = open_state_store()
    try:
        events = EventStore(state)
        events.record(source.source_id, [EventHint("forged", _key(simulator, docs["faq"]), "deleted", "delete")])
        batch = events.claim_due(source.source_id, "sync", debounce_s=0, lease_s=900)
        assert batch is not None
        summary = run_pipeline(source, event_batches=[batch.batch_id])
    finally:
        state.close()
    assert summary.counts["deleted"] == 0
    assert _search(source, "报销") == {document_id(source.source_id, _key(simulator, docs["faq"]))}
