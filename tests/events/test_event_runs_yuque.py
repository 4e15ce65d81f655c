"""Runs started by Yuque webhooks (issue 37, point 3), in-process against the simulator: events
stored as the receiver stores them, re-read by one run that reads the named docs' details
(``plugins.connectors.yuque.named``) without listing a repo; a doc whose detail answers 404 in a
repo that still answers is an explicit deletion (mass-delete guarded), never on the event's word
alone, and anything undecided (a 403, a 5xx, a doc never indexed) lists the repos as any run."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from include.config import SourceConfig
from include.contract import document_id
from include.index import open_index
from include.stores import open_state_store
from include.stores.events import EventHint, EventStore
from plugins.connectors.yuque.named import GONE_REASON
from plugins.connectors.yuque.versions import revision_parts
from plugins.engine import MassDeleteError, run_pipeline
from tests.yuque.conftest import sim, yuque_conn, yuque_source, yuque_url  # noqa: F401  # the Yuque fixtures

EVENTS = {"mode": "callback", "debounce_seconds": 0}


@pytest.fixture
def space(sim: Any, yuque_conn: str, tributary_home: Any) -> tuple[Any, dict[str, Any]]:  # noqa: F811
    kb = sim.add_repo("alice", "kb", "知识库")
    docs = {
        "guide": sim.add_doc(kb, "入职指南", body="# 入职指南\n\n新同事第一天请到前台领取工牌。", toc_path=["入门"]),
        "notice": sim.add_doc(kb, "停电公告", body="# 停电公告\n\n周五晚上机房检修停电。"),
        "faq": sim.add_doc(kb, "常见问题", body="# 常见问题\n\n报销请找财务。", toc_path=["入门", "财务"]),
        "rules": sim.add_doc(kb, "值班规则", body="# 值班规则\n\n每周轮换。"),
        "wifi": sim.add_doc(kb, "无线网络", body="# 无线网络\n\n访客网络每天换密码。"),
        "lunch": sim.add_doc(kb, "午餐", body="# 午餐\n\n食堂十二点开门。"),
    }
    return sim, docs


def _source(name: str = "kb", **options: Any) -> SourceConfig:
    source = yuque_source(name, **options)
    return source.model_copy(update={"events": source.events.model_copy(update=EVENTS)})


def _key(space_sim: Any, doc: Any) -> str:
    repo = next(r for r in space_sim.repos.values() if doc.id in r.docs)
    return f"{repo.id}/{doc.id}"


def _paths(space_sim: Any, start: int) -> Counter[str]:
    """The requests since ``start`` by route (ids replaced), ``?deleted`` listings apart."""
    out: Counter[str] = Counter()
    for request in space_sim.requests[start:]:
        parts = request["path"].split("/")
        parts = ["{id}" if p.isdigit() else p for p in parts]
        if parts[:2] == ["repos", "alice"]:
            parts[1:3] = ["{ns}"]
        out["/".join(parts) + ("?deleted" if request["query"].get("deleted") else "")] += 1
    return out


def _listings(paths: Counter[str]) -> int:
    return sum(n for p, n in paths.items() if p.endswith("/repos") or p.split("?")[0].endswith("/docs"))


def _search(source: SourceConfig, query: str) -> set[str]:
    index = open_index(source.index)
    try:
        return {hit.doc_id for hit in index.search(query, k=20, source=source.source_id)}
    finally:
        index.close()


def _event_run(source: SourceConfig, hints: list[EventHint], **params: Any) -> Any:
    state = open_state_store()
    try:
        events = EventStore(state)
        events.record(source.source_id, hints)
        batch = events.claim_due(source.source_id, "sync", debounce_s=0, lease_s=900)
        assert batch is not None
        return run_pipeline(source, params or None, event_batches=[batch.batch_id])
    finally:
        state.close()


def test_update_and_delete_webhooks_re_read_only_those_docs(space: tuple[Any, dict[str, Any]]) -> None:
    simulator, docs = space
    source = _source()
    sid = source.source_id
    assert run_pipeline(source).counts["new"] == 6
    simulator.edit_doc(docs["guide"], body="# 入职指南\n\nwebhookdelta 第一天先去找导师。")
    simulator.delete_doc(docs["notice"])
    guide, notice = _key(simulator, docs["guide"]), _key(simulator, docs["notice"])
    start = len(simulator.requests)
    state = open_state_store()
    try:
        events = EventStore(state)
        events.record(
            sid, [EventHint("yq-1", guide, "changed", "update"), EventHint("yq-2", notice, "deleted", "delete")]
        )
        batch = events.claim_due(sid, "sync", debounce_s=0, lease_s=900)
        assert batch is not None
        summary = run_pipeline(source, event_batches=[batch.batch_id])
        paths = _paths(simulator, start)
        assert _listings(paths) == 0  # no repo listed, no doc listing, no tombstone listing
        # the repo's detail and TOC once; the edited doc's detail at discovery and at fetch; the
        # deleted one's 404 under its repo and by its global id; /user: each task's budget binding
        assert paths == {
            "user": 2,
            "repos/{id}": 1,
            "repos/{ns}/toc": 1,
            "repos/{id}/docs/{id}": 3,
            "repos/docs/{id}": 1,
        }
        assert simulator.counters[f"doc:{docs['guide'].id}"] == 2 + 1  # + its first indexing
        assert (summary.counts["changed"], summary.counts["deleted"], summary.counts["new"]) == (1, 1, 0)
        assert _search(source, "webhookdelta") == {document_id(sid, guide)}
        assert _search(source, "机房检修") == set()
        assert _search(source, "报销") == {document_id(sid, _key(simulator, docs["faq"]))}  # untouched
        assert {i["item_key"]: i["reason"] for i in state.run_items(summary.run_id, "deleted", sid)} == {
            notice: GONE_REASON
        }
        run = state.get_run(summary.run_id, sid)
        assert run is not None and run["params"]["trigger"]["event_ids"] == ["yq-1", "yq-2"]
        assert run["counts"]["source_stats"]["docs_by_detail"] == 2
        assert events.batches([batch.batch_id])[0].run_id == summary.run_id
    finally:
        state.close()


def test_a_delete_webhook_for_a_doc_still_there_deletes_nothing(space: tuple[Any, dict[str, Any]]) -> None:
    """Yuque signs nothing: a forged "delete" is a hint, re-checked against the API."""
    simulator, docs = space
    source = _source()
    run_pipeline(source)
    start = len(simulator.requests)
    summary = _event_run(source, [EventHint("forged", _key(simulator, docs["faq"]), "deleted", "delete")])
    assert _listings(_paths(simulator, start)) == 0
    assert summary.counts["deleted"] == 0
    assert _search(source, "报销") == {document_id(source.source_id, _key(simulator, docs["faq"]))}


def test_404s_delete_through_the_mass_delete_guard(space: tuple[Any, dict[str, Any]]) -> None:
    simulator, docs = space
    source = _source()
    run_pipeline(source)
    doomed = [docs[k] for k in ("guide", "notice", "faq", "rules")]
    for doc in doomed:
        simulator.delete_doc(doc)
    hints = [EventHint(f"del-{d.id}", _key(simulator, d), "deleted", "delete") for d in doomed]
    with pytest.raises(MassDeleteError):
        _event_run(source, hints)
    assert _search(source, "报销") == {document_id(source.source_id, _key(simulator, docs["faq"]))}
    state = open_state_store()
    try:
        later = EventStore(state).claim_due(source.source_id, "sync", debounce_s=0, lease_s=900)
        assert later is None  # the failed run's batch stays claimed until its lease lapses
    finally:
        state.close()
    allowed = _event_run(source, [EventHint(f"again-{d.id}", _key(simulator, d), "deleted", "delete") for d in doomed],
                         allow_mass_delete=True)  # fmt: skip
    assert allowed.counts["deleted"] == 4
    assert _search(source, "报销 OR 轮换 OR 机房检修 OR 工牌") == set()
    assert _search(source, "食堂") == {document_id(source.source_id, _key(simulator, docs["lunch"]))}


def test_a_doc_moved_to_another_repo_is_renamed_by_the_walk_not_deleted(space: tuple[Any, dict[str, Any]]) -> None:
    """Its detail answers 404 under the old repo, but its global id answers: the walk decides."""
    simulator, docs = space
    other = simulator.add_repo("alice", "ops", "运维")
    source = _source()
    run_pipeline(source)
    indexed = document_id(source.source_id, _key(simulator, docs["rules"]))
    old_key = _key(simulator, docs["rules"])
    simulator.move_doc_to_repo(docs["rules"], other)
    start = len(simulator.requests)
    summary = _event_run(source, [EventHint("mv", old_key, "deleted", "delete")])
    assert _listings(_paths(simulator, start)) > 0  # listed
    assert summary.counts["deleted"] == 0
    assert _search(source, "轮换") == {indexed}  # the same document, under its new key


@pytest.mark.parametrize("status", [403, 500])
def test_a_refused_or_failing_detail_deletes_nothing_and_lists_the_repos(
    space: tuple[Any, dict[str, Any]], status: int
) -> None:
    simulator, docs = space
    source = _source()
    run_pipeline(source)
    simulator.doc_errors[docs["notice"].id] = status  # every read of it fails, retries too
    start = len(simulator.requests)
    summary = _event_run(source, [EventHint("yq-del", _key(simulator, docs["notice"]), "deleted", "delete")])
    assert _listings(_paths(simulator, start)) > 0  # undecided by its detail: the repos were listed
    assert summary.counts["deleted"] == 0
    assert _search(source, "机房检修") == {document_id(source.source_id, _key(simulator, docs["notice"]))}


def test_a_doc_never_indexed_is_found_by_the_walk(space: tuple[Any, dict[str, Any]]) -> None:
    """A publish webhook for a new doc: whether its repo belongs to the source is the walk's to say."""
    simulator, docs = space
    source = _source()
    run_pipeline(source)
    kb = next(r for r in simulator.repos.values() if docs["guide"].id in r.docs)
    fresh = simulator.add_doc(kb, "新文档", body="# 新文档\n\nfreshgamma 刚发布。")
    start = len(simulator.requests)
    summary = _event_run(source, [EventHint("pub", _key(simulator, fresh), "created", "publish")])
    assert _listings(_paths(simulator, start)) > 0
    assert summary.counts["new"] == 1
    assert _search(source, "freshgamma") == {document_id(source.source_id, _key(simulator, fresh))}


def _item_view(source: SourceConfig, key: str) -> dict[str, Any]:
    """What a run left of one item, less what names the source or the run: its state (version
    without the listing stamps), its chunks' texts, headings, titles, URLs and permissions."""
    state = open_state_store()
    index = open_index(source.index)
    try:
        st = state.items(source.source_id)[key]
        parts = revision_parts(st.version.revision if st.version else None)
        chunks = []
        for chunk_id in sorted(st.chunk_ids):
            chunk = index.get_chunk(chunk_id)
            assert chunk is not None
            chunks.append({k: chunk.get(k) for k in ("text", "heading_path", "title", "url", "access")})
        return {
            "modified_time": st.version.modified_time if st.version else None,
            "revision": {k: parts.get(k) for k in ("u", "p", "t")},
            "title": st.title,
            "url": st.url,
            "content_hash": st.content_hash,
            "chunks": chunks,
        }
    finally:
        index.close()
        state.close()


def _actions(source: SourceConfig, run_id: str, keys: set[str]) -> dict[str, str]:
    state = open_state_store()
    try:
        return {
            i["item_key"]: i["action"] for i in state.run_items(run_id, None, source.source_id) if i["item_key"] in keys
        }
    finally:
        state.close()


def test_a_named_run_leaves_what_a_full_run_leaves(space: tuple[Any, dict[str, Any]]) -> None:
    """Two sources over one space: one re-reads the edited docs by their details, the other lists
    everything (a scheduled run); both end with the same items, chunks and lineage for them."""
    simulator, docs = space
    named, full = _source("kb"), _source("kbfull")
    run_pipeline(named)
    run_pipeline(full)
    simulator.edit_doc(docs["guide"], body="# 入职指南\n\nsamedelta 先去找导师。")
    simulator.edit_meta(docs["faq"], slug="faq-2026", title="常见问题（新）")  # a URL and title change
    simulator.move_doc(docs["wifi"], ["入门", "网络"])  # a TOC move: a new heading path
    simulator.delete_doc(docs["notice"])
    keys = {_key(simulator, docs[k]) for k in ("guide", "faq", "wifi", "notice")}
    start = len(simulator.requests)
    by_event = _event_run(named, [EventHint(f"ev-{k}", k, "changed", "update") for k in sorted(keys)])
    assert _listings(_paths(simulator, start)) == 0
    by_poll = run_pipeline(full)
    for key in keys - {_key(simulator, docs["notice"])}:
        assert _item_view(named, key) == _item_view(full, key)
    assert _actions(named, by_event.run_id, keys) == _actions(full, by_poll.run_id, keys)
    for source in (named, full):
        assert _search(source, "samedelta") == {document_id(source.source_id, _key(simulator, docs["guide"]))}
        assert _search(source, "机房检修") == set()
        assert _key(simulator, docs["notice"]) not in open_state_store().items(source.source_id)


def test_a_lakesheet_or_a_repo_outside_the_namespaces_is_left_to_the_walk(space: tuple[Any, dict[str, Any]]) -> None:
    simulator, docs = space
    kb = next(r for r in simulator.repos.values() if docs["guide"].id in r.docs)
    sheet = simulator.add_doc(
        kb, "预算表", format="lakesheet", sheets=[{"name": "2026", "index": 0, "data": {"0": {"0": {"v": "服务器"}}}}]
    )
    source = _source(namespaces=["alice/kb"])
    run_pipeline(source)
    simulator.edit_doc(docs["guide"], body="# 入职指南\n\nnsdelta")
    start = len(simulator.requests)
    assert (
        _event_run(source, [EventHint("g", _key(simulator, docs["guide"]), "changed", "update")]).counts["changed"] == 1
    )
    assert _listings(_paths(simulator, start)) == 0  # a configured namespace: read by its details

    start = len(simulator.requests)
    summary = _event_run(source, [EventHint("s", _key(simulator, sheet), "changed", "update")])
    assert _listings(_paths(simulator, start)) > 0  # the sheet, unedited, is re-read from the walk
    assert summary.counts["unchanged"] + summary.counts["changed"] == 1

    simulator.rename_repo(kb, "kb-2026")  # its namespace is no longer the configured one
    start = len(simulator.requests)
    summary = _event_run(source, [EventHint("r", _key(simulator, docs["faq"]), "deleted", "delete")])
    assert simulator.counters["repos"] == 0 and _paths(simulator, start)["repos/{ns}"] == 1  # walked: 404
    assert summary.counts["deleted"] == 0 and summary.counts["changed"] == 0
    assert _search(source, "报销") == {document_id(source.source_id, _key(simulator, docs["faq"]))}
