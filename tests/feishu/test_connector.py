"""FeishuConnector discovery and fetching against the simulator (no engine)."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from include.config import SourceConfig
from include.contract import ChangeKind, VersionEvidence
from plugins.connectors.base import ConnectorContext, DiscoveryRequest, get_connector_class
from plugins.connectors.feishu.connector import FeishuConnector
from plugins.connectors.feishu.options import FeishuOptions
from plugins.tributary_airflow.triggers.feishu import FeishuExportTrigger
from tests.simulators.feishu import FeishuSimulator, demo_drive


def _connector(folders: list[str], **options) -> FeishuConnector:
    opts = {"folders": folders, "export_poll_interval": 0.05, "export_poll_max_interval": 0.2, **options}
    source = SourceConfig(kind="feishu", name="drive", options=opts)
    return FeishuConnector(source, ConnectorContext(redis_url=None))


@pytest.fixture
def drive(sim: FeishuSimulator, feishu_conn: str) -> dict[str, str]:
    return demo_drive(sim)


def test_registered_and_fetched_by_the_export_operator() -> None:
    """The connector is registered; which operator fetches its batches is the DAG factory's
    table (the connector no longer names one): the deferrable export operator."""
    from plugins.tributary_airflow.dag_factory import build_dag
    from plugins.tributary_airflow.operators.feishu import FeishuExportFetchOperator

    cls = get_connector_class("feishu")
    assert cls is FeishuConnector and cls.options_model is FeishuOptions
    dag = build_dag(SourceConfig(kind="feishu", name="drive", options={"folders": ["fldcnX"]}))
    fetch = dag.get_task("fetch")
    assert getattr(fetch, "operator_class", type(fetch)) is FeishuExportFetchOperator


def test_discover_walks_nested_folders_and_resolves_shortcuts(sim: FeishuSimulator, drive: dict[str, str]) -> None:
    elsewhere = sim.add_folder("别处")  # not configured: reachable only through a shortcut
    target = sim.add("docx", "外部文档", elsewhere, "# 外部\n内容")
    sim.add_shortcut("外部文档 快捷方式", drive["root"], target)
    with _connector([drive["root"]]) as c:
        found = c.discover(DiscoveryRequest(known={}))
    keys = {ch.item_key for ch in found.changes}
    expected = {drive[k] for k in ("docx", "doc", "sheet", "bitable", "file", "md")} | {target}
    assert keys == expected and found.complete and found.all_keys == expected
    assert all(ch.kind is ChangeKind.NEW for ch in found.changes)
    by_key = {ch.item_key: ch for ch in found.changes}
    assert by_key[drive["bitable"]].metadata["path"] == ["产品文档", "季度计划"]
    assert by_key[target].metadata["via"] == "shortcut"
    assert by_key[target].version.modified_time == str(sim.items[target].modified_time)
    assert by_key[drive["sheet"]].metadata["via"] == "folder"  # listed directly and via shortcut: once
    assert found.stats["skipped_types"] == {"mindnote": 1}
    # every listing call went through the shared request budget, and its counters are reported
    assert found.stats["limits"]["ratelimit/feishu/admitted"] >= 3


def test_unchanged_changed_and_window(sim: FeishuSimulator, drive: dict[str, str]) -> None:
    with _connector([drive["root"]]) as c:
        first = c.discover(DiscoveryRequest(known={}))
        known = {ch.item_key: ch.version for ch in first.changes}
        sim.edit(drive["docx"], "# 产品介绍\n新内容", modified_time=2_000_000_000)
        second = c.discover(DiscoveryRequest(known=known))
        kinds = {ch.item_key: ch.kind for ch in second.changes}
        assert kinds.pop(drive["docx"]) is ChangeKind.CHANGED
        assert set(kinds.values()) == {ChangeKind.UNCHANGED}

        start = dt.datetime.fromtimestamp(1_999_999_000, dt.UTC)
        windowed = c.discover(DiscoveryRequest(known={}, window_start=start, window_end=start + dt.timedelta(hours=1)))
        assert [ch.item_key for ch in windowed.changes] == [drive["docx"]]
        assert windowed.complete and len(windowed.all_keys) == 6  # deletions still see every item


def test_incomplete_walk_confirms_deletions_with_meta_query(sim: FeishuSimulator, drive: dict[str, str]) -> None:
    with _connector([drive["root"]], client={"max_attempts": 2}) as c:
        known = {ch.item_key: ch.version for ch in c.discover(DiscoveryRequest(known={})).changes}
        sim.break_folder(drive["deep"])  # a sub-folder fails to list: the walk is incomplete
        sim.trash(drive["docx"])  # ...and a known doc really is gone
        found = c.discover(DiscoveryRequest(known=known))
    assert not found.complete and found.all_keys is None
    deleted = [ch.item_key for ch in found.changes if ch.kind is ChangeKind.DELETED]
    # Items of the unlistable folder still answer the meta query: not deleted.
    assert deleted == [drive["docx"]]
    assert "folder" in found.stats["errors"][0]


def test_unshared_folder_items_disappear_from_a_complete_walk(sim: FeishuSimulator, drive: dict[str, str]) -> None:
    with _connector([drive["root"]]) as c:
        sim.unshare(drive["deep"])  # the app no longer sees the folder at all
        found = c.discover(DiscoveryRequest(known={}))
    assert found.complete and drive["bitable"] not in found.all_keys and drive["file"] not in found.all_keys


def test_wiki_space(sim: FeishuSimulator, feishu_conn: str) -> None:
    parent = sim.add("docx", "空间首页", "", "# 首页", wiki_space="7001")
    sim.add("sheet", "子表", "", [["a"]], wiki_space="7001", wiki_parent=f"wik{parent[3:]}")
    with _connector([], wiki_spaces=["7001"]) as c:
        found = c.discover(DiscoveryRequest(known={}))
    assert {(ch.title, ch.metadata["feishu_type"]) for ch in found.changes} == {("空间首页", "docx"), ("子表", "sheet")}


def test_fetch_every_type_and_file_names(sim: FeishuSimulator, drive: dict[str, str]) -> None:
    with _connector([drive["root"]]) as c:
        changes = c.discover(DiscoveryRequest(known={})).changes
        docs, failures = c.fetch_batch(changes)
    assert failures == []
    by_key = {d.item_key: d for d in docs}
    assert by_key[drive["docx"]].file_name == "产品介绍.docx"
    assert by_key[drive["docx"]].data[:2] == b"PK"
    assert by_key[drive["sheet"]].file_name == "销售数据.xlsx"
    assert by_key[drive["file"]].file_name == "会议纪要.txt"  # raw UTF-8 filename= re-decoded
    assert by_key[drive["md"]].file_name == "设计 说明.md"  # RFC 5987 filename*
    assert by_key[drive["file"]].data.decode() == "会议纪要：确认发布日期为下周一。"
    assert sim.counters["export_creations"] == 4 and sim.counters["file_downloads"] == 2


@pytest.mark.parametrize("status", [3, 107, 108, 109, 110, 111, 122, 123, 6000])
def test_terminal_export_status_is_recorded_per_document(sim: FeishuSimulator, feishu_conn: str, status: int) -> None:
    folder = sim.add_folder("f")
    ok = sim.add("docx", "好的", folder, "# ok")
    bad = sim.add("docx", "坏的", folder, "# bad")
    sim.set_export(bad, status, pending_polls=2)
    with _connector([folder]) as c:
        docs, failures = c.fetch_batch(c.discover(DiscoveryRequest(known={})).changes)
    assert [d.item_key for d in docs] == [ok]
    [(key, err)] = failures
    assert key == bad and err.reason == f"export_status_{status}"
    assert err.retryable is (status in (3, 108, 122))
    assert str(status) in str(err)


def test_export_deadline_and_expired_file(sim: FeishuSimulator, feishu_conn: str) -> None:
    folder = sim.add_folder("f")
    slow = sim.add("docx", "慢", folder, "x")
    sim.set_export(slow, 0, pending_polls=10**6)
    with _connector([folder], export_deadline_seconds=0.5) as c:
        _docs, [(key, err)] = c.fetch_batch(c.discover(DiscoveryRequest(known={})).changes)
    assert key == slow and err.reason == "export_timeout" and err.retryable

    sim.set_export(slow, 0, pending_polls=0)
    with _connector([folder]) as c:
        changes = c.discover(DiscoveryRequest(known={})).changes
        tickets, _ = c.start_exports(changes)
        c.poll_exports(tickets)
        sim.expire_export_files()  # waited past the 10 minutes
        docs, failures = c.finish_batch(changes, tickets)
    # The expired file is exported again at once, in-task, instead of failing until next run.
    assert failures == [] and [d.item_key for d in docs] == [slow]
    assert sim.counters["export_downloads_expired"] == 1 and sim.export_creations_by_token[slow] == 3


def test_refused_exports_and_size_cap(sim: FeishuSimulator, feishu_conn: str) -> None:
    folder = sim.add_folder("f")
    gone = sim.add("docx", "已删除", folder, "x")
    hidden = sim.add("sheet", "无权限", folder, [["a"]])
    big = sim.add("file", "大文件.bin", folder, b"0" * 5000)
    with _connector([folder], max_file_bytes=1000) as c:
        changes = c.discover(DiscoveryRequest(known={})).changes
        sim.trash(gone)
        sim.unshare(hidden)
        docs, failures = c.fetch_batch(changes)
    assert docs == []
    reasons = {k: e.reason for k, e in failures}
    assert reasons == {gone: "not_found", hidden: "permission_denied", big: "too_large"}


def test_rate_limit_storm_loses_nothing(sim: FeishuSimulator, drive: dict[str, str]) -> None:
    sim.burst(25, reset=0)  # every API answers 429 for a while
    sim.burst(3, api="export_create", status=400, code=1069923, reset=0)
    sim.burst(3, api="file_download", status=400, code=1061045, reset=0)
    with _connector([drive["root"]]) as c:
        changes = c.discover(DiscoveryRequest(known={})).changes
        docs, failures = c.fetch_batch(changes)
    assert failures == [] and len(docs) == 6
    assert sim.counters["rate_limited"] == 31


def test_trigger_polls_tickets_to_terminal_states(sim: FeishuSimulator, feishu_conn: str) -> None:
    folder = sim.add_folder("f")
    done = [sim.add("docx", f"文档{i}", folder, "x") for i in range(3)]
    failed = sim.add("sheet", "表", folder, [["a"]])
    sim.set_export(failed, 110, pending_polls=3)
    with _connector([folder]) as c:
        tickets, refused = c.start_exports(c.discover(DiscoveryRequest(known={})).changes)
    assert refused == [] and len(tickets) == 4
    trigger = FeishuExportTrigger(
        conn_id="feishu_default", tickets=[t.to_dict() for t in tickets], deadline=9e9, interval=0.05, max_interval=0.1
    )
    classpath, kwargs = trigger.serialize()
    assert "s3cret" not in repr(kwargs)  # only the connection id travels
    rebuilt = FeishuExportTrigger(**kwargs)

    async def first_event():
        async for event in rebuilt.run():
            return event.payload

    payload = asyncio.run(first_event())
    assert classpath == "plugins.tributary_airflow.triggers.feishu.FeishuExportTrigger"
    states = {t["item_key"]: (t["state"], t["job_status"]) for t in payload["tickets"]}
    assert states == {**{k: ("done", 0) for k in done}, failed: ("failed", 110)}
    assert payload["status"] == "done"


def test_known_evidence_round_trip() -> None:
    ev = VersionEvidence(modified_time="1700000000")
    assert VersionEvidence.from_dict(ev.to_dict()) == ev


def test_doc_trashed_while_exporting_is_not_found(sim: FeishuSimulator, feishu_conn: str) -> None:
    folder = sim.add_folder("f")
    doc = sim.add("docx", "将被删除", folder, "x")
    sim.set_export(doc, 0, pending_polls=2)
    with _connector([folder]) as c:
        changes = c.discover(DiscoveryRequest(known={})).changes
        tickets, _ = c.start_exports(changes)
        sim.trash(doc)
        c.poll_exports(tickets)
        _docs, [(key, err)] = c.finish_batch(changes, tickets)
    assert key == doc and err.reason == "not_found" and not err.retryable
