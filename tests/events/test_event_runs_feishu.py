"""Runs started by Feishu change events (issue 37, points 3, 5, 6), in-process against the
simulator: events stored as the receiver stores them (``EventStore.record``), coalesced into a
batch as the trigger claims it, and a run given that batch as its asset event names it.
"""

from __future__ import annotations

import datetime as dt

import pytest

from include.config import SourceConfig
from include.contract import document_id
from include.index import open_index
from include.stores import open_state_store
from include.stores.events import EventBatch, EventHint, EventStore
from plugins.engine import MassDeleteError, run_pipeline
from plugins.engine.permission_tasks import run_permission_sync
from tests.feishu.conftest import feishu_conn, sim, sim_url  # noqa: F401  # the Feishu fixtures
from tests.simulators.feishu import FeishuSimulator, demo_drive

# no slides: with slides synced a deletion is told apart only by a walk (plugins.connectors.feishu.named)
TYPES = ["doc", "docx", "sheet", "bitable", "file"]


def _source(root: str, **extra: object) -> SourceConfig:
    opts = {"folders": [root], "types": TYPES, "export_poll_interval": 0.05, "export_poll_max_interval": 0.2}
    return SourceConfig(
        kind="feishu",
        name="drive",
        conn_id="feishu_default",
        options=opts,
        batch_size=4,
        events={"mode": "callback", "debounce_seconds": 0},
        **extra,
    )


@pytest.fixture
def drive(sim: FeishuSimulator, feishu_conn: str, tributary_home) -> dict[str, str]:  # noqa: F811
    return demo_drive(sim)


@pytest.fixture
def events(tributary_home):
    state = open_state_store()
    yield EventStore(state)
    state.close()


def _hint(n: int, key: str, kind: str, event_type: str) -> EventHint:
    return EventHint(f"ev-{n}-{key}", key, kind, event_type)  # type: ignore[arg-type]


def _claim(events: EventStore, source: SourceConfig, purpose: str = "sync", **kw) -> EventBatch:
    batch = events.claim_due(source.source_id, purpose, debounce_s=0, lease_s=900, **kw)  # type: ignore[arg-type]
    assert batch is not None
    return batch


def _search(source: SourceConfig, query: str) -> set[str]:
    index = open_index(source.index)
    try:
        return {hit.doc_id for hit in index.search(query, k=20, source=source.source_id)}
    finally:
        index.close()


def _run(run_id: str, source: SourceConfig) -> dict:
    store = open_state_store()
    try:
        run = store.get_run(run_id, source.source_id)
        assert run is not None
        return run
    finally:
        store.close()


def test_edit_rename_and_trash_events_re_read_only_those_items(
    sim: FeishuSimulator,  # noqa: F811
    drive: dict[str, str],
    events: EventStore,
) -> None:
    source = _source(drive["root"])
    assert run_pipeline(source).counts["new"] == 6
    sim.edit(drive["docx"], "# 产品介绍\n现在支持事件驱动的同步。")
    sim.items[drive["sheet"]].name = "销售数据（新）"  # a title update: drive.file.title_updated_v1
    sim.trash(drive["doc"])
    events.record(
        source.source_id,
        [
            _hint(1, drive["docx"], "changed", "drive.file.edit_v1"),
            _hint(1, drive["docx"], "changed", "drive.file.edit_v1"),  # redelivered: a duplicate
            _hint(3, drive["sheet"], "renamed", "drive.file.title_updated_v1"),
            _hint(4, drive["doc"], "deleted", "drive.file.trashed_v1"),
        ],
    )
    batch = _claim(events, source)
    before = dict(sim.counters)

    summary = run_pipeline(source, event_batches=[batch.batch_id])

    spent = {k: v - before.get(k, 0) for k, v in sim.counters.items() if v != before.get(k, 0)}
    assert spent.get("list_requests", 0) == 0  # no folder listed: the named items' metas only
    assert spent["meta_requests"] <= len(TYPES)  # at most one call per type tried, for all three tokens
    assert (summary.counts["changed"], summary.counts["deleted"], summary.counts["new"]) == (2, 1, 0)
    assert _search(source, "事件驱动") == {document_id(source.source_id, drive["docx"])}
    assert _search(source, "部署步骤") == set()  # the trashed doc, re-checked gone, deleted
    store = open_state_store()
    try:
        assert store.items(source.source_id)[drive["sheet"]].title == "销售数据（新）"
    finally:
        store.close()
    trigger = _run(summary.run_id, source)["params"]["trigger"]
    assert trigger["type"] == "events" and trigger["batch_ids"] == [batch.batch_id]
    assert sorted(trigger["event_ids"]) == sorted(batch.event_ids) and trigger["items"] == 3
    assert trigger["kinds"] == {"changed": 1, "renamed": 1, "deleted": 1}
    assert events.batches([batch.batch_id])[0].run_id == summary.run_id
    stats = events.stats(source.source_id)
    assert (stats.received, stats.coalesced, stats.runs_started, stats.duplicates) == (3, 3, 1, 1)


def test_a_failed_event_run_loses_no_event_and_deletions_keep_the_mass_delete_guard(
    sim: FeishuSimulator,  # noqa: F811
    drive: dict[str, str],
    events: EventStore,
) -> None:
    source = _source(drive["root"])
    run_pipeline(source)
    doomed = [drive[k] for k in ("docx", "doc", "sheet", "bitable")]
    for token in doomed:
        sim.trash(token)
    events.record(source.source_id, [_hint(n, t, "deleted", "drive.file.deleted_v1") for n, t in enumerate(doomed)])
    batch = _claim(events, source)

    with pytest.raises(MassDeleteError):
        run_pipeline(source, event_batches=[batch.batch_id])
    assert events.batches([batch.batch_id])[0].run_id is None  # not consumed: the run failed
    assert len(_search(source, "产品介绍 OR 部署步骤 OR 华东 OR 甲公司")) == 4  # nothing deleted

    # the lease lapses: the same events come back in a new batch, for the next run
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=901)
    again = _claim(events, source, now=later)
    assert sorted(again.event_ids) == sorted(batch.event_ids) and again.batch_id != batch.batch_id
    summary = run_pipeline(source, {"allow_mass_delete": True}, event_batches=[again.batch_id])
    assert summary.counts["deleted"] == 4
    assert events.batches([again.batch_id])[0].run_id == summary.run_id


def test_an_event_for_an_item_still_there_deletes_nothing(
    sim: FeishuSimulator,  # noqa: F811
    drive: dict[str, str],
    events: EventStore,
) -> None:
    """A forged or stale "deleted" event is a hint: the meta query says the item is there."""
    source = _source(drive["root"])
    run_pipeline(source)
    events.record(source.source_id, [_hint(1, drive["docx"], "deleted", "drive.file.trashed_v1")])
    summary = run_pipeline(source, event_batches=[_claim(events, source).batch_id])
    assert summary.counts["deleted"] == 0 and summary.counts["unchanged"] + summary.counts["changed"] == 1
    assert _search(source, "增量更新") == {document_id(source.source_id, drive["docx"])}


def test_a_missed_event_is_caught_by_the_next_full_run(
    sim: FeishuSimulator,  # noqa: F811
    drive: dict[str, str],
    events: EventStore,
) -> None:
    """Point 5: the scheduled (or a manual) run still lists the whole source."""
    source = _source(drive["root"])
    run_pipeline(source)
    sim.edit(drive["docx"], "# 产品介绍\nmissedalpha")  # no callback for this one
    sim.edit(drive["doc"], "# 旧版说明\ncaughtbeta")
    events.record(source.source_id, [_hint(1, drive["doc"], "changed", "drive.file.edit_v1")])
    by_event = run_pipeline(source, event_batches=[_claim(events, source).batch_id])
    assert by_event.counts["changed"] == 1 and _search(source, "missedalpha") == set()
    assert _search(source, "caughtbeta") == {document_id(source.source_id, drive["doc"])}

    before = sim.counters["list_requests"]
    full = run_pipeline(source)  # what the cron schedule runs: no triggering events
    assert sim.counters["list_requests"] > before
    assert full.counts["changed"] == 1
    assert _search(source, "missedalpha") == {document_id(source.source_id, drive["docx"])}
    assert "trigger" not in _run(full.run_id, source)["params"]


def test_a_permission_event_re_reads_that_document_only(
    sim: FeishuSimulator,  # noqa: F811
    drive: dict[str, str],
    events: EventStore,
) -> None:
    source = _source(drive["root"])
    run_pipeline(source)
    sim.perms.members[drive["docx"]] = [("openid", "ou_newcomer")]
    events.record(source.source_id, [_hint(1, drive["docx"], "permissions", "drive.file.permission_member_added_v1")])
    assert events.claim_due(source.source_id, "sync", debounce_s=0, lease_s=900) is None  # not the sync's
    batch = _claim(events, source, "permissions")
    store = open_state_store()
    try:
        result = run_permission_sync(
            source, store, lambda: open_index(source.index), run_id="perm_ev", event_batches=[batch.batch_id]
        )
    finally:
        store.close()
    assert (result.checked, result.changed) == (1, 1)
    assert [c["item_key"] for c in result.changes] == [drive["docx"]]
    run = _run(result.run_id, source)
    assert run["params"]["only_keys"] == [drive["docx"]] and run["params"]["trigger"]["batch_ids"] == [batch.batch_id]
    assert events.batches([batch.batch_id])[0].run_id == result.run_id


def test_where_slides_are_synced_a_deletion_event_is_confirmed_by_a_walk(
    sim: FeishuSimulator,  # noqa: F811
    drive: dict[str, str],
    events: EventStore,
) -> None:
    """A slides token fails every meta type as a deleted one does: only a walk tells them apart."""
    source = _source(drive["root"])
    source = source.model_copy(update={"options": {**source.options, "types": [*TYPES, "slides"]}})
    run_pipeline(source)
    sim.trash(drive["doc"])
    events.record(source.source_id, [_hint(1, drive["doc"], "deleted", "drive.file.trashed_v1")])
    before = sim.counters["list_requests"]
    summary = run_pipeline(source, event_batches=[_claim(events, source).batch_id])
    assert sim.counters["list_requests"] > before  # walked
    assert summary.counts["deleted"] == 1 and _search(source, "部署步骤") == set()


def test_a_refused_meta_query_is_no_deletion(
    sim: FeishuSimulator,  # noqa: F811
    drive: dict[str, str],
    events: EventStore,
) -> None:
    """A 403 (a missing scope, say) says nothing of the item: nothing is deleted on it."""
    source = _source(drive["root"])
    run_pipeline(source)
    sim.trash(drive["doc"])
    sim.api_errors["meta"] = [(403, 99991672)] * 20  # every meta query this run is refused
    events.record(source.source_id, [_hint(1, drive["doc"], "deleted", "drive.file.trashed_v1")])
    summary = run_pipeline(source, event_batches=[_claim(events, source).batch_id])
    assert summary.counts["deleted"] == 0
    assert _search(source, "部署步骤") == {document_id(source.source_id, drive["doc"])}
