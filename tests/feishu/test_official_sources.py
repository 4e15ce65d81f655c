"""Issue 32, Feishu: behaviour checked against the official sources (feishu-api.md, corrections of
2026-12-04): app-credential hints, export polling, raw_content's size limit, sheet/bitable budgets
and error shapes, the meta query's doc_type enum, slides, and the user-token refresh chain."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
from pathlib import Path

import pytest
import sqlalchemy as sa

from include.config import SourceConfig
from include.stores import open_state_store
from plugins.connectors.base import ConnectorContext, DiscoveryRequest
from plugins.connectors.feishu import errors as fe
from plugins.connectors.feishu.budget import RequestBudget
from plugins.connectors.feishu.client import FeishuClient, FeishuSettings
from plugins.connectors.feishu.connector import FeishuConnector
from plugins.connectors.feishu.discovery import meta_status
from plugins.engine import run_pipeline
from tests.feishu._workers import token_worker
from tests.simulators.feishu import FeishuSimulator


def _connector(folders: list[str], **options) -> FeishuConnector:
    opts = {"folders": folders, "export_poll_interval": 0.05, "export_poll_max_interval": 0.2, **options}
    return FeishuConnector(SourceConfig(kind="feishu", name="drive", options=opts), ConnectorContext(redis_url=None))


# --------------------------------------------------------------------------- token call hints


@pytest.mark.parametrize("case", ["bad_app_id", "bad_secret", "code_10015"])
def test_app_credential_refusals_name_both_app_id_and_secret(
    sim: FeishuSimulator, settings: FeishuSettings, case: str
) -> None:
    if case == "bad_app_id":  # larksuite/cli's tests: 10003 (HTTP 400)
        settings = dataclasses.replace(settings, app_id="cli_nosuchapp")
    elif case == "bad_secret":  # 10014 (HTTP 200)
        settings = dataclasses.replace(settings, app_secret="wrong")
    else:  # the generic error table's wrong-secret code
        sim.token_error = (200, 10015, "credential invalid")
    with FeishuClient(settings) as client, pytest.raises(fe.FeishuCredentialsError) as info:
        client.root_folder_token()
    assert info.value.code == {"bad_app_id": 10003, "bad_secret": 10014, "code_10015": 10015}[case]
    assert "app id" in str(info.value) and "app secret" in str(info.value)


# --------------------------------------------------------------------------- exports


def test_job_status_0_without_a_file_token_is_still_pending(sim: FeishuSimulator, feishu_conn: str) -> None:
    folder = sim.add_folder("f")
    doc = sim.add("docx", "慢文档", folder, "# 标题\n正文", export_tokenless_polls=2)
    with _connector([folder]) as c:
        docs, failures = c.fetch_batch(c.discover(DiscoveryRequest(known={})).changes)
    assert failures == [] and [d.item_key for d in docs] == [doc]
    assert sim.counters["export_polls"] >= 4  # two pending, two "0 without a token", one done


def test_raw_content_too_large_falls_back_to_the_export(sim: FeishuSimulator, feishu_conn: str) -> None:
    folder = sim.add_folder("f")
    big = sim.add("docx", "大文档", folder, "# 大\n很长的正文", raw_content_too_large=True)
    small = sim.add("docx", "小文档", folder, "短")
    with _connector([folder], docx_fetch="raw_content") as c:
        docs, failures = c.fetch_batch(c.discover(DiscoveryRequest(known={})).changes)
    assert failures == []
    names = {d.item_key: d.file_name for d in docs}
    assert names == {big: "大文档.docx", small: "小文档.txt"}
    assert sim.export_creations_by_token == {big: 1}


# --------------------------------------------------------------------------- sheets / bitable


def test_sheet_and_bitable_budgets_are_the_documented_ones() -> None:
    budget = RequestBudget("cli_budget_probe", padding=0.0)
    sheets = [budget.reserve("sheets_query") for _ in range(101)]  # 100/min
    tables = [budget.reserve("bitable_tables") for _ in range(21)]  # 20/s
    assert sheets[:100] == [0.0] * 100 and sheets[100] > 0
    assert tables[:20] == [0.0] * 20 and tables[20] > 0


def test_sheet_and_bitable_errors_are_typed_by_their_code(sim: FeishuSimulator, client: FeishuClient) -> None:
    gone_sheet, hidden_sheet = sim.add("sheet", "删", "", [["a"]]), sim.add("sheet", "藏", "", [["a"]])
    gone_base, base = sim.add("bitable", "删表", "", [["a"]]), sim.add("bitable", "表", "", [["a"]])
    sim.trash(gone_sheet), sim.unshare(hidden_sheet), sim.trash(gone_base)
    with pytest.raises(fe.FeishuNotFoundError) as deleted:  # HTTP 400 + 1310249
        client.sheet_ids(gone_sheet)
    with pytest.raises(fe.FeishuPermissionError):  # HTTP 400 + 1310213
        client.sheet_ids(hidden_sheet)
    with pytest.raises(fe.FeishuNotFoundError) as no_base:  # HTTP 200 + 1254040
        client.bitable_table_ids(gone_base)
    assert (deleted.value.status, deleted.value.code) == (400, 1310249)
    assert (no_base.value.status, no_base.value.code) == (200, 1254040)
    sim.api_errors["bitable_tables"] = [(200, 1254290), (200, 1254002)]  # too many requests, internal
    assert len(client.bitable_table_ids(base)) == 1  # both retried
    assert sim.counters["bitable_tables_requests"] == 1 + 3


# --------------------------------------------------------------------------- metas/batch_query


def test_meta_query_sends_only_documented_doc_types(sim: FeishuSimulator, client: FeishuClient) -> None:
    deleted, alive = sim.add("docx", "删", "", "x"), sim.add("sheet", "在", "", [["a"]])
    sim.trash(deleted)
    status = meta_status(client, {deleted, alive})
    assert status.gone == {deleted: "deleted at source"} and status.alive == {alive} and not status.unknown
    assert sim.counters["meta_refused"] == 0


def test_a_refused_doc_type_leaves_the_others_deciding(sim: FeishuSimulator, client: FeishuClient) -> None:
    deleted, alive = sim.add("docx", "删", "", "x"), sim.add("bitable", "在", "", [["a"]])
    sim.trash(deleted)
    sim.meta_refused_types = {"sheet"}  # 400 with a field violation on request_docs.doc_type
    status = meta_status(client, {deleted, alive})
    assert status.gone == {deleted: "deleted at source"} and status.alive == {alive} and not status.unknown
    assert status.refused_types == {"sheet"} and sim.counters["meta_refused"] >= 1


# --------------------------------------------------------------------------- slides


def test_slides_are_asked_once_then_skipped_as_not_exportable(
    sim: FeishuSimulator, feishu_conn: str, tributary_home: Path
) -> None:
    folder = sim.add_folder("汇报")
    decks = [sim.add("slides", f"演示{i}", folder, "路线图") for i in range(2)]
    doc = sim.add("docx", "文档", folder, "# 正文\n内容")
    opts = {"folders": [folder], "export_poll_interval": 0.05, "export_poll_max_interval": 0.2}
    source = SourceConfig(kind="feishu", name="slides", conn_id="feishu_default", options=opts)
    first = run_pipeline(source)
    sim.add("slides", "新演示", folder, "第三季度")
    second = run_pipeline(source)
    for run in (first, second):
        assert run.status == "success" and run.counts["failed"] == 0
    assert (first.counts["new"], first.counts["skipped"]) == (1, 2)
    assert (second.counts["unchanged"], second.counts["skipped"]) == (1, 3)
    assert sim.counters["slides_export_refusals"] == 1  # asked once, remembered for the second run
    store = open_state_store()
    try:
        skipped = store.run_items(first.run_id, "skipped", source=source.source_id)
        states = store.items(source.source_id)
    finally:
        store.close()
    assert {(r["item_key"], r["reason"]) for r in skipped} == {(d, "slides_not_exportable") for d in decks}
    assert set(states) == {doc}  # no failure state, so nothing to quarantine


# --------------------------------------------------------------------------- user token chain


def _user(settings: FeishuSettings, refresh: str, **kw) -> FeishuSettings:
    return dataclasses.replace(settings, auth="user", refresh_token=refresh, redis_url=None, **kw)


def test_user_mode_without_redis_or_a_key_is_refused_before_spending(
    sim: FeishuSimulator, settings: FeishuSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("TRIBUTARY_SECRET_KEY", "AIRFLOW__CORE__FERNET_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(fe.FeishuTokenStoreError, match="token_store_key or TRIBUTARY_SECRET_KEY"):
        FeishuClient(_user(settings, sim.grant_user()))
    assert sim.counters["user_token_refreshes"] == 0


def test_refresh_codes_reuse_grant_end_and_retry(
    sim: FeishuSimulator, settings: FeishuSettings, secret_key: str, tmp_path: Path
) -> None:
    refresh = sim.grant_user()
    sim.refresh_errors = [20050]  # a server error: retried with the same (unspent) token
    with FeishuClient(_user(settings, refresh, token_store_url=f"sqlite:///{tmp_path / 'a.db'}")) as c:
        assert c.root_folder_token() == sim.root_token
    assert sim.counters["user_token_refreshes"] == 2
    # another store (a lost chain) still holds the Connection's token, which is spent: 20064
    spent_chain = FeishuClient(_user(settings, refresh, token_store_url=f"sqlite:///{tmp_path / 'b.db'}"))
    with spent_chain as c, pytest.raises(fe.FeishuCredentialsError, match="already used") as reused:
        c.tokens.get()
    assert reused.value.code == 20064 and sim.counters["user_refresh_reuse_rejections"] == 1
    ended = sim.grant_user()
    sim.expired_grants.add(ended)
    spent_chain = FeishuClient(_user(settings, ended, token_store_url=f"sqlite:///{tmp_path / 'c.db'}"))
    with spent_chain as c, pytest.raises(fe.FeishuCredentialsError, match="authorization has ended") as over:
        c.tokens.get()
    assert over.value.code == 20037


def _issued_tokens(sim: FeishuSimulator) -> set[str]:
    return {*sim.spent_refresh_tokens, *sim.user_refresh_tokens, *(t for t in sim._tokens if t.startswith("u-"))}


def _two_processes_share_the_chain(sim: FeishuSimulator, settings: FeishuSettings, store_url: str) -> None:
    folder = sim.add_folder("我的空间")
    sim.add("docx", "d", folder, "x")
    shared = dataclasses.asdict(_user(settings, sim.grant_user(), token_store_url=store_url))
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["tests.feishu._workers", "plugins.connectors.feishu.client", "sqlalchemy", "httpx"])
    start, phase2, results = ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=token_worker, args=(shared, folder, start, phase2, results)) for _ in range(2)]
    for p in procs:
        p.start()
    try:
        _collect(results, 2, "ready")
        start.set()  # both need a user token at once: one refresh, the other takes the stored one
        assert _collect(results, 2, "phase1") == [1, 1]
        sim.expire_user_tokens()  # 99991677 to both: one refresh, with the rotated refresh token
        phase2.set()
        assert _collect(results, 2, "phase2") == [1, 1]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    assert sim.counters["user_token_refreshes"] == 2 and sim.counters["user_refresh_reuse_rejections"] == 0


def _collect(results, n: int, tag: str) -> list:
    out = []
    while len(out) < n:
        kind, value = results.get(timeout=120)
        assert kind != "error", value
        if kind == tag:
            out.append(value)
    return out


def test_user_chain_across_processes_in_sqlite(
    sim: FeishuSimulator, settings: FeishuSettings, secret_key: str, tmp_path: Path
) -> None:
    db = tmp_path / "state.db"
    _two_processes_share_the_chain(sim, settings, f"sqlite:///{db}")
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("state.db"))
    assert b"gAAAAA" in stored  # a Fernet token is there ...
    assert not [t for t in _issued_tokens(sim) if t.encode() in stored]  # ... and no token in clear


@pytest.mark.postgres
def test_user_chain_across_processes_in_postgres(
    sim: FeishuSimulator, settings: FeishuSettings, secret_key: str, postgres_url: str
) -> None:
    _two_processes_share_the_chain(sim, settings, postgres_url)
    engine = sa.create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            rows = [str(r) for r in conn.execute(sa.text("SELECT * FROM tributary_credentials"))]
    finally:
        engine.dispose()
    assert len(rows) == 1 and "gAAAAA" in rows[0]
    assert not [t for t in _issued_tokens(sim) if t in rows[0]]
