"""The client against the simulator: envelope decoding, token rules, pagination, retries."""

from __future__ import annotations

import email.utils
import time
from urllib.parse import quote

import pytest

from plugins.connectors.feishu.client import FeishuClient, FeishuSettings, filename_from_disposition
from plugins.connectors.feishu.errors import (
    FeishuAuthError,
    FeishuNotFoundError,
    FeishuParamError,
    FeishuPermissionError,
    FeishuRateLimited,
    FeishuServerError,
    FeishuTokenInvalid,
    error_from_response,
)
from tests.simulators.feishu import FeishuSimulator


def test_error_tree_from_envelopes() -> None:
    hdr = {"x-ogw-ratelimit-reset": "3"}
    limited = error_from_response(429, {"code": 99991400, "msg": "request trigger frequency limit"}, hdr)
    assert isinstance(limited, FeishuRateLimited) and limited.retry_after == 3.0 and limited.retryable
    assert isinstance(error_from_response(400, {"code": 1069923}, hdr), FeishuRateLimited)
    assert isinstance(error_from_response(400, {"code": 1061045}, {}), FeishuRateLimited)
    expired = error_from_response(400, {"code": 99991663, "msg": "x", "error": {"log_id": "L1"}})
    assert isinstance(expired, FeishuTokenInvalid) and expired.log_id == "L1" and isinstance(expired, FeishuAuthError)
    scope = error_from_response(400, {"code": 99991672, "error": {"permission_violations": [{"subject": "drive"}]}})
    assert isinstance(scope, FeishuPermissionError) and not scope.retryable
    assert scope.details["permission_violations"][0]["subject"] == "drive"
    assert isinstance(error_from_response(404, {"code": 1069906}), FeishuNotFoundError)
    assert isinstance(error_from_response(410, {"code": 1069906}), FeishuNotFoundError)
    assert isinstance(error_from_response(400, {"code": 1064001}), FeishuParamError)
    assert isinstance(error_from_response(500, {"code": 1061001}), FeishuServerError)
    assert isinstance(error_from_response(503, None), FeishuServerError)
    assert isinstance(error_from_response(200, {"code": 10014, "msg": "app secret invalid"}), FeishuAuthError)


def test_content_disposition_both_styles() -> None:
    name = "季度报告 v2.docx"
    assert filename_from_disposition(f"attachment; filename=\"x.docx\"; filename*=UTF-8''{quote(name)}") == name
    raw = f'attachment; filename="{name}"'.encode().decode("latin-1")  # what httpx hands us
    assert filename_from_disposition(raw) == name
    assert filename_from_disposition("attachment; filename=plain.txt") == "plain.txt"
    assert filename_from_disposition("inline") is None


def test_token_issue_rules(sim: FeishuSimulator, client: FeishuClient) -> None:
    first, expire = client._fetch_token()
    assert first.startswith("t-") and expire == 7200
    sim.clock_offset = 3600  # 1 h left: same token, smaller expire
    same, left = client._fetch_token()
    assert same == first and left <= 3600
    sim.clock_offset = 5700  # < 30 min left: a new token, the old one stays valid
    fresh, _ = client._fetch_token()
    assert fresh != first
    assert sim._tokens[first] > sim.now()


def test_wrong_secret_is_an_auth_error(sim: FeishuSimulator, sim_url: str) -> None:
    bad = FeishuSettings(app_id=sim.app_id, app_secret="wrong", host=sim_url)
    with FeishuClient(bad) as c, pytest.raises(FeishuAuthError) as info:
        c.tokens.get()
    assert info.value.code == 10014
    assert "wrong" not in repr(bad)


def test_pagination_and_page_size_limit(sim: FeishuSimulator, client: FeishuClient) -> None:
    folder = sim.add_folder("大文件夹")
    for i in range(450):
        sim.add("docx", f"文档{i}", folder, "x", modified_time=1_700_000_000 + i)
    items = list(client.list_folder(folder))
    assert len(items) == 450 and len({i["token"] for i in items}) == 450
    assert sim.counters["list_requests"] == 3  # 200 + 200 + 50
    with pytest.raises(FeishuParamError) as info:
        list(client.list_folder(folder, page_size=201))
    assert info.value.code == 1064001


def test_root_listing_has_no_shortcuts(sim: FeishuSimulator, client: FeishuClient) -> None:
    doc = sim.add("docx", "根文档", "", "x")
    sim.add_shortcut("快捷方式", "", doc)
    data = client.call("GET", "/drive/v1/files", api="list", params={})
    assert [f["type"] for f in data["files"]] == ["docx"] and data["has_more"] is False


def test_expired_token_is_refreshed_once(sim: FeishuSimulator, client: FeishuClient) -> None:
    folder = sim.add_folder("f")
    sim.add("docx", "d", folder, "x")
    assert len(list(client.list_folder(folder))) == 1
    sim.expire_tokens()
    assert len(list(client.list_folder(folder))) == 1
    assert sim.counters["tokens_issued"] == 2 and sim.counters["token_rejections"] == 1


def test_permission_and_not_found_are_not_retried(sim: FeishuSimulator, client: FeishuClient) -> None:
    folder = sim.add_folder("secret")
    sim.unshare(folder)
    with pytest.raises(FeishuPermissionError):
        list(client.list_folder(folder))
    with pytest.raises(FeishuNotFoundError):
        list(client.list_folder("fldcnmissing"))
    assert sim.counters["list_requests"] == 2


def test_rate_limit_waits_reset_and_succeeds(sim: FeishuSimulator, client: FeishuClient) -> None:
    folder = sim.add_folder("f")
    sim.add("docx", "d", folder, "x")
    sim.burst(4, api="list", reset=0)  # more 429s than max_attempts: limits are bounded by time
    assert len(list(client.list_folder(folder))) == 1
    assert sim.counters["rate_limited"] == 4 and sim.counters["list_requests"] == 5
    # the shared policy's named stats: every retry waited the gateway's reset hint
    assert (
        client.retries.stats["retry/feishu/retries"] == client.retries.stats["retry/feishu/retry_after_honoured"] == 4
    )


def test_rate_limit_hint_from_a_standard_retry_after() -> None:
    # without the gateway's own header, a Retry-After in either RFC 9110 form is the hint
    def hint(headers: dict[str, str]) -> float | None:
        limited = error_from_response(429, {"code": 99991400, "msg": "request trigger frequency limit"}, headers)
        assert isinstance(limited, FeishuRateLimited)
        return limited.retry_after

    assert hint({"retry-after": "7"}) == 7.0
    dated = hint({"retry-after": email.utils.formatdate(time.time() + 30, usegmt=True)})
    assert dated is not None and 25.0 < dated <= 30.0
    assert hint({"x-ogw-ratelimit-reset": "3", "retry-after": "7"}) == 3.0  # the gateway's own first
    assert hint({"retry-after": "soon"}) is None


def test_settings_from_connection_feishu_and_lark_hosts() -> None:
    from include.connections import ConnectionRecord
    from plugins.connectors.feishu.connection import settings_from_conn

    lark = ConnectionRecord(
        conn_id="lark", conn_type="http", login="cli_x", password="pw-secret", host="https://open.larksuite.com"
    )
    assert settings_from_conn(lark).base_url == "https://open.larksuite.com/open-apis"
    bare = ConnectionRecord(conn_id="f", conn_type="http", login="cli_x", password="pw-secret")
    assert settings_from_conn(bare).base_url == "https://open.feishu.cn/open-apis"
    extra = ConnectionRecord(
        conn_id="e",
        conn_type="http",
        login="cli_x",
        password="pw-secret",
        extra={"base_url": "http://127.0.0.1:9/open-apis"},
    )
    assert settings_from_conn(extra).base_url == "http://127.0.0.1:9/open-apis"
    with pytest.raises(ValueError):
        settings_from_conn(ConnectionRecord(conn_id="n", conn_type="http", host="https://open.feishu.cn"))
