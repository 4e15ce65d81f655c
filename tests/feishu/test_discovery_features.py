"""Issue 20.15: wiki space and root folder discovery, the docx raw_content fast path with
revision_id change detection, and the user_access_token mode (shared refresh chain in Redis)."""

from __future__ import annotations

import json

import pytest
from cryptography.fernet import Fernet

from include.config import SourceConfig
from include.contract import ChangeKind
from plugins.connectors.base import ConnectorContext, DiscoveryRequest
from plugins.connectors.feishu import errors as fe
from plugins.connectors.feishu.client import FeishuClient, FeishuSettings
from plugins.connectors.feishu.connector import FeishuConnector
from tests.simulators.feishu import FeishuSimulator


def _connector(folders: list[str], **options) -> FeishuConnector:
    opts = {"folders": folders, "export_poll_interval": 0.05, "export_poll_max_interval": 0.2, **options}
    return FeishuConnector(SourceConfig(kind="feishu", name="drive", options=opts), ConnectorContext(redis_url=None))


def test_wiki_spaces_all_discovers_every_readable_space(sim: FeishuSimulator, feishu_conn: str) -> None:
    a = sim.add("docx", "甲空间首页", "", "x", wiki_space="7001")
    b = sim.add("sheet", "乙空间表", "", [["a"]], wiki_space="7002")
    with _connector([], wiki_spaces="all") as c:
        found = c.discover(DiscoveryRequest(known={}))
    assert {ch.item_key for ch in found.changes} == {a, b} and found.complete
    assert sim.counters["wiki_spaces_requests"] == 1


def test_root_folder_is_discovered_and_listed_like_any_folder(sim: FeishuSimulator, feishu_conn: str) -> None:
    sub = sim.add_folder("子目录")
    top = sim.add("docx", "根文档", "", "x")
    deep = sim.add("sheet", "子表", sub, [["a"]])
    elsewhere = sim.add_folder("别处", shared=True)
    target = sim.add("docx", "外部", elsewhere, "y")
    sim.add_shortcut("外部 快捷方式", "", target)  # shortcuts in the root: only when listed by token
    sim.items[elsewhere].parent = "fldcnNotInTheRoot"  # the target's folder is outside the root
    with _connector(["root"]) as c:
        found = c.discover(DiscoveryRequest(known={}))
    assert {ch.item_key for ch in found.changes} == {top, deep, target}
    assert sim.counters["root_meta_requests"] == 1


def test_docx_raw_content_fast_path(sim: FeishuSimulator, feishu_conn: str) -> None:
    folder = sim.add_folder("f")
    docs = [sim.add("docx", f"文档{i}", folder, f"# 标题{i}\n正文 {i}") for i in range(3)]
    sheet = sim.add("sheet", "表", folder, [["a"]])
    with _connector([folder], docx_fetch="raw_content") as c:
        fetched, failures = c.fetch_batch(c.discover(DiscoveryRequest(known={})).changes)
    assert failures == []
    by_key = {d.item_key: d for d in fetched}
    assert by_key[docs[0]].data.decode() == "标题0\n正文 0\n" and by_key[docs[0]].file_name == "文档0.txt"
    assert by_key[docs[0]].metadata["fetched_via"] == "raw_content"
    assert sim.counters["raw_content_reads"] == 3 and sim.counters["docx_get_requests"] == 3
    assert sim.export_creations_by_token == {sheet: 1}  # only the sheet was exported


def test_docx_revision_id_decides_whether_a_touched_document_changed(sim: FeishuSimulator, feishu_conn: str) -> None:
    folder = sim.add_folder("f")
    doc = sim.add("docx", "文档", folder, "x", modified_time=1_700_000_000)
    with _connector([folder], docx_revision_check=True) as c:
        [first] = c.discover(DiscoveryRequest(known={})).changes
        assert first.version.revision == "1"
        sim.items[doc].modified_time += 60  # touched (e.g. renamed), content untouched
        [touched] = c.discover(DiscoveryRequest(known={doc: first.version})).changes
        assert touched.kind is ChangeKind.UNCHANGED and "revision_id 1" in (touched.reason or "")
        sim.edit(doc, "y")
        [edited] = c.discover(DiscoveryRequest(known={doc: first.version})).changes
    assert edited.kind is ChangeKind.CHANGED and edited.version.revision == "2"


# --------------------------------------------------------------------------- user token mode


def _user_settings(sim: FeishuSimulator, url: str, refresh: str, redis_url: str | None = None) -> FeishuSettings:
    return FeishuSettings(
        app_id=sim.app_id, app_secret=sim.app_secret, host=url, auth="user", refresh_token=refresh, redis_url=redis_url
    )


def test_user_mode_from_the_connection(
    sim: FeishuSimulator, sim_url: str, monkeypatch: pytest.MonkeyPatch, tributary_home
) -> None:
    refresh = sim.grant_user()
    conn = {
        "conn_type": "http",
        "login": sim.app_id,
        "password": sim.app_secret,
        "host": sim_url,
        # the refresh chain is kept encrypted in the state database with the Connection's key
        "extra": {"auth": "user", "refresh_token": refresh, "token_store_key": Fernet.generate_key().decode()},
    }
    monkeypatch.setenv("AIRFLOW_CONN_FEISHU_DEFAULT", json.dumps(conn))
    folder = sim.add_folder("我的空间")
    doc = sim.add("docx", "我的文档", folder, "x")
    with _connector([folder]) as c:
        assert [ch.item_key for ch in c.discover(DiscoveryRequest(known={})).changes] == [doc]
        assert refresh not in repr(c.settings)
    assert sim.counters["user_token_refreshes"] == 1 and sim.counters["token_requests"] == 0


@pytest.mark.redis
def test_user_tokens_and_the_rotating_refresh_token_are_shared(
    sim: FeishuSimulator, sim_url: str, redis_url: str
) -> None:
    folder = sim.add_folder("f")
    sim.add("docx", "d", folder, "x")
    refresh = sim.grant_user()
    with (
        FeishuClient(_user_settings(sim, sim_url, refresh, redis_url)) as a,
        FeishuClient(_user_settings(sim, sim_url, refresh, redis_url)) as b,
    ):
        assert len(list(a.list_folder(folder))) == len(list(b.list_folder(folder))) == 1
        assert sim.counters["user_token_refreshes"] == 1  # b used a's token
        sim.expire_user_tokens()  # 99991677 on the next call
        assert len(list(b.list_folder(folder))) == 1  # refreshed with the rotated refresh token
        assert len(list(a.list_folder(folder))) == 1  # and a uses b's new token
    assert sim.counters["user_token_refreshes"] == 2


def test_user_token_refusals_are_worded_and_final(sim: FeishuSimulator, sim_url: str, secret_key: str) -> None:
    folder = sim.add_folder("f")
    refresh = sim.grant_user()
    sim.user_token_refused = {"list"}  # 99991668: this API does not take user tokens
    with FeishuClient(_user_settings(sim, sim_url, refresh)) as c, pytest.raises(fe.FeishuTokenRejected) as info:
        list(c.list_folder(folder))
    assert "user token" in str(info.value) and sim.counters["list_requests"] <= 2
    spent = _user_settings(sim, sim_url, "ur-spent-or-revoked")
    with FeishuClient(spent) as c, pytest.raises(fe.FeishuCredentialsError, match="authorize again"):
        c.tokens.get()
