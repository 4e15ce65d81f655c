"""An hourly request budget per Yuque token, shared by every worker through Redis.

Yuque limits a token's account to about 5000 requests an hour and answers 429 beyond it. Several
Airflow workers fetch in parallel with the same token, so each one counting for itself would
overrun the limit; they count in one Redis key per token and clock hour instead (fixed window:
``INCR`` + ``EXPIRE``, atomic in a pipeline). Without Redis the count lives in this process, which
is right for a single worker and the tests.

The token itself is never stored: keys carry a short SHA-256 of it.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Any

from plugins.connectors.yuque.errors import YuqueBudgetExhausted

__all__ = ["RequestBudget", "token_fingerprint"]

log = logging.getLogger(__name__)

_WINDOW = 3600
_LOCAL_COUNTS: dict[str, int] = {}
_LOCAL_LOCK = threading.Lock()


def token_fingerprint(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()[:16]


class RequestBudget:
    """Take one request from the token's budget for the current hour, or raise.

    ``limit`` is deliberately below Yuque's 5000 by default so that a person using the same token
    in the browser or another tool still has room.
    """

    def __init__(self, token: str, *, limit: int = 4500, redis_url: str | None = None, prefix: str = "tributary:yuque"):
        if limit < 1:
            raise ValueError("budget limit must be >= 1")
        self.limit = limit
        self._prefix = f"{prefix}:budget:{token_fingerprint(token)}"
        self._redis: Any = None
        if redis_url:
            import redis

            self._redis = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)

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
        return used

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
            for old in [k for k in _LOCAL_COUNTS if k.startswith(self._prefix) and k != key]:
                del _LOCAL_COUNTS[old]
            return _LOCAL_COUNTS[key]

    def close(self) -> None:
        if self._redis is not None:
            self._redis.close()
