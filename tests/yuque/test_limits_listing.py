"""Issue 20, points 6 and 16: the account's limits, redirects, table schemas, incremental listing."""

from __future__ import annotations

import io
import uuid

import openpyxl
import pytest

from include.contract import VersionEvidence
from include.index import open_index
from plugins.connectors.base import DiscoveryRequest
from plugins.connectors.yuque.budget import RequestBudget
from plugins.connectors.yuque.connector import YuqueConnector
from plugins.connectors.yuque.errors import YuqueBudgetExhausted, YuqueRateLimitError, YuqueRedirectError
from plugins.engine import run_pipeline
from tests.yuque.conftest import make_client, yuque_source

# ----------------------------------------------------------------------- 6. limits, 3xx, schemas


def test_requests_are_paced_below_the_burst_limit(sim, yuque_url):
    # Yuque refuses bursts (exporters with ~200 parallel fetches get 429); a paced client is
    # never refused. Pacing is what is checked, not speed: the simulator counts the 429s.
    sim.per_second_limit = 5
    token = f"tok-{uuid.uuid4().hex}"
    sim.tokens[token] = "alice"
    with make_client(yuque_url, token, budget=RequestBudget(token, per_second=3)) as client:
        for _ in range(10):
            client.get_user()
    assert sim.counters["status:429"] == 0 and sim.counters["user"] == 10


def test_unpaced_client_meets_the_burst_limit(sim, yuque_url):
    # the simulator's side of the test above: without pacing, the burst limit answers 429
    sim.per_second_limit = 2
    with make_client(yuque_url, max_attempts=1) as client, pytest.raises(YuqueRateLimitError):
        for _ in range(10):
            client.get_user()
    assert sim.counters["status:429"] >= 1


@pytest.mark.redis
def test_budget_is_per_account_not_per_token(sim, yuque_url, redis_url):
    # two tokens of one account (a personal token and one for a tool) draw on one hourly limit
    first, second = f"a-{uuid.uuid4().hex}", f"b-{uuid.uuid4().hex}"
    sim.tokens[first] = sim.tokens[second] = "alice"
    budgets = [RequestBudget(t, limit=5, redis_url=redis_url) for t in (first, second)]
    with (
        make_client(yuque_url, first, budget=budgets[0], bind_account=True) as a,
        make_client(yuque_url, second, budget=budgets[1], bind_account=True) as b,
    ):
        a.get("/hello")  # + the /user that learns the account: 2
        b.get("/hello")  # 4
        a.get("/hello")  # 5
        with pytest.raises(YuqueBudgetExhausted):
            b.get("/hello")
    assert budgets[0].account == budgets[1].account == str(sim.accounts["alice"]["id"])
    assert sim.counters["requests"] == 5


def test_redirect_is_final_and_never_followed(sim, yuque_url):
    sim.redirect_to = "https://space.example.invalid/api/v2/user"
    sleeps: list[float] = []
    with make_client(yuque_url, sleep=sleeps.append) as client, pytest.raises(YuqueRedirectError) as info:
        client.get_user()
    assert info.value.status == 302 and info.value.location == sim.redirect_to
    assert "Connection host" in info.value.message
    assert sim.counters["requests"] == 1 and sleeps == []  # not retried, not followed


def test_table_schema_from_body_table_meta(sim, yuque_conn):
    repo = sim.add_repo("alice", "kb", "知识库")
    doc = sim.add_doc(
        repo,
        "任务表",
        format="laketable",
        columns=[{"id": "c1", "name": "任务", "type": "text"}, {"id": "c2", "name": "负责人", "type": "text"}],
        records=[["写周报", "小王"]],
        columns_in="meta",  # the schema only in body_table.meta.columns
    )
    with YuqueConnector(yuque_source()) as conn:
        found = conn.discover(DiscoveryRequest(known={}, only_keys=[f"{repo.id}/{doc.id}"]))
        raw = conn.fetch(found.changes[0])
    ws = openpyxl.load_workbook(io.BytesIO(raw.data)).active
    assert [c.value for c in ws[1]] == ["任务", "负责人"] and [c.value for c in ws[2]] == ["写周报", "小王"]


# ----------------------------------------------------------------------- 16. incremental listing


def _listing_queries(sim) -> list[dict]:
    return [r["query"] for r in sim.requests if r["path"].endswith("/docs") and "deleted" not in r["query"]]


def test_incremental_listing_after_the_first_run(sim, yuque_conn, tributary_home):
    repo = sim.add_repo("alice", "kb", "知识库")
    docs = [sim.add_doc(repo, f"文档{i}", body=f"正文 inc{i}x。") for i in range(120)]  # > one page
    # no overlap: the simulator shares our clock (real Yuque's may be off by a few minutes)
    source = yuque_source(incremental_overlap_minutes=0)
    sim.settle()  # the 120 quick edits ran ahead of the wall clock the listing is stamped with
    assert run_pipeline(source).counts["new"] == 120
    assert all("changed_at_gte" not in q for q in _listing_queries(sim))  # nothing known: in full

    sim.reset_counters()
    sim.edit_doc(docs[7], body="正文 inc7x 改过。")
    added = sim.add_doc(repo, "新文档", body="正文 addedx。")
    summary = run_pipeline(source)
    assert (summary.counts["changed"], summary.counts["new"], summary.counts["unchanged"]) == (1, 1, 119)
    assert summary.counts["listing_complete"] is True
    (query,) = _listing_queries(sim)  # one page: only what changed since the last run
    assert query["changed_at_gte"] <= docs[7].updated_at
    assert summary.counts["source_stats"]["incremental_repos"] == 1
    assert added.id and summary.counts["source_stats"]["docs_listed"] == 2  # not the 121 of a full listing


def test_incremental_listing_falls_back_to_full_when_counts_disagree(sim, yuque_conn, tributary_home):
    repo = sim.add_repo("alice", "kb", "知识库")
    docs = [sim.add_doc(repo, f"文档{i}", body=f"正文 full{i}x。") for i in range(6)]
    source = yuque_source(deleted_listing=False)
    run_pipeline(source)
    del repo.docs[docs[1].id]  # gone without a tombstone: items_count says 5, we know 6
    sim.reset_counters()
    summary = run_pipeline(source)
    assert summary.counts["deleted"] == 1 and summary.counts["unchanged"] == 5
    queries = _listing_queries(sim)
    assert "changed_at_gte" in queries[0] and "changed_at_gte" not in queries[-1]  # then in full
    assert summary.counts["source_stats"]["incremental_repos"] == 0


def test_incremental_off_for_windows_and_by_option(sim, yuque_conn):
    repo = sim.add_repo("alice", "kb", "知识库")
    doc = sim.add_doc(repo, "文档", body="正文")
    known = {f"{repo.id}/{doc.id}": VersionEvidence(modified_time=doc.content_updated_at)}
    with YuqueConnector(yuque_source(incremental_listing=False)) as conn:
        conn.discover(DiscoveryRequest(known=known))
    with YuqueConnector(yuque_source()) as conn:
        conn.discover(DiscoveryRequest(known=known, full_resync=True))
    assert all("changed_at_gte" not in q for q in _listing_queries(sim))


def test_incremental_listing_reaches_back_to_a_failed_fetch(sim, yuque_conn, tributary_home):
    # a doc whose edit failed to fetch must be listed again later, though newer edits committed
    repo = sim.add_repo("alice", "kb", "知识库")
    docs = [sim.add_doc(repo, f"文档{i}", body=f"正文 retry{i}x。") for i in range(6)]
    source = yuque_source(incremental_overlap_minutes=0)
    run_pipeline(source)
    sim.edit_doc(docs[0], body="正文 retry0x 第二版 secondx。")
    docs[0].format = "board"  # its fetch now fails (for this run only)
    sim.edit_doc(docs[1], body="正文 retry1x 第二版。")  # a newer edit that commits fine
    failed = run_pipeline(source)
    assert (failed.counts["failed"] + failed.counts["skipped"], failed.counts["changed"]) == (1, 1)
    docs[0].format = "markdown"  # the doc itself is not touched again
    sim.reset_counters()
    retried = run_pipeline(source)
    assert retried.counts["changed"] == 1 and sim.counters[f"doc:{docs[0].id}"] == 1
    assert retried.counts["source_stats"]["incremental_repos"] == 1
    index = open_index(source.index)
    try:
        assert index.search("secondx", source=source.source_id)
    finally:
        index.close()
