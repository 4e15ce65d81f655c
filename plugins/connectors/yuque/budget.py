"""An hourly request budget and a per-second pace per Yuque *account*, shared through Redis.

Yuque limits an account (not a token: every token of one user or team draws on the same limit)
to about 5000 requests an hour and answers 429 beyond it; bursts are refused too (public
exporters hit "x-ratelimit-limit" errors with ~200 parallel fetches: web-farmer/yuque-exporter
PR #1, DIYgod/RSSHub PR #2156). Several Airflow workers fetch in parallel, so each one counting
for itself would overrun the limit; they count in one Redis key per account and clock hour
instead (fixed window: ``INCR`` + ``EXPIRE``, atomic in a pipeline), and take send slots spaced
``1 / per_second`` apart from one shared schedule (GCRA: a Lua script keeps the next free slot,
on Redis's clock). Without Redis both live in this process, which is right for a single worker
and the tests.

Until the client has asked ``/user`` whose account a token is (:meth:`RequestBudget.bind`), the
scope is the token. The token itself is never stored: keys carry a short SHA-256 of it.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from plugins.connectors.yuque.errors import YuqueBudgetExhausted

__all__ = ["RequestBudget", "token_fingerprint"]

log = logging.getLogger(__name__)

_WINDOW = 3600
_LOCAL_COUNTS: dict[str, int] = {}
_LOCAL_SLOTS: dict[str, float] = {}
_LOCAL_LOCK = threading.Lock()
_MAX_PACE_WAIT = 60.0  # a schedule further ahead than this is refused, not slept through

# Reserve the next send slot: slot = max(now, next_free); next_free = slot + interval.
# Returns the wait in microseconds (Redis TIME, so every worker shares one clock).
_PACE_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nxt = tonumber(redis.call('GET', KEYS[1]) or '0')
local slot = math.max(now, nxt)
redis.call('SET', KEYS[1], slot + tonumber(ARGV[1]), 'PX', 60000 + math.ceil((slot - now) / 1000))
return slot - now
"""


def token_fingerprint(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()[:16]


class RequestBudget:
    """Take one request from the token's budget for the current hour, or raise.

    ``limit`` is deliberately below Yuque's 5000 by default so that a person using the same token
    in the browser or another tool still has room.
    """

    def __init__(
        self,
        token: str,
        *,
        limit: int = 4500,
        per_second: float | None = None,
        redis_url: str | None = None,
        prefix: str = "tributary:yuque",
        sleep: Callable[[float], None] = time.sleep,
    ):
        if limit < 1:
            raise ValueError("budget limit must be >= 1")
        if per_second is not None and per_second <= 0:
            raise ValueError("per_second must be > 0")
        self.limit = limit
        self.per_second = per_second
        self.account: str | None = None
        self._root = prefix
        self._prefix = f"{prefix}:budget:{token_fingerprint(token)}"
        self._sleep = sleep
        self._redis: Any = None
        if redis_url:
            import redis

            self._redis = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)

    def bind(self, account: str) -> None:
        """Count from now on under ``account`` (Yuque's ``/user`` id), shared by all its tokens."""
        self.account = account
        self._prefix = f"{self._root}:budget:account:{account}"

    def _key(self, now: float) -> tuple[str, float]:
        window = int(now // _WINDOW)
        return f"{self._prefix}:{window}", (window + 1) * _WINDOW - now

    def acquire(self) -> int:
        """Count one request; returns how many this window has used, including this one."""
        key, reset_in = self._key(time.time())
        used = self._incr(key)
        if used > self.limit:
            raise YuqueBudgetExhausted(
                f"hourly Yuque request budget of {self.limit} spent; refills in {reset_in:.0f}s", reset_in=reset_in
            )
        if self.per_second is not None:
            self._pace()
        return used

    def _pace(self) -> None:
        """Wait for this request's send slot (``1 / per_second`` after the previous one)."""
        interval = 1.0 / float(self.per_second or 1.0)
        wait = self._reserve_slot(f"{self._prefix}:pace", interval)
        if wait > _MAX_PACE_WAIT:
            raise YuqueBudgetExhausted(f"Yuque send schedule is {wait:.0f}s ahead; try later", reset_in=wait)
        if wait > 0:
            self._sleep(wait)

    def _reserve_slot(self, key: str, interval: float) -> float:
        if self._redis is not None:
            try:
                return int(self._redis.eval(_PACE_SCRIPT, 1, key, int(interval * 1_000_000))) / 1_000_000
            except Exception as exc:
                log.warning("Redis request pace unavailable (%s); pacing in this process", type(exc).__name__)
                self._redis = None
        with _LOCAL_LOCK:
            now = time.monotonic()
            slot = max(now, _LOCAL_SLOTS.get(key, 0.0))
            _LOCAL_SLOTS[key] = slot + interval
            return slot - now

    def used(self) -> int:
        key, _ = self._key(time.time())
        if self._redis is not None:
            try:
                return int(self._redis.get(key) or 0)
            except Exception:
                pass
        with _LOCAL_LOCK:
            return _LOCAL_COUNTS.get(key, 0)

    def _incr(self, key: str) -> int:
        if self._redis is not None:
            try:
                pipe = self._redis.pipeline()
                pipe.incr(key)
                pipe.expire(key, _WINDOW + 60)
                used, _ = pipe.execute()
                return int(used)
            except Exception as exc:
                log.warning("Redis request budget unavailable (%s); counting in this process", type(exc).__name__)
                self._redis = None
        with _LOCAL_LOCK:
            _LOCAL_COUNTS[key] = _LOCAL_COUNTS.get(key, 0) + 1
            # forget windows that are over so a long-lived worker does not grow the dict
            for old in [k for k in _LOCAL_COUNTS if k.startswith(self._prefix + ":") and k != key]:
                del _LOCAL_COUNTS[old]
            return _LOCAL_COUNTS[key]

    def close(self) -> None:
        if self._redis is not None:
            self._redis.close()
