"""Every body the Yuque client reads is capped while it streams (issue: "every size a server
controls is capped"): the simulator pads its answers past the limit (plain, or gzip so that
only the decoded size is large) and the client refuses them with a final typed error."""

from __future__ import annotations

import json

import pytest

from include.contract import Change, ChangeKind
from plugins.connectors.base import FetchError
from plugins.connectors.yuque.client import DEFAULT_MAX_RESPONSE_BYTES
from plugins.connectors.yuque.connector import YuqueConnector
from plugins.connectors.yuque.errors import YuqueAuthError, YuqueResponseTooLarge
from plugins.tributary_airflow.hooks.yuque import YuqueHook
from tests.yuque.conftest import FAST, TOKEN, make_client, yuque_source

MIB = 1024 * 1024


@pytest.fixture
def capped_conn(yuque_url: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """``yuque_default`` whose extra caps response bodies at 1 MiB; returns the cap."""
    extra = {**FAST, "max_response_bytes": MIB}
    conn = {"conn_type": "yuque", "host": yuque_url, "password": TOKEN, "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_YUQUE_DEFAULT", json.dumps(conn))
    return MIB


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
def test_an_answer_over_the_connection_limit_is_refused_and_not_retried(sim, capped_conn, gzipped):
    sim.oversize_body, sim.oversize_gzip = 16 * MIB, gzipped  # a gzip body is ~16 KiB on the wire
    hook = YuqueHook()
    try:
        with pytest.raises(YuqueResponseTooLarge) as info:
            hook.get_conn().get_user()
    finally:
        hook.close()
    err = info.value
    assert (err.endpoint, err.limit, err.retryable) == ("/user", capped_conn, False)
    assert "/user" in str(err) and str(capped_conn) in str(err)
    assert sim.counters["requests"] == sim.counters["oversized"] == 1  # final: asked once


def test_the_default_limit_is_64_mib_and_answers_under_it_pass(sim, yuque_url):
    assert DEFAULT_MAX_RESPONSE_BYTES == 64 * MIB
    sim.oversize_body = 2 * MIB
    with make_client(yuque_url) as client:
        assert client.max_response_bytes == DEFAULT_MAX_RESPONSE_BYTES
        assert client.get_user()["login"] == "alice"
    with make_client(yuque_url, max_response_bytes=MIB) as client, pytest.raises(YuqueResponseTooLarge):
        client.get_user()


def test_an_error_answer_is_read_up_to_64_kib_and_still_typed_by_its_status(sim, yuque_url):
    # the padding comes first: the message behind 16 MiB of it is never read, the 401 still counts
    sim.oversize_body, sim.oversize_errors = 16 * MIB, True
    with make_client(yuque_url, "wrong-token") as client, pytest.raises(YuqueAuthError) as info:
        client.get_user()
    assert (info.value.status, info.value.message) == (401, "Yuque API error 401: HTTP 401")
    assert sim.counters["requests"] == sim.counters["oversized"] == 1


def test_an_oversized_doc_detail_fails_that_doc_only(sim, capped_conn):
    kb = sim.add_repo("alice", "kb")
    big, small = sim.add_doc(kb, "big", body="large"), sim.add_doc(kb, "small", body="# small")
    sim.oversize_body, sim.oversize_only = 16 * MIB, lambda path: path.endswith(f"/docs/{big.id}")
    with YuqueConnector(yuque_source()) as conn:
        with pytest.raises(FetchError) as info:
            conn.fetch(Change(f"{kb.id}/{big.id}", ChangeKind.NEW))
        assert conn.fetch(Change(f"{kb.id}/{small.id}", ChangeKind.NEW)).data == b"# small"
    assert (info.value.reason, info.value.retryable) == ("too_large", False)
    assert f"/docs/{big.id}" in str(info.value)
