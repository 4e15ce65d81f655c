"""The Yuque client against the simulator: headers, typed errors, retries, paging, budget."""

from __future__ import annotations

import email.utils
import time
import uuid

import httpx
import pytest

from plugins.connectors.yuque.budget import RequestBudget
from plugins.connectors.yuque.client import DEFAULT_USER_AGENT, api_base_url
from plugins.connectors.yuque.errors import (
    YuqueAuthError,
    YuqueBudgetExhausted,
    YuqueNotFoundError,
    YuquePermissionError,
    YuqueRateLimitError,
    YuqueServerError,
    YuqueValidationError,
)
from tests.yuque.conftest import TOKEN, make_client


def test_base_url_forms():
    assert api_base_url("www.yuque.com") == "https://www.yuque.com/api/v2"
    assert api_base_url("https://acme.yuque.com/") == "https://acme.yuque.com/api/v2"
    assert api_base_url("http://127.0.0.1:9/api/v2") == "http://127.0.0.1:9/api/v2"


def test_token_and_user_agent_always_sent(sim, yuque_url):
    with make_client(yuque_url, user_agent="") as client:
        assert client.get_user()["login"] == "alice"
    assert sim.requests[-1]["user_agent"] == DEFAULT_USER_AGENT


def test_simulator_refuses_missing_user_agent(sim, yuque_url):
    response = httpx.get(f"{yuque_url}/api/v2/user", headers={"X-Auth-Token": TOKEN, "User-Agent": ""})
    assert response.status_code == 403 and response.json()["status"] == 403
    sim.require_user_agent = False
    assert httpx.get(f"{yuque_url}/api/v2/user", headers={"X-Auth-Token": TOKEN, "User-Agent": ""}).status_code == 200


@pytest.mark.parametrize(
    ("token", "path", "error", "status"),
    [
        ("wrong-token", "/user", YuqueAuthError, 401),
        (TOKEN, "/repos/alice/missing", YuqueNotFoundError, 404),
        (TOKEN, "/repos/bob/private", YuquePermissionError, 403),
    ],
)
def test_final_errors_are_typed_and_never_retried(sim, yuque_url, token, path, error, status):
    sim.add_account("bob")
    sim.add_repo("bob", "private")
    sim.invisible_status = 403  # real Yuque answers 404 for a repo the token cannot see
    sleeps: list[float] = []
    with make_client(yuque_url, token, sleep=sleeps.append) as client, pytest.raises(error) as info:
        client.get(path)
    assert info.value.status == status and info.value.message
    assert sim.counters["requests"] == 1 and sleeps == []


def test_auth_error_carries_yuque_message(yuque_url):
    with make_client(yuque_url, "nope") as client, pytest.raises(YuqueAuthError) as info:
        client.get_user()
    assert "Unauthorized" in str(info.value) and info.value.body == {"status": 401, "message": "Unauthorized"}


def test_limit_above_100_is_422(sim, yuque_url):
    repo = sim.add_repo("alice", "kb")
    with make_client(yuque_url) as client, pytest.raises(YuqueValidationError) as info:
        client.get(f"/repos/{repo.namespace}/docs", {"limit": 101})
    assert info.value.status == 422


def test_429_burst_retried_honouring_retry_after(sim, yuque_url):
    sim.burst_429, sim.retry_after = 2, "3"
    sleeps: list[float] = []
    with make_client(yuque_url, sleep=sleeps.append, max_retry_after=60) as client:
        assert client.get_user()["login"] == "alice"
    assert sleeps == [3.0, 3.0]
    assert sim.counters["status:429"] == 2 and sim.counters["user"] == 1


def test_429_without_retry_after_backs_off_exponentially(sim, yuque_url):
    sim.burst_429, sim.retry_after = 3, None
    sleeps: list[float] = []
    with make_client(yuque_url, sleep=sleeps.append, backoff_initial=0.5, backoff_max=4) as client:
        client.get_user()
    assert len(sleeps) == 3 and all(0 < s <= 4.5 for s in sleeps)


def test_http_date_retry_after_is_honoured_and_capped(sim, yuque_url):
    # RFC 9110 allows an HTTP-date too; Yuque has not been seen sending one, a proxy might
    sim.burst_429, sim.retry_after = 1, email.utils.formatdate(time.time() + 30, usegmt=True)
    sleeps: list[float] = []
    with make_client(yuque_url, sleep=sleeps.append, max_retry_after=60) as client:
        client.get_user()
        assert client.retry_policy.stats["retry/yuque/retry_after_honoured"] == 1
    (slept,) = sleeps
    assert 25.0 < slept <= 30.0
    sim.burst_429, sim.retry_after = 1, email.utils.formatdate(time.time() + 86400, usegmt=True)
    with make_client(yuque_url, sleep=sleeps.append, max_retry_after=10) as client:
        client.get_user()
    assert sleeps[1:] == [10.0]


def test_retry_after_is_capped(sim, yuque_url):
    sim.burst_429, sim.retry_after = 1, "86400"
    sleeps: list[float] = []
    with make_client(yuque_url, sleep=sleeps.append, max_retry_after=10) as client:
        client.get_user()
    assert sleeps == [10.0]


def test_server_errors_retried_then_raised(sim, yuque_url):
    sim.burst_500 = 2
    with make_client(yuque_url, sleep=lambda s: None) as client:
        assert client.get_user()["login"] == "alice"
    sim.burst_500 = 10
    with make_client(yuque_url, sleep=lambda s: None, max_attempts=3) as client, pytest.raises(YuqueServerError):
        client.get_user()
    assert sim.counters["status:500"] == 2 + 3


def test_rate_limit_error_after_attempts_exhausted(sim, yuque_url):
    sim.burst_429 = 10
    with make_client(yuque_url, sleep=lambda s: None, max_attempts=2) as client, pytest.raises(YuqueRateLimitError):
        client.get_user()
    assert sim.counters["status:429"] == 2


def test_doc_paging_by_100_checked_against_total(sim, yuque_url):
    repo = sim.add_repo("alice", "big")
    for i in range(250):
        sim.add_doc(repo, f"文档 {i}")
    with make_client(yuque_url) as client:
        listing = client.list_docs(repo.namespace, page_size=500)
    assert listing.complete and listing.total == 250 and len(listing.records) == 250
    pages = [r["query"] for r in sim.requests if r["path"].endswith("/docs")]
    assert [(p["offset"], p["limit"]) for p in pages] == [("0", "100"), ("100", "100"), ("200", "100")]


def test_listing_that_changes_mid_walk_is_incomplete(sim, yuque_url):
    repo = sim.add_repo("alice", "busy")
    docs = [sim.add_doc(repo, f"d{i}") for i in range(150)]

    def delete_one(path: str) -> None:
        if path.endswith("/docs") and docs[5].deleted_at is None:
            sim.delete_doc(docs[5])  # shifts every later doc one place up: doc #100 is skipped

    sim.on_request = delete_one
    with make_client(yuque_url) as client:
        listing = client.list_docs(repo.namespace)
    assert not listing.complete and "changed while paging" in listing.reason


def test_deleted_listing(sim, yuque_url):
    repo = sim.add_repo("alice", "kb")
    gone = sim.add_doc(repo, "旧文档")
    sim.add_doc(repo, "新文档")
    sim.delete_doc(gone)
    with make_client(yuque_url) as client:
        listing = client.list_docs(repo.namespace, deleted=True)
    assert [(r["id"], bool(r["deleted_at"])) for r in listing.records] == [(gone.id, True)]


@pytest.mark.redis
def test_budget_shared_through_redis(sim, yuque_url, redis_url):
    token_budget = dict(limit=5, redis_url=redis_url)
    with (
        make_client(yuque_url, budget=RequestBudget(TOKEN, **token_budget)) as a,
        make_client(yuque_url, budget=RequestBudget(TOKEN, **token_budget)) as b,
    ):
        for client in (a, b, a, b, a):
            client.get_user()
        with pytest.raises(YuqueBudgetExhausted) as info:
            b.get_user()
    assert sim.counters["requests"] == 5  # the over-budget request was never sent
    assert 0 < info.value.reset_in <= 3600


def test_budget_in_process_fallback_and_unreachable_redis(sim, yuque_url):
    token = f"tok-{uuid.uuid4().hex}"  # fresh key: the in-process count is per token and hour
    sim.tokens[token] = "alice"
    first, second = RequestBudget(token, limit=3), RequestBudget(token, limit=3, redis_url="redis://127.0.0.1:1/0")
    with make_client(yuque_url, token, budget=first) as a, make_client(yuque_url, token, budget=second) as b:
        a.get_user()
        b.get_user()  # Redis refused: counted in this process, together with `a`
        a.get_user()
        sleeps: list[float] = []
        b._sleep = sleeps.append
        with pytest.raises(YuqueBudgetExhausted):
            b.get_user()
    assert sim.counters["requests"] == 3 and sleeps == []  # not retried inside the task


@pytest.mark.redis
def test_budget_holds_across_processes(sim, yuque_url, redis_url):
    import multiprocessing

    from tests.yuque._budget_worker import spend

    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.starmap(spend, [(yuque_url, TOKEN, redis_url, 7, 6)] * 2)
    assert sum(s for s, _ in results) == 7 and sum(r for _, r in results) == 5
    assert sim.counters["user"] == 7
