"""Per-host request spacing, shared by every worker that crawls the host.

With a delay configured, a request to a host takes the host's *slot*: it waits until no other
request to the host is in flight and ``delay`` seconds have passed since the previous one
*finished*, holds the slot while it runs, and on release sets the next free time to
``now + delay``. Measuring from completion (not from the moment a request was scheduled) is
what makes the gap hold as the server sees it: client-side latency between taking a slot and
the bytes reaching the server can only make gaps longer, never shorter.

The slot lives in Redis (atomic scripts, Redis' own clock), so two Airflow workers crawling one
host together still keep the gap; without Redis the same logic runs in process. 429/503
answers push the host's next free time out (``Retry-After``) and double its delay for a while.
With no delay and no penalty, requests to a host run concurrently (benchmarks, own sites).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

__all__ = ["LocalPoliteness", "Politeness", "RedisPoliteness", "make_politeness"]

_MAX_PENALTY_S = 60.0
_PENALTY_TTL_S = 300.0

# KEYS: busy, next, penalty. ARGV: token, delay ms, lock ttl ms.
# Returns 0 when the slot was taken, else ms to wait before asking again.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local delay = tonumber(ARGV[2])
local penalty = tonumber(redis.call('GET', KEYS[3]) or '0')
local nxt = tonumber(redis.call('GET', KEYS[2]) or '0')
if delay <= 0 and penalty <= 0 and nxt <= now then return 0 end
local busy = redis.call('PTTL', KEYS[1])
if busy > 0 then return math.min(busy, 50) end
if nxt > now then return nxt - now end
redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[3]))
return 0
"""

# KEYS: busy, next, penalty. ARGV: token, delay ms. Frees the slot; next free time = now + delay.
_RELEASE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
local delay = tonumber(ARGV[2])
local penalty = tonumber(redis.call('GET', KEYS[3]) or '0')
if penalty > delay then delay = penalty end
if delay <= 0 then return 0 end
local nxt = tonumber(redis.call('GET', KEYS[2]) or '0')
if nxt < now + delay then nxt = now + delay end
redis.call('SET', KEYS[2], nxt, 'PX', delay + 60000)
return 0
"""

# KEYS: busy, next, penalty. ARGV: pause ms, penalty delay ms, penalty ttl ms.
_PENALIZE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nxt = tonumber(redis.call('GET', KEYS[2]) or '0')
if nxt < now + tonumber(ARGV[1]) then nxt = now + tonumber(ARGV[1]) end
redis.call('SET', KEYS[2], nxt, 'PX', tonumber(ARGV[1]) + tonumber(ARGV[3]))
redis.call('SET', KEYS[3], ARGV[2], 'PX', tonumber(ARGV[3]))
return 0
"""


class Politeness(Protocol):
    def slot(self, host: str, delay: float, hold_seconds: float) -> AsyncIterator[None]:
        """Async context manager: run one request to ``host`` inside it."""

    async def penalize(self, host: str, retry_after: float | None, delay: float) -> None:
        """The host said slow down (429/503): wait ``retry_after`` and space requests out."""

    async def close(self) -> None: ...


def _penalty_for(retry_after: float | None, delay: float, previous: float) -> tuple[float, float]:
    pause = min(retry_after if retry_after is not None else max(delay, 1.0), _MAX_PENALTY_S)
    penalty = min(max(delay * 2, previous * 2, 1.0), _MAX_PENALTY_S)
    return pause, penalty


class LocalPoliteness:
    """In-process fallback: the requests of one event loop keep the gap."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._next: dict[str, float] = {}
        self._penalty: dict[str, tuple[float, float]] = {}  # host -> (delay, expires)

    def _effective(self, host: str, delay: float) -> float:
        penalty, expires = self._penalty.get(host, (0.0, 0.0))
        return max(delay, penalty) if expires > time.monotonic() else delay

    @asynccontextmanager
    async def slot(self, host: str, delay: float, hold_seconds: float = 0.0) -> AsyncIterator[None]:
        if self._effective(host, delay) <= 0 and self._next.get(host, 0.0) <= time.monotonic():
            yield
            return
        lock = self._locks.setdefault(host, asyncio.Lock())
        async with lock:
            wait = self._next.get(host, 0.0) - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                yield
            finally:
                gap = self._effective(host, delay)
                self._next[host] = max(self._next.get(host, 0.0), time.monotonic() + gap)

    async def penalize(self, host: str, retry_after: float | None, delay: float) -> None:
        now = time.monotonic()
        pause, penalty = _penalty_for(retry_after, delay, self._effective(host, 0.0))
        self._next[host] = max(self._next.get(host, 0.0), now + pause)
        self._penalty[host] = (penalty, now + _PENALTY_TTL_S)

    async def close(self) -> None:
        return None


class RedisPoliteness:
    """Redis-backed: every process using the same Redis and key prefix shares the slots."""

    def __init__(self, url: str, prefix: str = "tributary:web:polite") -> None:
        import redis.asyncio as aioredis

        self._redis = aioredis.Redis.from_url(url)
        self._prefix = prefix
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._release = self._redis.register_script(_RELEASE)
        self._penalize = self._redis.register_script(_PENALIZE)
        self._penalties: dict[str, float] = {}

    def _keys(self, host: str) -> list[str]:
        return [f"{self._prefix}:{host}:{part}" for part in ("busy", "next", "penalty")]

    @asynccontextmanager
    async def slot(self, host: str, delay: float, hold_seconds: float = 120.0) -> AsyncIterator[None]:
        keys = self._keys(host)
        token = uuid.uuid4().hex
        delay_ms = int(delay * 1000)
        # The lock expires on its own if this worker dies mid-request.
        hold_ms = int(max(hold_seconds, 1.0) * 1000) + 5000
        while True:
            wait_ms = int(await self._acquire(keys=keys, args=[token, delay_ms, hold_ms]))
            if wait_ms <= 0:
                break
            await asyncio.sleep(wait_ms / 1000)
        try:
            yield
        finally:
            await self._release(keys=keys, args=[token, delay_ms])

    async def penalize(self, host: str, retry_after: float | None, delay: float) -> None:
        pause, penalty = _penalty_for(retry_after, delay, self._penalties.get(host, 0.0))
        self._penalties[host] = penalty
        await self._penalize(
            keys=self._keys(host), args=[int(pause * 1000), int(penalty * 1000), int(_PENALTY_TTL_S * 1000)]
        )

    async def close(self) -> None:
        await self._redis.aclose()


def make_politeness(redis_url: str | None) -> LocalPoliteness | RedisPoliteness:
    return RedisPoliteness(redis_url) if redis_url else LocalPoliteness()
