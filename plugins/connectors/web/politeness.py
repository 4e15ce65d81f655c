"""Per-host request spacing, shared by every worker that crawls the host.

With a delay configured, a request to a host takes the host's *slot*: it waits until no other
request to the host is in flight and ``delay`` seconds have passed since the previous one
*finished*, and holds the slot while it runs. Measuring from completion (not from the moment a
request was scheduled) is what makes the gap hold as the server sees it: client-side latency
between taking a slot and the bytes reaching the server can only make gaps longer, never shorter.

The slot is a lease of one request per ``delay`` in the shared :mod:`include.ratelimit`
log of the host (in Redis when configured, so two Airflow workers crawling one host together
still keep the gap; else in this process). What is the web's own lives here: the delay per host
(``delay_for``: the source's delay or the robots.txt Crawl-delay), and how a 429/503 slows the
host down: nothing before its ``Retry-After``, and the host's delay doubled for a while. With no
delay and no penalty, requests to a host run concurrently (benchmarks, own sites).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from include.ratelimit import LocalStore, Rate, RateLimiter

__all__ = ["LocalPoliteness", "Politeness", "RedisPoliteness", "make_politeness"]

_MAX_PENALTY_S = 60.0
_PENALTY_TTL_S = 300.0
# A slot's lease outlives the request's own time budget, so that a worker that dies mid-request
# frees the host on its own, and only then.
_LEASE_MARGIN_S = 5.0


class Politeness:
    """Host slots on a :class:`RateLimiter` (scope key ``<prefix>:<host>``)."""

    def __init__(self, limiter: RateLimiter, prefix: str = "tributary:web:polite") -> None:
        self.limiter = limiter
        self._prefix = prefix

    def _key(self, host: str) -> str:
        return f"{self._prefix}:{host}"

    @asynccontextmanager
    async def slot(self, host: str, delay: float, hold_seconds: float = 120.0) -> AsyncIterator[None]:
        """Async context manager: run one request to ``host`` inside it."""
        key, member = self._key(host), uuid.uuid4().hex
        lease = max(hold_seconds, 1.0) + _LEASE_MARGIN_S
        # No deadline of its own: the fetcher gives the queueing time back to the URL's budget.
        taken = await self.limiter.acquire_async(key, (Rate(1, delay),), lease=lease, member=member, max_wait=1e9)
        try:
            yield
        finally:
            if taken.recorded:
                await self.limiter.release_async(key, member)

    async def penalize(self, host: str, retry_after: float | None, delay: float) -> None:
        """The host said slow down (429/503): wait ``retry_after`` and space requests out."""
        pause = min(retry_after if retry_after is not None else max(delay, 1.0), _MAX_PENALTY_S)
        await self.limiter.penalize_async(
            self._key(host),
            pause=pause,
            floor=min(max(delay * 2, 1.0), _MAX_PENALTY_S),
            growth=2.0,
            cap=_MAX_PENALTY_S,
            ttl=_PENALTY_TTL_S,
        )

    async def close(self) -> None:
        self.limiter.close()


class LocalPoliteness(Politeness):
    """In-process: the requests of this crawl keep the gap (a store of its own)."""

    def __init__(self) -> None:
        super().__init__(RateLimiter("web", store=LocalStore()))


class RedisPoliteness(Politeness):
    """Redis-backed: every process using the same Redis and key prefix shares the slots."""

    def __init__(self, url: str, prefix: str = "tributary:web:polite") -> None:
        # Should Redis fail mid-crawl, the crawl goes on spacing its own requests.
        super().__init__(RateLimiter("web", redis_url=url, store=LocalStore()), prefix)


def make_politeness(redis_url: str | None) -> Politeness:
    return RedisPoliteness(redis_url) if redis_url else LocalPoliteness()
