"""Run in a spawned process by the shared-limiter test: kept light, it imports only the limiter."""

from __future__ import annotations

from typing import Any

from include.ratelimit import Rate, RateLimiter


def reserve_many(redis_url: str, key: str, limit: int, window: float, attempts: int, start: Any) -> int:
    """Wait for ``start``, then ask ``attempts`` times without waiting; -> how many were admitted."""
    limiter = RateLimiter("worker", redis_url=redis_url)
    start.wait(30)
    try:
        return sum(limiter.reserve(key, (Rate(limit, window),)).admitted for _ in range(attempts))
    finally:
        limiter.close()


def hold_lease(redis_url: str, key: str, member: str) -> bool:
    """Take the one slot of ``key`` with a lease and keep it (released by the parent)."""
    limiter = RateLimiter("worker", redis_url=redis_url)
    try:
        return limiter.reserve(key, (Rate(1, 30.0),), lease=60.0, member=member).admitted
    finally:
        limiter.close()
