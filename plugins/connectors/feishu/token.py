"""The tenant access token, shared by every worker of one app.

Feishu returns the *same* token while it has >= 30 minutes left, but each process that asks
costs a request, and the seed's per-process cache made N workers ask N times. Here the token
lives in Redis under ``tributary:feishu:token:<app_id>`` with TTL ``expire`` minus a safety
margin; a miss takes a Redis lock and checks the cache again before requesting, so N workers
starting together make one request. When a call is rejected with a token-invalid code the
cached token is dropped only if it is still the one that failed (compare-and-delete), so a
token another worker just refreshed survives. Without Redis a process-wide cachetools cache
behind a thread lock plays the same role.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from cachetools import TLRUCache

__all__ = ["TokenCache"]

# Compare-and-delete: only remove the cached token if it is the one that was rejected.
_DROP_IF_EQUAL_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# Process-wide fallback: value = (token, expires_at_monotonic).
_LOCAL: TLRUCache = TLRUCache(maxsize=256, ttu=lambda _k, v, now: v[1], timer=time.monotonic)
_LOCAL_LOCK = threading.Lock()


class TokenCache:
    """Get-or-fetch of one app's tenant token.

    ``fetch`` performs the token request and returns ``(token, expire_seconds)``; it is called
    at most once per expiry across all processes sharing ``redis_client``.
    """

    def __init__(
        self,
        app_id: str,
        fetch: Callable[[], tuple[str, int]],
        *,
        redis_client: Any = None,
        safety_margin: float = 300.0,
        lock_timeout: float = 30.0,
        namespace: str = "tributary:feishu:token",
    ) -> None:
        self.kind = "tenant"
        self.app_id = app_id
        self._fetch = fetch
        self._redis = redis_client
        self._margin = safety_margin
        self._lock_timeout = lock_timeout
        self._key = f"{namespace}:{app_id}"
        self._drop_script = redis_client.register_script(_DROP_IF_EQUAL_LUA) if redis_client is not None else None

    def _ttl(self, expire: int) -> float:
        # Never cache for less than a few seconds nor past the token's own life.
        return max(1.0, min(float(expire) - self._margin, float(expire) * 0.9))

    def get(self) -> str:
        if self._redis is None:
            return self._get_local()
        cached = self._redis.get(self._key)
        if cached:
            return cached.decode() if isinstance(cached, bytes) else cached
        with self._redis.lock(f"{self._key}:lock", timeout=self._lock_timeout, blocking_timeout=self._lock_timeout + 5):
            cached = self._redis.get(self._key)  # another worker may have refreshed meanwhile
            if cached:
                return cached.decode() if isinstance(cached, bytes) else cached
            token, expire = self._fetch()
            self._redis.set(self._key, token, px=int(self._ttl(expire) * 1000))
            return token

    def _get_local(self) -> str:
        hit = _LOCAL.get(self._key)
        if hit:
            return hit[0]
        with _LOCAL_LOCK:
            hit = _LOCAL.get(self._key)
            if hit:
                return hit[0]
            token, expire = self._fetch()
            _LOCAL[self._key] = (token, time.monotonic() + self._ttl(expire))
            return token

    def invalidate(self, token: str) -> None:
        """Forget ``token`` if it is still the cached one."""
        if self._drop_script is not None:
            self._drop_script(keys=[self._key], args=[token])
            return
        with _LOCAL_LOCK:
            hit = _LOCAL.get(self._key)
            if hit and hit[0] == token:
                del _LOCAL[self._key]
