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

import hashlib
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, MutableMapping
from typing import Any

from cachetools import TLRUCache

__all__ = ["TokenCache", "UserTokenCache", "cache_life", "user_subject"]

# Compare-and-delete: only remove the cached token if it is the one that was rejected.
_DROP_IF_EQUAL_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# Process-wide fallback: value = (token, expires_at_monotonic).
_LOCAL: TLRUCache[str, tuple[str, float]] = TLRUCache(maxsize=256, ttu=lambda _k, v, now: v[1], timer=time.monotonic)
_LOCAL_LOCK = threading.Lock()


def cache_life(expire: int, margin: float) -> float:
    """Seconds a token answered with ``expire`` is used: never less than a second nor past its
    own life, ``margin`` seconds short of it when it lives long enough."""
    return max(1.0, min(float(expire) - margin, float(expire) * 0.9))


def _text(value: Any) -> str | None:
    """A Redis reply as text (clients built without ``decode_responses`` return bytes)."""
    return value.decode() if isinstance(value, bytes) else value


class _SharedToken(ABC):
    """What the tenant and the user token share: the key, the cache life, the Redis
    get-or-refresh under one lock, and the compare-and-delete invalidation.

    Subclasses say how a token is obtained (``_refresh_into_redis``, ``_get_local``) and which
    process-wide store backs the no-Redis case (``_local_store``).
    """

    kind: str
    _local_store: MutableMapping[str, tuple[str, float]]

    def __init__(self, app_id: str, key: str, *, redis_client: Any, safety_margin: float, lock_timeout: float) -> None:
        self.app_id = app_id
        self._redis = redis_client
        self._margin = safety_margin
        self._lock_timeout = lock_timeout
        self._key = key
        self._drop_script = redis_client.register_script(_DROP_IF_EQUAL_LUA) if redis_client is not None else None

    def _ttl(self, expire: int) -> float:
        return cache_life(expire, self._margin)

    def close(self) -> None:  # noqa: B027 - the Redis client belongs to the caller
        """Nothing of its own to release."""

    def get(self) -> str:
        if self._redis is None:
            return self._get_local()
        cached = _text(self._redis.get(self._key))
        if cached:
            return cached
        with self._redis.lock(f"{self._key}:lock", timeout=self._lock_timeout, blocking_timeout=self._lock_timeout + 5):
            cached = _text(self._redis.get(self._key))  # another worker may have refreshed meanwhile
            if cached:
                return cached
            return self._refresh_into_redis()

    @abstractmethod
    def _refresh_into_redis(self) -> str:
        """Obtain a new token and store it in Redis; called under the Redis lock."""

    @abstractmethod
    def _get_local(self) -> str:
        """The token from the process-wide store, obtaining a new one when it is missing or stale."""

    def invalidate(self, token: str) -> None:
        """Forget ``token`` if it is still the cached one."""
        if self._drop_script is not None:
            self._drop_script(keys=[self._key], args=[token])
            return
        with _LOCAL_LOCK:
            hit = self._local_store.get(self._key)
            if hit and hit[0] == token:
                del self._local_store[self._key]


class TokenCache(_SharedToken):
    """Get-or-fetch of one app's tenant token.

    ``fetch`` performs the token request and returns ``(token, expire_seconds)``; it is called
    at most once per expiry across all processes sharing ``redis_client``.
    """

    kind = "tenant"
    _local_store = _LOCAL

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
        super().__init__(
            app_id,
            f"{namespace}:{app_id}",
            redis_client=redis_client,
            safety_margin=safety_margin,
            lock_timeout=lock_timeout,
        )
        self._fetch = fetch

    def _refresh_into_redis(self) -> str:
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


def user_subject(initial_refresh_token: str) -> str:
    """The name of one authorization's refresh chain: a hash of the Connection's refresh token
    (never the token), so re-authorizing (a new token in the Connection) starts a new chain."""
    return hashlib.sha256(initial_refresh_token.encode()).hexdigest()[:16]


_NO_LOCAL: dict[str, tuple[str, float]] = {}


class UserTokenCache(_SharedToken):
    """Get-or-refresh of one user's ``user_access_token``, shared like the tenant token.

    ``refresh(refresh_token)`` performs ``POST /authen/v2/oauth/token`` (grant_type
    refresh_token) and returns ``(access_token, expires_in, new_refresh_token, refresh_expires_in)``.
    The newest refresh token lives in Redis next to the access token, under the same lock, so N
    workers make one refresh and none of them spends a refresh token another already used. The
    Connection's refresh token seeds the chain; the key is a hash of it (never the token itself),
    so re-authorizing (a new refresh token in the Connection) starts a new chain.
    """

    kind = "user"
    # never used: a user chain lives in Redis or in the state database (user_store.py), never
    # in one process, whose rotated refresh token would die with it
    _local_store = _NO_LOCAL

    def __init__(
        self,
        app_id: str,
        initial_refresh_token: str,
        refresh: Callable[[str], tuple[str, int, str, int]],
        *,
        redis_client: Any = None,
        safety_margin: float = 300.0,
        lock_timeout: float = 30.0,
        namespace: str = "tributary:feishu:user_token",
    ) -> None:
        super().__init__(
            app_id,
            f"{namespace}:{app_id}:{user_subject(initial_refresh_token)}",
            redis_client=redis_client,
            safety_margin=safety_margin,
            lock_timeout=lock_timeout,
        )
        self._initial = initial_refresh_token
        self._refresh = refresh

    def _refresh_into_redis(self) -> str:
        current = _text(self._redis.get(f"{self._key}:refresh")) or self._initial
        token, expire, new_refresh, refresh_expire = self._refresh(current)
        pipe = self._redis.pipeline()
        pipe.set(f"{self._key}:refresh", new_refresh, ex=max(60, int(refresh_expire)))
        pipe.set(self._key, token, px=int(self._ttl(expire) * 1000))
        pipe.execute()
        return token

    def _get_local(self) -> str:
        raise RuntimeError("a user token chain needs Redis here (user_store.open_user_tokens chooses)")
