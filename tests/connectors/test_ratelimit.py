"""The shared rate limiter: a sliding-window log per scope, in Redis across processes, and the
same algorithm in process (its fallback). Waits are read from the limiter's answers, never timed."""

from __future__ import annotations

import asyncio
import multiprocessing
import uuid
from collections.abc import Iterator

import pytest
import redis

from include.ratelimit import Decision, LocalStore, Rate, RateLimiter, RateLimitTimeout
from tests.connectors._limiter_worker import hold_lease, reserve_many


@pytest.fixture(params=["redis", "local"])
def limiter(request: pytest.FixtureRequest) -> Iterator[RateLimiter]:
    """The same tests against both backends: one algorithm behind one interface."""
    if request.param == "redis":
        made = RateLimiter("test", redis_url=request.getfixturevalue("redis_url"))
        assert made.shared
    else:
        made = RateLimiter("test", store=LocalStore())
        assert not made.shared
    yield made
    made.close()


# A refused request is told to ask again 1 ms after a place frees.
SETTLE = 0.001


def _key() -> str:
    return f"tributary:test:limit:{uuid.uuid4().hex}"


@pytest.mark.redis
def test_two_processes_share_one_limit_through_redis(redis_url: str) -> None:
    key, ctx = _key(), multiprocessing.get_context("spawn")
    start = ctx.Manager().Event()
    with ctx.Pool(2) as pool:
        pending = [pool.apply_async(reserve_many, (redis_url, key, 7, 60.0, 10, start)) for _ in range(2)]
        start.set()
        admitted = [p.get(60) for p in pending]
    assert sum(admitted) == 7  # 20 asks, two processes, one limit of 7 a minute
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.type(key) == b"zset" and client.zcard(key) == 7 and client.pttl(key) > 0
    finally:
        client.close()


@pytest.mark.redis
def test_a_lease_held_by_another_process_keeps_the_scope_busy(redis_url: str) -> None:
    key, member = _key(), uuid.uuid4().hex
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(hold_lease, (redis_url, key, member))
    here = RateLimiter("here", redis_url=redis_url, poll_seconds=0.05)
    busy = here.reserve(key, (Rate(1, 30.0),))
    assert not busy.admitted and busy.wait == pytest.approx(0.05) and "1 per 30s used up" in busy.reason
    here.release(key, member)  # the request ended (the other process would say so itself)
    after = here.reserve(key, (Rate(1, 30.0),))
    assert 29.0 < after.wait <= 30.0 + SETTLE  # the window now runs from the request's completion
    here.close()


def test_sliding_window_admits_limit_then_says_how_long(limiter: RateLimiter) -> None:
    key, rates = _key(), (Rate(3, 30.0),)
    assert [limiter.reserve(key, rates).admitted for _ in range(3)] == [True, True, True]
    refused = limiter.reserve(key, rates)
    assert not refused.admitted and 29.0 < refused.wait <= 30.0 + SETTLE
    assert refused.reason.startswith("3 per 30s used up")
    assert limiter.stats["ratelimit/test/admitted"] == 3 and limiter.stats["ratelimit/test/delayed"] == 1


def test_the_tighter_of_two_windows_wins(limiter: RateLimiter) -> None:
    key, rates = _key(), (Rate(100, 1.0), Rate(2, 60.0))
    assert limiter.reserve(key, rates).admitted and limiter.reserve(key, rates).admitted
    refused = limiter.reserve(key, rates)
    assert refused.wait > 59.0 and refused.reason.startswith("2 per 60s")


def test_no_window_means_no_limit_and_nothing_recorded(limiter: RateLimiter) -> None:
    key = _key()
    decisions = [limiter.reserve(key, (Rate(1, 0.0),), lease=10.0) for _ in range(5)]
    assert all(d.admitted and not d.recorded for d in decisions)
    assert limiter.reserve(key, ()).reason == "no limit"


def test_lease_holds_until_release_then_window_runs_from_completion(limiter: RateLimiter) -> None:
    key, rates = _key(), (Rate(1, 20.0),)
    taken = limiter.reserve(key, rates, lease=60.0, member="m1")
    assert taken.admitted and taken.recorded
    in_flight = limiter.reserve(key, rates, lease=60.0, member="m2")
    assert in_flight.wait == pytest.approx(0.05)  # in flight: ask again soon, it may end any moment
    limiter.release(key, "m1")
    done = limiter.reserve(key, rates, lease=60.0, member="m2")
    assert 19.0 < done.wait <= 20.0 + SETTLE


def test_penalize_pauses_then_widens_windows_doubling_to_a_cap(limiter: RateLimiter) -> None:
    key = _key()
    assert limiter.penalize(key, pause=5.0, floor=1.0, growth=2.0, cap=3.0, ttl=300.0) == pytest.approx(1.0)
    paused = limiter.reserve(key, (Rate(1, 0.0),))
    assert 4.0 < paused.wait <= 5.0 and "slow-down" in paused.reason
    assert limiter.penalize(key, pause=0.0, floor=1.0, growth=2.0, cap=3.0, ttl=300.0) == pytest.approx(2.0)
    assert limiter.penalize(key, pause=0.0, floor=1.0, growth=2.0, cap=3.0, ttl=300.0) == pytest.approx(3.0)
    # the pause is still on: only a fresh scope shows the floor alone
    other = _key()
    limiter.penalize(other, pause=0.0, floor=2.5, ttl=300.0)
    first = limiter.reserve(other, (Rate(1, 0.0),))
    assert first.admitted and first.recorded  # a window of 0 is widened to the 2.5 s floor
    second = limiter.reserve(other, (Rate(1, 0.0),))
    assert 2.0 < second.wait <= 2.5 + SETTLE and "(at least 2.5s after a slow-down)" in second.reason
    assert limiter.stats["ratelimit/test/penalized"] == 4


def test_acquire_refuses_a_wait_past_max_wait(limiter: RateLimiter) -> None:
    key, rates = _key(), (Rate(1, 30.0),)
    limiter.acquire(key, rates, max_wait=1.0)
    slept: list[float] = []
    with pytest.raises(RateLimitTimeout) as info:
        limiter.acquire(key, rates, max_wait=1.0, sleep=slept.append)
    assert slept == [] and info.value.wait > 29.0 and isinstance(info.value, TimeoutError)
    assert limiter.stats["ratelimit/test/refused"] == 1


def test_acquire_async_waits_its_turn(limiter: RateLimiter) -> None:
    key, rates = _key(), (Rate(1, 0.2),)

    async def twice() -> list[Decision]:
        # the second sleeps the limiter's own answer, then is admitted
        return [await limiter.acquire_async(key, rates) for _ in range(2)]

    first, second = asyncio.run(twice())
    assert first.admitted and second.admitted
    assert limiter.stats["ratelimit/test/admitted"] == 2 and limiter.stats["ratelimit/test/delayed"] >= 1


def test_fixed_window_counter_is_shared(limiter: RateLimiter) -> None:
    key = _key()
    counts = [limiter.count(key, 3600) for _ in range(3)]
    assert [used for used, _ in counts] == [1, 2, 3]
    assert all(0 < reset_in <= 3600 for _, reset_in in counts)
    assert limiter.used(key, 3600) == 3


@pytest.mark.redis
def test_fixed_window_counter_in_redis_is_one_string_per_window(redis_url: str) -> None:
    key, first, second = _key(), RateLimiter("a", redis_url=redis_url), RateLimiter("b", redis_url=redis_url)
    assert first.count(key, 3600)[0] == 1 and second.count(key, 3600)[0] == 2
    client = redis.Redis.from_url(redis_url)
    try:
        (stored,) = client.keys(f"{key}:*")
        assert int(client.get(stored) or 0) == 2 and 0 < client.ttl(stored) <= 3660
    finally:
        client.close()
        first.close()
        second.close()


def test_unreachable_redis_falls_back_to_the_process_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    store = LocalStore()
    broken = RateLimiter("test", redis_url="redis://127.0.0.1:1/0", store=store)
    local = RateLimiter("test", store=store)
    key, rates = _key(), (Rate(2, 60.0),)
    assert broken.shared
    assert broken.reserve(key, rates).admitted and local.reserve(key, rates).admitted
    assert not broken.reserve(key, rates).admitted  # counted together with `local`, in this process
    assert not broken.shared and broken.stats["ratelimit/test/redis_fallback"] == 1
    assert "limiting in this process" in caplog.text
    broken.close()
