"""Feishu -> engine -> SQLite FTS index, in-process (``plugins.engine.run_pipeline``)."""

from __future__ import annotations

import pytest

from include.config import SourceConfig
from include.contract import document_id
from include.index import open_index
from include.stores import open_state_store
from plugins.engine import run_pipeline
from tests.simulators.feishu import FeishuSimulator, demo_drive


def feishu_source(root: str, **options) -> SourceConfig:
    opts = {"folders": [root], "export_poll_interval": 0.05, "export_poll_max_interval": 0.2, **options}
    return SourceConfig(kind="feishu", name="drive", conn_id="feishu_default", options=opts, batch_size=4)


def _search(source: SourceConfig, query: str) -> set[str]:
    index = open_index(source.index)
    try:
        return {hit.doc_id for hit in index.search(query, k=20, source=source.source_id)}
    finally:
        index.close()


def _run_items(run_id: str, action: str) -> list[dict]:
    store = open_state_store()
    try:
        return store.run_items(run_id, action)
    finally:
        store.close()


@pytest.fixture
def drive(sim: FeishuSimulator, feishu_conn: str, tributary_home) -> dict[str, str]:
    return demo_drive(sim)


def test_full_sync_no_change_edit_and_trash(sim: FeishuSimulator, drive: dict[str, str]) -> None:
    source = feishu_source(drive["root"])
    ids = {k: document_id(source.source_id, drive[k]) for k in ("docx", "doc", "sheet", "bitable", "file", "md")}

    first = run_pipeline(source)
    assert first.status == "success"
    assert (first.counts["new"], first.counts["failed"], first.counts["deleted"]) == (6, 0, 0)
    assert _search(source, "增量更新") == {ids["docx"]}  # docx export
    assert _search(source, "部署步骤") == {ids["doc"]}  # legacy doc exported to docx
    assert _search(source, "华东") == {ids["sheet"]}  # sheet exported to xlsx
    assert _search(source, "甲公司") == {ids["bitable"]}  # bitable in a nested folder
    assert _search(source, "发布日期") == {ids["file"]}  # uploaded file, raw UTF-8 file name
    assert _search(source, "共享令牌") == {ids["md"]}
    assert sim.counters["export_creations"] == 4

    # nothing changed: the listing only, zero export tasks, zero downloads
    before = dict(sim.counters)
    second = run_pipeline(source)
    assert (second.counts["new"], second.counts["changed"], second.counts["unchanged"]) == (0, 0, 6)
    assert sim.counters["export_creations"] == before["export_creations"]
    assert sim.counters["file_downloads"] == before["file_downloads"]

    # one edited doc is re-exported alone
    sim.edit(drive["docx"], "# 产品介绍\n现在支持飞书知识库空间。")
    creations = dict(sim.export_creations_by_token)
    third = run_pipeline(source)
    assert (third.counts["changed"], third.counts["unchanged"], third.counts["new"]) == (1, 5, 0)
    delta = {k: v - creations.get(k, 0) for k, v in sim.export_creations_by_token.items() if v != creations.get(k, 0)}
    assert delta == {drive["docx"]: 1}
    assert _search(source, "知识库空间") == {ids["docx"]} and _search(source, "增量更新") == set()
    assert [r["item_key"] for r in _run_items(third.run_id, "changed")] == [drive["docx"]]

    # a trashed doc leaves the index
    sim.trash(drive["doc"])
    fourth = run_pipeline(source)
    assert fourth.counts["deleted"] == 1 and fourth.counts["unchanged"] == 5
    assert _search(source, "部署步骤") == set()
    index = open_index(source.index)
    try:
        assert index.count(source=source.source_id, doc_id=ids["doc"]) == 0
    finally:
        index.close()


def test_failed_exports_are_recorded_per_document(sim: FeishuSimulator, feishu_conn: str, tributary_home) -> None:
    folder = sim.add_folder("导出失败")
    good = sim.add("docx", "正常文档", folder, "# 正常\n这篇可以导出。")
    statuses = [3, 107, 108, 109, 110, 111, 122, 123, 6000]
    bad = {}
    for status in statuses:
        bad[status] = sim.add("docx", f"失败{status}", folder, "x")
        sim.set_export(bad[status], status, pending_polls=1)
    source = feishu_source(folder)
    summary = run_pipeline(source)
    assert summary.status == "partial"
    assert summary.counts["new"] == 1 and summary.counts["failed"] == len(statuses)
    reasons = {r["item_key"]: r["reason"] for r in _run_items(summary.run_id, "failed")}
    assert reasons == {bad[s]: f"fetch: export_status_{s}" for s in statuses}
    assert _search(source, "导出") == {document_id(source.source_id, good)}


def test_rate_limit_storm_slows_but_loses_nothing(sim: FeishuSimulator, drive: dict[str, str]) -> None:
    sim.burst(30, reset=0)
    sim.burst(3, api="export_create", status=429, code=1069923, reset=1)
    source = feishu_source(drive["root"])
    summary = run_pipeline(source)
    assert summary.status == "success"
    assert (summary.counts["new"], summary.counts["failed"]) == (6, 0)
    assert sim.counters["rate_limited"] == 33


def test_token_expiry_mid_run_refreshes_once(
    sim: FeishuSimulator, drive: dict[str, str], redis_url, monkeypatch
) -> None:
    monkeypatch.setenv("TRIBUTARY_REDIS_URL", redis_url)
    source = feishu_source(drive["root"])
    assert run_pipeline(source).counts["new"] == 6
    sim.expire_tokens()
    sim.edit(drive["sheet"], [["地区", "销售额"], ["西南", 77]])
    summary = run_pipeline(source)
    assert summary.counts["changed"] == 1 and summary.counts["failed"] == 0
    assert sim.counters["token_requests"] == 2 and sim.counters["token_rejections"] == 1


def test_csv_sheets_raw_content_and_slides_reach_the_index(
    sim: FeishuSimulator, feishu_conn: str, tributary_home
) -> None:
    """Issue 20.11/20.15 through the engine: per-sheet CSV, the docx text fast path and a pptx."""
    folder = sim.add_folder("格式")
    sheet = sim.add("sheet", "区域", folder, {"华东": [["城市"], ["杭州湾"]], "西南": [["城市"], ["成都平原"]]})
    doc = sim.add("docx", "说明", folder, "# 说明\n纯文本快速通道")
    deck = sim.add("slides", "汇报", folder, "年度路线图")
    sim.slides_export = True  # an export API that takes slides (the documented one refuses them)
    source = feishu_source(folder, export_formats={"sheet": "csv"}, docx_fetch="raw_content")
    summary = run_pipeline(source)
    assert summary.status == "success" and (summary.counts["new"], summary.counts["failed"]) == (3, 0)
    assert _search(source, "成都平原") == _search(source, "杭州湾") == {document_id(source.source_id, sheet)}
    assert _search(source, "快速通道") == {document_id(source.source_id, doc)}
    assert _search(source, "路线图") == {document_id(source.source_id, deck)}
    assert sim.counters["raw_content_reads"] == 1 and sim.export_creations_by_token[sheet] == 2
