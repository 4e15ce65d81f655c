"""Issue 20, Feishu points 8-14: the connector against the simulator behaving as the real service.

Each test names the point it covers. The simulator's behaviours cite their public source in
tests/simulators/feishu.py / _feishu_app.py.
"""

from __future__ import annotations

import pytest

from include.config import SourceConfig
from include.contract import Change, ChangeKind
from plugins.connectors.base import ConnectorContext, DiscoveryRequest
from plugins.connectors.feishu import errors as fe
from plugins.connectors.feishu.client import FeishuClient
from plugins.connectors.feishu.connector import FeishuConnector
from tests.simulators.feishu import FeishuSimulator


def _connector(folders: list[str], **options) -> FeishuConnector:
    opts = {"folders": folders, "export_poll_interval": 0.05, "export_poll_max_interval": 0.2, **options}
    return FeishuConnector(SourceConfig(kind="feishu", name="drive", options=opts), ConnectorContext(redis_url=None))


def _once(fn):
    """A listing hook that fires on the first page of any folder, once."""
    state = {"fired": False}

    def hook(folder: str | None, page: int) -> None:
        if folder and page == 0 and not state["fired"]:
            state["fired"] = True
            fn()

    return hook


def _docs(sim: FeishuSimulator, folder: str, n: int) -> list[str]:
    # created (and last edited) one second apart: oldest first
    return [sim.add("docx", f"文档{i}", folder, f"# {i}", modified_time=1_700_000_000 + i) for i in range(n)]


# --------------------------------------------------------------------------- 8


def test_8_edit_during_the_walk_does_not_drop_an_item(sim: FeishuSimulator, feishu_conn: str) -> None:
    folder = sim.add_folder("f")
    docs = _docs(sim, folder, 6)
    sim.list_page_cap = 2  # three pages
    with _connector([folder]) as c:
        known = {ch.item_key: ch.version for ch in c.discover(DiscoveryRequest(known={})).changes}
        # After the first page is served, the oldest-edited document (last in EditedTime DESC,
        # i.e. beyond the cursor) is edited and jumps to the front, behind the cursor.
        sim.listing_hooks.append(_once(lambda: sim.edit(docs[0], "# edited", modified_time=1_800_000_000)))
        found = c.discover(DiscoveryRequest(known=known))
    assert sim.items[docs[0]].modified_time == 1_800_000_000  # the edit did happen mid-walk
    assert found.complete and found.all_keys == set(docs)
    assert ChangeKind.DELETED not in {ch.kind for ch in found.changes}


def test_8_an_item_a_single_walk_missed_is_rechecked_before_deletion(sim: FeishuSimulator, feishu_conn: str) -> None:
    folder = sim.add_folder("f")
    docs = _docs(sim, folder, 6)
    sim.list_page_cap = 2
    with _connector([folder]) as c:
        known = {ch.item_key: ch.version for ch in c.discover(DiscoveryRequest(known={})).changes}
        sim.trash(docs[5])  # really deleted before the run
        # A deletion after page 1 (which listed docs[0] and docs[1]) shifts the offset cursor:
        # docs[2] is skipped by this walk although nothing happened to it.
        sim.listing_hooks.append(_once(lambda: sim.trash(docs[0])))
        found = c.discover(DiscoveryRequest(known=known))
    deleted = [ch.item_key for ch in found.changes if ch.kind is ChangeKind.DELETED]
    assert deleted == [docs[5]]  # confirmed gone by the meta query's failed_list
    assert found.complete and found.all_keys == set(docs[:5])  # docs[2] found by the second walk
    assert any("re-walk found 1 of 1" in e for e in found.stats["errors"])


# --------------------------------------------------------------------------- 9


def test_9_permanent_99991663_refreshes_once_and_fails_fast(sim: FeishuSimulator, client: FeishuClient) -> None:
    folder = sim.add_folder("f")
    sim.tenant_token_refused = {"list"}  # an API that does not accept tenant tokens
    with pytest.raises(fe.FeishuTokenRejected) as info:
        list(client.list_folder(folder))
    assert not info.value.retryable and "not retrying" in str(info.value)
    # the refresh handed back the same token (>= 30 min left): no second business call
    assert sim.counters["list_requests"] == 1 and sim.counters["token_requests"] == 2


def test_9_a_fresh_token_rejected_again_is_not_retried(sim: FeishuSimulator, client: FeishuClient) -> None:
    folder = sim.add_folder("f")
    sim.token_lifetime = 1000  # < 30 min: every token call issues a new token
    sim.tenant_token_refused = {"list"}
    with pytest.raises(fe.FeishuTokenRejected, match="freshly issued tenant token was rejected"):
        list(client.list_folder(folder))
    assert sim.counters["list_requests"] == 2 and sim.counters["tokens_issued"] == 2


def test_9_poller_gives_up_on_a_permanent_rejection(sim: FeishuSimulator, feishu_conn: str) -> None:
    folder = sim.add_folder("f")
    doc = sim.add("docx", "d", folder, "x")
    sim.tenant_token_refused = {"export_poll"}
    with _connector([folder]) as c:
        _docs_out, [(key, err)] = c.fetch_batch(c.discover(DiscoveryRequest(known={})).changes)
    assert key == doc and "not retrying" in str(err)
    assert sim.counters["export_poll_requests"] == 1


@pytest.mark.parametrize(("code", "hint"), [(10014, "app secret"), (10015, "app id")])
def test_9_token_call_errors_are_typed_and_worded(sim: FeishuSimulator, client: FeishuClient, code, hint) -> None:
    sim.token_error = (200, code, "refused")
    with pytest.raises(fe.FeishuCredentialsError) as info:
        list(client.list_folder("fldcnwhatever"))
    assert hint in str(info.value) and sim.app_id in str(info.value) and not info.value.retryable
    assert sim.counters["token_requests"] == 1 and sim.counters["list_requests"] == 0
    assert sim.app_secret not in str(info.value)


# --------------------------------------------------------------------------- 10


def test_10_urls_from_with_url_metas_shortcut_rows_and_wiki_nodes(sim: FeishuSimulator, feishu_conn: str) -> None:
    root = sim.add_folder("root")
    elsewhere = sim.add_folder("别处")
    target = sim.add("docx", "外部", elsewhere, "x")
    sim.add_shortcut("外部 快捷方式", root, target)
    base = sim.add("bitable", "台账", root, [["a"]])
    legacy = sim.add("doc", "旧文档", root, "x")
    page = sim.add("docx", "首页", "", "x", wiki_space="7001")
    with _connector([root], wiki_spaces=["7001"]) as c:
        found = {ch.item_key: ch for ch in c.discover(DiscoveryRequest(known={})).changes}
    assert found[target].url == f"{sim.tenant_url}/docx/{target}"
    assert found[base].url == f"{sim.tenant_url}/base/{base}"
    assert found[legacy].url == f"{sim.tenant_url}/docs/{legacy}"
    # wiki nodes carry no url: <tenant>/wiki/<node_token>, the tenant learnt from listing URLs
    assert found[page].url == f"{sim.tenant_url}/wiki/{sim.wiki_node_token(page)}"


def test_10_wiki_shortcut_nodes_resolve_to_their_origin(sim: FeishuSimulator, feishu_conn: str) -> None:
    origin = sim.add("docx", "原文", "", "x", wiki_space="7001")
    sim.add("docx", "子页", "", "y", wiki_space="7001", wiki_parent=sim.wiki_node_token(origin))
    sim.add_wiki_shortcut("7002", origin)
    with _connector([], wiki_spaces=["7002"], tenant_url="https://acme.feishu.cn") as c:
        [only] = c.discover(DiscoveryRequest(known={})).changes
    # the shortcut's document is the origin's; its link names the origin node
    assert only.item_key == origin and only.metadata["via"] == "wiki_shortcut"
    assert only.url == f"https://acme.feishu.cn/wiki/{sim.wiki_node_token(origin)}"
    with _connector([], wiki_spaces=["7002", "7001"]) as c:
        found = {ch.item_key: ch for ch in c.discover(DiscoveryRequest(known={})).changes}
    assert len(found) == 2 and found[origin].metadata["via"] == "wiki"  # once, at its origin


# --------------------------------------------------------------------------- 11


def test_11_csv_exports_name_each_sheet_and_table(sim: FeishuSimulator, feishu_conn: str) -> None:
    folder = sim.add_folder("f")
    sheet = sim.add(
        "sheet", "销售", folder, {"华东": [["地区", "额"], ["上海", 1]], "华北": [["地区", "额"], ["北京", 2]]}
    )
    table = sim.add("bitable", "台账", folder, [["客户"], ["甲公司"]])
    with _connector([folder], export_formats={"sheet": "csv", "bitable": "csv"}) as c:
        docs, failures = c.fetch_batch(c.discover(DiscoveryRequest(known={})).changes)
    assert failures == []
    by_key = {d.item_key: d for d in docs}
    text = by_key[sheet].data.decode()
    assert "上海" in text and "北京" in text and by_key[sheet].metadata["sheets"] == ["华东", "华北"]
    assert by_key[sheet].file_name == "销售.csv" and by_key[table].data.decode().splitlines()[1] == "甲公司"
    assert sim.counters["export_creations"] == 3  # one per sheet / table


def test_11_slides_are_exported_to_pptx(sim: FeishuSimulator, feishu_conn: str) -> None:
    sim.slides_export = True  # an export API that takes slides (the documented one refuses them)
    folder = sim.add_folder("f")
    deck = sim.add("slides", "路线图", folder, "第一季度\n第二季度")
    with _connector([folder]) as c:
        changes = c.discover(DiscoveryRequest(known={})).changes
        docs, failures = c.fetch_batch(changes)
    assert failures == [] and [d.item_key for d in docs] == [deck]
    assert docs[0].file_name == "路线图.pptx" and docs[0].data[:2] == b"PK"


# --------------------------------------------------------------------------- 12


def test_12_a_json_file_served_as_application_json_is_the_file(sim: FeishuSimulator, feishu_conn: str) -> None:
    folder = sim.add_folder("f")
    body = b'{"code": 99991663, "msg": "looks like an error, is a file"}'
    token = sim.add("file", "data.json", folder, body, media_type="application/json")
    with _connector([folder]) as c:
        doc = c.fetch(Change(token, ChangeKind.NEW, title="data.json", metadata={"feishu_type": "file"}))
    assert doc.data == body and doc.media_type == "application/json"


# --------------------------------------------------------------------------- 14


def test_14_wiki_error_codes_are_mapped() -> None:
    assert isinstance(fe.error_from_response(400, {"code": 131001}), fe.FeishuServerError)
    assert isinstance(fe.error_from_response(400, {"code": 131006}), fe.FeishuPermissionError)
    assert isinstance(fe.error_from_response(400, {"code": 131007}), fe.FeishuParamError)


def test_14_wiki_transient_error_is_retried_and_empty_pages_keep_paging(sim: FeishuSimulator, feishu_conn: str) -> None:
    pages = [sim.add("docx", f"页{i}", "", "x", wiki_space="7001") for i in range(3)]
    sim.wiki_errors["7001"] = [(400, 131001)]
    sim.wiki_empty_pages = True
    with _connector([], wiki_spaces=["7001"]) as c:
        found = c.discover(DiscoveryRequest(known={}))
    assert found.complete and {ch.item_key for ch in found.changes} == set(pages)
    assert sim.counters["wiki_nodes_requests"] == 3  # 131001, the empty page, the real page


def test_14_wiki_permission_denied_is_final(sim: FeishuSimulator, feishu_conn: str) -> None:
    sim.add("docx", "页", "", "x", wiki_space="7001")
    sim.wiki_errors["7001"] = [(400, 131006)]
    with _connector([], wiki_spaces=["7001"]) as c:
        found = c.discover(DiscoveryRequest(known={}))
    assert not found.complete and "FeishuPermissionError" in found.stats["errors"][0]
    assert sim.counters["wiki_nodes_requests"] == 1


# --------------------------------------------------------------------------- hostile server


def test_a_cursor_that_comes_back_is_a_typed_error_not_a_loop(sim: FeishuSimulator, client: FeishuClient) -> None:
    folder = sim.add_folder("f")
    sim.list_cursor_loop = 50  # has_more: true with the same next_page_token, 50 times
    with pytest.raises(fe.FeishuDataError, match="repeated"):
        list(client.list_folder(folder))
    assert sim.counters["list_requests"] == 2
