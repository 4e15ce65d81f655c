"""Tenant token and request budgets shared across real worker processes through Redis."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import threading

import pytest

from plugins.connectors.feishu.budget import RequestBudget
from plugins.connectors.feishu.client import FeishuClient, FeishuSettings
from tests.feishu._workers import download_worker, token_worker
from tests.simulators.feishu import FeishuSimulator

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def _context():
    """Real processes forked from a clean fork server that imported the client once (spawning
    ten interpreters that each import it costs most of a minute on two cores)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["tests.feishu._workers", "plugins.connectors.feishu.client", "redis", "httpx"])
    return ctx


def _collect(results, n: int, tag: str) -> list:
    out = []
    while len(out) < n:
        kind, value = results.get(timeout=120)
        assert kind != "error", value
        if kind == tag:
            out.append(value)
    return out


def test_ten_processes_make_one_token_request_and_one_refresh(
    sim: FeishuSimulator, settings: FeishuSettings, redis_url: str
) -> None:
    folder = sim.add_folder("共享")
    for i in range(3):
        sim.add("docx", f"文档{i}", folder, "x")
    ctx = _context()
    start, phase2, results = ctx.Event(), ctx.Event(), ctx.Queue()
    shared = dataclasses.asdict(dataclasses.replace(settings, redis_url=redis_url))
    procs = [ctx.Process(target=token_worker, args=(shared, folder, start, phase2, results)) for _ in range(10)]
    for p in procs:
        p.start()
    try:
        _collect(results, 10, "ready")
        start.set()  # all ten ask for a token at once
        assert _collect(results, 10, "phase1") == [3] * 10
        assert sim.counters["token_requests"] == 1

        sim.expire_tokens()  # mid-run: every cached token is now rejected
        phase2.set()
        assert _collect(results, 10, "phase2") == [3] * 10
        assert sim.counters["token_requests"] == 2  # exactly one refresh
        assert sim.counters["tokens_issued"] == 2
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()


def test_threads_without_redis_share_one_in_process_token(sim: FeishuSimulator, settings: FeishuSettings) -> None:
    folder = sim.add_folder("f")
    clients = [FeishuClient(settings) for _ in range(8)]
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def run(c: FeishuClient) -> None:
        try:
            barrier.wait()
            list(c.list_folder(folder))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in clients:
        c.close()
    assert not errors
    assert sim.counters["token_requests"] == 1


def test_stale_token_drop_keeps_a_refreshed_one(sim: FeishuSimulator, settings: FeishuSettings, redis_url: str) -> None:
    with FeishuClient(dataclasses.replace(settings, redis_url=redis_url)) as c:
        old = c.tokens.get()
        sim.expire_tokens()
        c.tokens.invalidate(old)
        new = c.tokens.get()
        c.tokens.invalidate(old)  # a slower worker reporting the old token must not drop the new one
        assert c.tokens.get() == new != old
    assert sim.counters["token_requests"] == 2


def test_budget_windows(redis_url: str) -> None:
    import redis

    r = redis.Redis.from_url(redis_url)
    limits = {"x": [[3, 30.0]], "y": [[100, 1.0], [2, 60.0]]}
    budget = RequestBudget("cli_budget", redis_client=r, limits=limits, padding=0.0)
    assert [budget.reserve("x") for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = budget.reserve("x")
    assert 29.0 < wait <= 30.01
    other = RequestBudget("cli_budget", redis_client=r, limits={"x": [[3, 30.0]]}, padding=0.0)  # another worker
    assert other.reserve("x") > 29.0
    assert budget.reserve("y") == budget.reserve("y") == 0.0
    assert budget.reserve("y") > 59.0  # the tighter of two windows wins
    assert budget.reserve("unlimited") == 0.0
    r.close()


def test_shared_budget_keeps_processes_under_the_server_limit(
    sim: FeishuSimulator, settings: FeishuSettings, redis_url: str
) -> None:
    sim.enforce_limits = {"file_download": (5, 1.0)}  # the documented 5 downloads/s per app
    folder = sim.add_folder("files")
    tokens = [sim.add("file", f"文件{i}.txt", folder, b"x" * (i + 1)) for i in range(16)]
    ctx = _context()
    start, results = ctx.Event(), ctx.Queue()
    shared = dataclasses.asdict(dataclasses.replace(settings, redis_url=redis_url))
    procs = [ctx.Process(target=download_worker, args=(shared, tokens[i::4], start, results)) for i in range(4)]
    for p in procs:
        p.start()
    try:
        _collect(results, 4, "ready")
        start.set()
        done = _collect(results, 4, "done")
    finally:
        for p in procs:
            p.join(30)
    assert sum(len(d) for d in done) == 16
    assert sim.counters["file_downloads"] == 16
    assert sim.counters["rate_limited"] == 0  # four workers together never exceeded 5/s
