"""YuqueConnector against the simulator, through the Airflow Connection ``yuque_default``."""

from __future__ import annotations

import io
import json
import zlib
from datetime import timedelta

import openpyxl
import pytest

from include.contract import Change, ChangeKind, VersionEvidence
from plugins.connectors.base import DiscoveryRequest, FetchError, get_connector_class
from plugins.connectors.yuque.connector import YuqueConnector
from plugins.connectors.yuque.lakesheet import XLSX_MEDIA_TYPE
from plugins.connectors.yuque.models import parse_time
from plugins.tributary_airflow.hooks.yuque import YuqueHook
from tests.yuque.conftest import TEAM_TOKEN, yuque_source
from tests.yuque.sheet_models import GOLDEN


@pytest.fixture
def space(sim):
    kb = sim.add_repo("alice", "kb", "知识库")
    notes = sim.add_repo("alice", "notes", "笔记")
    docs = {
        "md": sim.add_doc(kb, "入职指南", body="# 入职指南\n\n欢迎加入。", toc_path=["入门", "第一周"]),
        "html": sim.add_doc(kb, "公告", format="html", body="<h1>公告</h1><p>周五停电。</p>", toc_path=["入门"]),
        "sheet": sim.add_doc(kb, "销售表", format="lakesheet", sheets=GOLDEN),
        "table": sim.add_doc(
            kb,
            "任务表",
            format="laketable",
            columns=[
                {"id": "c1", "name": "任务", "type": "text"},
                {"id": "c2", "name": "状态", "type": "select", "options": [{"id": "o1", "value": "进行中"}]},
                {"id": "c3", "name": "负责人", "type": "user"},
            ],
            records=[[f"任务{i}", ["o1"], [{"id": 1, "name": "小王", "login": "w"}]] for i in range(250)],
        ),
        "board": sim.add_doc(kb, "画板", format="board"),
        "lake": sim.add_doc(notes, "随记", format="lake", body="一段 **Lake** 文字"),
    }
    return sim, docs


def _key(sim, doc) -> str:
    repo = next(r for r in sim.repos.values() if doc.id in r.docs)
    return f"{repo.id}/{doc.id}"


def _known(sim, docs) -> dict[str, VersionEvidence]:
    return {_key(sim, d): VersionEvidence(modified_time=d.content_updated_at) for d in docs}


def test_registered_kind():
    assert get_connector_class("yuque") is YuqueConnector


def test_hook_reads_connection_from_environment(yuque_conn, sim, monkeypatch):
    hook = YuqueHook()
    assert hook.get_conn().base_url == f"{yuque_conn}/api/v2"
    assert hook.test_connection() == (True, "authenticated as 'alice' (User)")
    assert sim.requests[-1]["user_agent"] == "tributary-tests"
    hook.close()
    host, port = yuque_conn.removeprefix("http://").split(":")
    monkeypatch.setenv(
        "AIRFLOW_CONN_YUQUE_TEAM",
        json.dumps({"conn_type": "yuque", "host": host, "port": int(port), "schema": "http", "password": TEAM_TOKEN}),
    )
    team = YuqueHook("yuque_team")
    assert team.get_conn().get_user()["type"] == "Group"
    team.close()
    monkeypatch.setenv("AIRFLOW_CONN_YUQUE_EMPTY", json.dumps({"conn_type": "yuque", "host": host}))
    with pytest.raises(ValueError, match="no token"):
        YuqueHook("yuque_empty").get_conn()


def test_full_discovery(yuque_conn, space):
    sim, docs = space
    with YuqueConnector(yuque_source()) as conn:
        found = conn.discover(DiscoveryRequest(known={}))
    keys = {_key(sim, d) for d in docs.values()}
    assert found.complete and found.all_keys == keys
    assert {c.item_key for c in found.changes} == keys and {c.kind for c in found.changes} == {ChangeKind.NEW}
    by_key = {c.item_key: c for c in found.changes}
    md = by_key[_key(sim, docs["md"])]
    assert md.version.modified_time == docs["md"].content_updated_at
    assert md.metadata["breadcrumbs"] == ["知识库", "入门", "第一周"]
    assert md.url.endswith(f"/alice/kb/{docs['md'].slug}") and md.title == "入职指南"
    assert by_key[_key(sim, docs["sheet"])].metadata["breadcrumbs"] == ["知识库"]  # not in the TOC
    assert sim.counters["doc"] == 0  # discovery never downloads a body
    assert sim.counters["docs_deleted"] == 0  # nothing known yet: no tombstones to look for


def test_no_change_resync_fetches_nothing(yuque_conn, space):
    sim, docs = space
    sim.reset_counters()
    with YuqueConnector(yuque_source()) as conn:
        found = conn.discover(DiscoveryRequest(known=_known(sim, docs.values())))
    assert {c.kind for c in found.changes} == {ChangeKind.UNCHANGED} and len(found.changes) == len(docs)
    assert found.complete
    # one listing page, one tombstone page and one TOC per repo (the TOC: a doc moved in it
    # changes its heading path without touching the doc); versions like these, of an earlier
    # release (no listing stamp), are listed in full
    assert sim.counters["doc"] == 0 and sim.counters["toc"] == 2
    assert sim.counters["docs"] == 2 and sim.counters["docs_deleted"] == 2
    assert found.stats["incremental_repos"] == 0
    # the shared limiter counted every request against the account's hourly allowance
    assert found.stats["limits"].get("ratelimit/yuque/counted", 0) >= 6, found.stats["limits"]


def test_edited_doc_alone_is_changed(yuque_conn, space):
    sim, docs = space
    known = _known(sim, docs.values())
    sim.edit_doc(docs["md"], body="# 入职指南\n\n欢迎加入，第二版。")
    with YuqueConnector(yuque_source()) as conn:
        found = conn.discover(DiscoveryRequest(known=known))
    fetchable = [(c.item_key, c.kind) for c in found.changes if c.kind is not ChangeKind.UNCHANGED]
    assert fetchable == [(_key(sim, docs["md"]), ChangeKind.CHANGED)]


def test_deleted_doc_reported_explicitly_and_absent(yuque_conn, space):
    sim, docs = space
    known = _known(sim, docs.values())
    sim.delete_doc(docs["html"])
    with YuqueConnector(yuque_source()) as conn:
        found = conn.discover(DiscoveryRequest(known=known))
    key = _key(sim, docs["html"])
    assert key not in found.all_keys
    (deleted,) = [c for c in found.changes if c.kind is not ChangeKind.UNCHANGED]
    assert deleted.item_key == key and deleted.kind is ChangeKind.DELETED and "deleted at" in deleted.reason


def test_malformed_records_skipped_with_reason(yuque_conn, space):
    sim, docs = space
    docs["md"].list_override = {"title": {"unexpected": "object"}}
    with YuqueConnector(yuque_source()) as conn:
        found = conn.discover(DiscoveryRequest(known={}))
    key = _key(sim, docs["md"])
    assert found.complete and key in found.all_keys  # still exists: nothing indexed is dropped
    assert key not in {c.item_key for c in found.changes}
    assert found.stats["skipped"] == [
        {"item_key": key, "reason": "malformed list record: 'title' is dict, expected a string"}
    ]
    # a record without a readable id makes the listing unusable for deletions
    docs["html"].list_override = {"id": None}
    with YuqueConnector(yuque_source()) as conn:
        found = conn.discover(DiscoveryRequest(known={}))
    assert not found.complete and found.all_keys is None and len(found.stats["skipped"]) == 2
    assert len(found.changes) == len(docs) - 2


def test_configured_namespaces_and_vanished_repo(yuque_conn, space):
    sim, docs = space
    with YuqueConnector(yuque_source(namespaces=["alice/notes"])) as conn:
        found = conn.discover(DiscoveryRequest(known={}))
    assert found.complete and found.all_keys == {_key(sim, docs["lake"])}
    # no owner listing; the one /user is the request budget learning the token's account
    assert sim.counters["repos"] == 0 and sim.counters["user"] == 1
    # a 404 repo is "not seen", never "deleted": the walk is incomplete (see test_real_service)
    with YuqueConnector(yuque_source(namespaces=["alice/notes", "alice/gone"])) as conn:
        found = conn.discover(DiscoveryRequest(known={}))
    assert not found.complete and found.all_keys is None
    assert any("alice/gone" in r and "404" in r for r in found.stats["incomplete_reasons"])


def test_team_token_lists_group_repos(yuque_url, sim, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_YUQUE_DEFAULT", json.dumps({"conn_type": "yuque", "host": yuque_url, "password": TEAM_TOKEN})
    )
    repo = sim.add_repo("acme", "wiki", "团队wiki")
    doc = sim.add_doc(repo, "规范", body="规范正文")
    sim.add_doc(sim.add_repo("alice", "private"), "私人")
    with YuqueConnector(yuque_source()) as conn:
        found = conn.discover(DiscoveryRequest(known={}))
    assert found.all_keys == {f"{repo.id}/{doc.id}"}
    assert any(r["path"] == "groups/acme/repos" for r in sim.requests)


def test_window_bounds_a_backfill(yuque_conn, space):
    sim, docs = space
    start = parse_time(docs["html"].content_updated_at)
    end = parse_time(docs["table"].content_updated_at)
    with YuqueConnector(yuque_source()) as conn:
        found = conn.discover(DiscoveryRequest(known={}, window_start=start, window_end=end))
    # [start, end): the doc modified exactly at the end belongs to the next window
    assert {c.item_key for c in found.changes} == {_key(sim, docs["html"]), _key(sim, docs["sheet"])}
    assert found.all_keys == {_key(sim, d) for d in docs.values()}  # the listing itself is whole
    with YuqueConnector(yuque_source()) as conn:
        found = conn.discover(DiscoveryRequest(known={}, window_start=start - timedelta(minutes=2)))
    assert {c.item_key for c in found.changes} == {_key(sim, d) for d in docs.values()}


def _fetch(sim, doc, source=None):
    with YuqueConnector(source or yuque_source()) as conn:
        found = conn.discover(DiscoveryRequest(known={}, only_keys=[_key(sim, doc)]))
        (change,) = found.changes
        return conn.fetch(change)


def test_fetch_markdown_html_and_lake(yuque_conn, space):
    sim, docs = space
    md = _fetch(sim, docs["md"])
    # the TOC path heads the text (the doc's own headings nest under it); the title is front matter
    assert (md.media_type, md.data.decode(), md.file_name) == (
        "text/markdown",
        "---\ntitle: 入职指南\n---\n# 知识库\n\n## 入门\n\n### 第一周\n\n#### 入职指南\n\n##### 入职指南\n\n欢迎加入。",
        f"{docs['md'].slug}.md",
    )
    assert md.metadata["breadcrumbs"] == ["知识库", "入门", "第一周"] and md.metadata["source_format"] == "markdown"
    assert md.version.modified_time == docs["md"].content_updated_at
    html = _fetch(sim, docs["html"])
    assert html.media_type == "text/html" and html.data.decode() == docs["html"].body
    lake = _fetch(sim, docs["lake"])
    assert lake.media_type == "text/markdown" and lake.data.decode().endswith("# 笔记\n\n## 随记\n\n一段 **Lake** 文字")
    plain = _fetch(sim, docs["lake"], yuque_source(toc_headings=False))
    assert plain.data.decode() == "一段 **Lake** 文字"


def test_fetch_lakesheet_rebuilds_workbook(yuque_conn, space):
    sim, docs = space
    raw = _fetch(sim, docs["sheet"])
    assert raw.media_type == XLSX_MEDIA_TYPE and raw.file_name.endswith(".xlsx")
    wb = openpyxl.load_workbook(io.BytesIO(raw.data), data_only=True)
    ws = wb["明细_2026_Q1"]
    assert (ws["A1"].value, ws["D2"].value, ws["A1"].font.b) == ("产品", 42, True)
    assert [str(r) for r in ws.merged_cells.ranges] == ["A6:D6"]


@pytest.mark.parametrize("where", ["draft", "none"])
def test_fetch_lakesheet_from_draft_or_plain_body_sheet(yuque_conn, space, where):
    sim, docs = space
    docs["sheet"].sheet_in = where
    wb = openpyxl.load_workbook(io.BytesIO(_fetch(sim, docs["sheet"]).data), data_only=True)
    assert wb["明细_2026_Q1"]["D3"].value == "多"
    assert bool(wb["明细_2026_Q1"].merged_cells.ranges) is (where == "draft")  # body_sheet has no merges


def test_fetch_lakesheet_bomb_is_a_final_failure(yuque_conn, space):
    sim, docs = space
    bomb = zlib.compress(b"[" + b" " * (8 * 1024 * 1024) + b"]", 9)
    docs["sheet"].raw_body = json.dumps({"format": "lakesheet", "sheet": bomb.decode("latin-1")})
    with pytest.raises(FetchError) as info:
        _fetch(sim, docs["sheet"], yuque_source(max_sheet_bytes=1024 * 1024))
    assert info.value.reason == "lakesheet_bomb" and info.value.retryable is False


def test_fetch_laketable_pages_all_rows(yuque_conn, space):
    sim, docs = space
    raw = _fetch(sim, docs["table"])
    ws = openpyxl.load_workbook(io.BytesIO(raw.data)).active
    rows = list(ws.iter_rows(values_only=True))
    assert rows[0] == ("任务", "状态", "负责人") and len(rows) == 251
    assert rows[250] == ("任务249", "进行中", "小王")
    assert sim.counters[f"doc:{docs['table'].id}"] == 3  # page 1 with the detail, then pages 2 and 3


def test_unknown_format_skipped_with_format_named(yuque_conn, space):
    sim, docs = space
    with pytest.raises(FetchError) as info:
        _fetch(sim, docs["board"])
    assert info.value.reason == "skipped: unsupported format board" and info.value.retryable is False


def test_fetch_of_doc_deleted_since_discovery(yuque_conn, space):
    sim, docs = space
    with YuqueConnector(yuque_source()) as conn:
        (change,) = conn.discover(DiscoveryRequest(known={}, only_keys=[_key(sim, docs["md"])])).changes
        sim.delete_doc(docs["md"])
        with pytest.raises(FetchError) as info:
            conn.fetch(change)
    assert info.value.reason == "not_found" and info.value.retryable is False


def test_fetch_rate_limited_then_succeeds(yuque_conn, space):
    sim, docs = space
    change = Change(_key(sim, docs["md"]), ChangeKind.NEW)
    sim.burst_429 = 2
    with YuqueConnector(yuque_source()) as conn:
        raw = conn.fetch(change)
    assert raw.data.decode() == docs["md"].body and sim.counters["status:429"] == 2


def test_input_dataset_names_host_and_namespaces(yuque_conn, sim):
    with YuqueConnector(yuque_source(namespaces=["alice/kb", "alice/notes"])) as conn:
        assert conn.input_dataset() == (yuque_conn, "/alice/kb,alice/notes")
    assert sim.counters["requests"] == 0
