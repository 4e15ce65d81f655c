"""Per-host request spacing, shared by every worker that crawls the host.

Each request first *reserves* a start slot for its host: the slot is the later of "now" and the
host's next free slot, and the next free slot moves on by the host's delay. Reservation is one
atomic Redis script (with Redis' own clock), so two Airflow workers crawling one host together
still keep the gap between any two of their requests; without Redis the same logic runs in
process. 429/503 answers push the host's next slot out (``Retry-After``) and double its delay
for a while.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

__all__ = ["LocalPoliteness", "Politeness", "RedisPoliteness", "make_politeness"]

# KEYS[1] = next-slot key (ms since epoch), KEYS[2] = penalty-delay key (ms)
# ARGV[1] = delay ms, ARGV[2] = key ttl ms. Returns ms to wait before starting the request.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local delay = tonumber(ARGV[1])
local penalty = tonumber(redis.call('GET', KEYS[2]) or '0')
if penalty > delay then delay = penalty end
local slot = tonumber(redis.call('GET', KEYS[1]) or '0')
if slot < now then slot = now end
redis.call('SET', KEYS[1], slot + delay, 'PX', math.max(tonumber(ARGV[2]), delay * 2))
return slot - now
"""

# KEYS as above; ARGV[1] = push next slot to at least now + this many ms,
# ARGV[2] = penalty delay ms, ARGV[3] = penalty ttl ms.
_PENALIZE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ms = now + tonumber(ARGV[1])
local slot = tonumber(redis.call('GET', KEYS[1]) or '0')
if slot < until_ms then slot = until_ms end
redis.call('SET', KEYS[1], slot, 'PX', tonumber(ARGV[1]) + tonumber(ARGV[3]))
redis.call('SET', KEYS[2], ARGV[2], 'PX', tonumber(ARGV[3]))
return slot - now
"""

_MAX_PENALTY_S = 60.0
_PENALTY_TTL_S = 300.0


class Politeness(Protocol):
    async def wait(self, host: str, delay: float) -> None:
        """Sleep until this request may start, ``delay`` seconds after the previous one."""

    async def penalize(self, host: str, retry_after: float | None, delay: float) -> None:
        """The host said slow down (429/503): wait ``retry_after`` and space requests out."""

    async def close(self) -> None: ...


class LocalPoliteness:
    """In-process fallback: one asyncio event loop's requests to a host keep the gap."""

    def __init__(self) -> None:
        self._next: dict[str, float] = {}
        self._penalty: dict[str, tuple[float, float]] = {}  # host -> (delay, expires)

    def _delay(self, host: str, delay: float, now: float) -> float:
        penalty, expires = self._penalty.get(host, (0.0, 0.0))
        return max(delay, penalty) if expires > now else delay

    async def wait(self, host: str, delay: float) -> None:
        now = time.monotonic()
        effective = self._delay(host, delay, now)
        slot = max(now, self._next.get(host, 0.0))
        self._next[host] = slot + effective
        if slot > now:
            await asyncio.sleep(slot - now)

    async def penalize(self, host: str, retry_after: float | None, delay: float) -> None:
        now = time.monotonic()
        pause = min(retry_after if retry_after is not None else max(delay, 1.0), _MAX_PENALTY_S)
        self._next[host] = max(self._next.get(host, 0.0), now + pause)
        current = self._delay(host, delay, now)
        self._penalty[host] = (min(max(current * 2, 1.0), _MAX_PENALTY_S), now + _PENALTY_TTL_S)

    async def close(self) -> None:
        return None


class RedisPoliteness:
    """Redis-backed: every process using the same Redis and key prefix shares the slots."""

    def __init__(self, url: str, prefix: str = "tributary:web:polite") -> None:
        import redis.asyncio as aioredis

        self._redis = aioredis.Redis.from_url(url)
        self._prefix = prefix
        self._reserve = self._redis.register_script(_RESERVE)
        self._penalize = self._redis.register_script(_PENALIZE)
        self._penalties: dict[str, float] = {}

    def _keys(self, host: str) -> list[str]:
        return [f"{self._prefix}:{host}:next", f"{self._prefix}:{host}:penalty"]

    async def wait(self, host: str, delay: float) -> None:
        # Always ask Redis, even with no delay configured: another worker may have been told
        # to slow down by this host.
        delay_ms = int(delay * 1000)
        wait_ms = await self._reserve(keys=self._keys(host), args=[delay_ms, int(_PENALTY_TTL_S * 1000)])
        if int(wait_ms) > 0:
            await asyncio.sleep(int(wait_ms) / 1000)

    async def penalize(self, host: str, retry_after: float | None, delay: float) -> None:
        pause = min(retry_after if retry_after is not None else max(delay, 1.0), _MAX_PENALTY_S)
        penalty = min(max(delay * 2, self._penalties.get(host, 0.0) * 2, 1.0), _MAX_PENALTY_S)
        self._penalties[host] = penalty
        await self._penalize(
            keys=self._keys(host), args=[int(pause * 1000), int(penalty * 1000), int(_PENALTY_TTL_S * 1000)]
        )

    async def close(self) -> None:
        await self._redis.aclose()


def make_politeness(redis_url: str | None) -> LocalPoliteness | RedisPoliteness:
    return RedisPoliteness(redis_url) if redis_url else LocalPoliteness()
