"""One request limiter for every connector: Redis-backed, with an in-process fallback.

A *scope* (one key: a web host, a Feishu app's API, a Yuque account's send schedule) keeps a
sliding-window log of its requests. :meth:`RateLimiter.reserve` admits a request when every
:class:`Rate` (``limit`` requests per ``seconds``) still has room in the last ``seconds``, and
records it; otherwise it answers how long to wait, with a one-line reason. A request may hold a
*lease*: it counts as in flight until :meth:`RateLimiter.release`, and its window runs from its
completion (the web's per-host politeness measures the gap from the end of one request to the
start of the next). :meth:`RateLimiter.penalize` is a server's "slow down": no request before a
pause has passed, and every window of the scope at least ``floor`` seconds for a while.

In Redis, a scope is one sorted set handled by one Lua script on Redis' own clock (``TIME``), so
every worker of every machine agrees; one key per script call keeps it Redis-Cluster safe.
Without Redis (or once Redis fails: logged, counted) the same algorithm runs in process.

:meth:`RateLimiter.count` is the other kind of budget: a counter per fixed clock window (Yuque's
hourly allowance refills on the hour), ``INCR`` + ``EXPIRE`` in Redis.

Stats are namespaced ``ratelimit/<name>/<event>`` (:attr:`RateLimiter.stats`).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["PROCESS_STORE", "Decision", "LocalStore", "Rate", "RateLimitTimeout", "RateLimiter"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_US = 1_000_000
# A refused request asks again 1 ms after a place frees, not at that microsecond: when many
# waiters wake for one freed place, the losers would otherwise spin on waits of a few us (and
# the entries recorded in one burst free their places together, 1 ms later).
_SETTLE_US = 1000

# KEYS[1]: the scope's log. ARGV[1]: op. Times in microseconds on Redis' clock. Control members
# ('~pause', '~floor:<us>') carry negative scores (minus their expiry), so that no window count,
# which looks at positive times only, ever sees them.
#   reserve  ARGV: member, lease us (0: none), poll us, then (limit, window us) per rate
#            -> {wait us, rate number that refused (0: none), recorded 0/1[, slow-down floor us]}
#   release  ARGV: member -> {0, 0, 0}
#   penalize ARGV: pause us, floor us, growth, cap us, ttl us -> {0, 0, new floor us}
_SCRIPT = """
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function n(x) return string.format('%.0f', x) end
local function keep(us)
  local ms = math.ceil(us / 1000) + 1000
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end
local pause, floor, floors = 0, 0, {}
local ctl = redis.call('ZRANGEBYSCORE', key, '-inf', '(0', 'WITHSCORES')
for i = 1, #ctl, 2 do
  local member, expiry = ctl[i], -tonumber(ctl[i + 1])
  if expiry <= now then redis.call('ZREM', key, member)
  elseif member == '~pause' then pause = expiry
  else floor = math.max(floor, tonumber(string.sub(member, 8))); floors[#floors + 1] = member end
end
local op = ARGV[1]
if op == 'release' then
  if redis.call('ZSCORE', key, ARGV[2]) then redis.call('ZADD', key, n(now), ARGV[2]) end
  return {0, 0, 0}
end
if op == 'penalize' then
  local untl = now + tonumber(ARGV[2])
  if untl > pause then redis.call('ZADD', key, n(-untl), '~pause') end
  local new = math.min(math.max(tonumber(ARGV[3]), floor * tonumber(ARGV[4])), tonumber(ARGV[5]))
  for _, member in ipairs(floors) do redis.call('ZREM', key, member) end
  redis.call('ZADD', key, n(-(now + tonumber(ARGV[6]))), '~floor:' .. n(new))
  keep(math.max(tonumber(ARGV[2]), tonumber(ARGV[6])))
  return {0, 0, new}
end
if pause > now then return {pause - now, -1, 0} end
local lease, poll, horizon = tonumber(ARGV[3]), tonumber(ARGV[4]), 0
for i = 5, #ARGV, 2 do horizon = math.max(horizon, tonumber(ARGV[i + 1]), floor) end
if horizon <= 0 then return {0, 0, 0} end
redis.call('ZREMRANGEBYSCORE', key, 0, n(now - horizon))
local worst, why = 0, 0
for i = 5, #ARGV, 2 do
  local limit, window = tonumber(ARGV[i]), math.max(tonumber(ARGV[i + 1]), floor)
  if window > 0 then
    local since = '(' .. n(now - window)
    local used = redis.call('ZCOUNT', key, since, '+inf')
    if used >= limit then
      local hit = redis.call('ZRANGEBYSCORE', key, since, '+inf', 'WITHSCORES', 'LIMIT', used - limit, 1)
      local at = tonumber(hit[2])
      local wait = at + window - now + SETTLE_US
      if at > now then wait = poll end
      if wait > worst then worst, why = wait, (i - 3) / 2 end
    end
  end
end
if worst > 0 then return {worst, why, 0, floor} end
local score = now
if lease > 0 then score = now + lease end
redis.call('ZADD', key, n(score), ARGV[2])
keep(horizon + lease)
return {0, 0, 1}
""".replace("SETTLE_US", str(_SETTLE_US))


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``limit`` requests in any ``seconds``; a window of 0 limits nothing."""

    limit: int
    seconds: float

    def __str__(self) -> str:
        return f"{self.limit} per {self.seconds:g}s"


@dataclass(frozen=True, slots=True)
class Decision:
    """One answer of the limiter: ``wait`` 0 means admitted; :attr:`reason` says why, in a line."""

    wait: float
    recorded: bool = False
    refused_by: int = 0  # the number (from 1) of the rate that refused; -1: a slow-down's pause
    rates: tuple[Rate, ...] = ()
    floor: float = 0.0  # seconds every window was widened to by a slow-down, when refused

    @property
    def admitted(self) -> bool:
        return self.wait <= 0

    @property
    def reason(self) -> str:
        # Formatted on demand: a limiter is asked often, the reason read rarely (logs, errors).
        if self.admitted:
            return "admitted" if self.recorded else "no limit"
        if self.refused_by < 0:
            return f"paused by the server's slow-down for {self.wait:.2f}s more"
        rate = self.rates[self.refused_by - 1]
        widened = f" (at least {self.floor:g}s after a slow-down)" if self.floor > rate.seconds else ""
        return f"{rate}{widened} used up: {self.wait:.2f}s to wait"

    def __str__(self) -> str:
        return self.reason


class RateLimitTimeout(TimeoutError):
    """The scope stayed full for longer than the caller would wait."""

    def __init__(self, message: str, *, wait: float) -> None:
        super().__init__(message)
        self.wait = wait


@dataclass(slots=True)
class _Log:
    done: list[float] = field(default_factory=list)  # sorted times (us) of finished requests
    leases: dict[str, float] = field(default_factory=dict)  # in flight: member -> lease expiry
    pause: float = 0.0
    floor: float = 0.0
    floor_until: float = 0.0


class LocalStore:
    """The in-process counterpart of Redis: logs and counters of one process (or one owner)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.logs: dict[str, _Log] = {}
        self.counts: dict[str, tuple[int, int]] = {}  # key -> (window number, count)

    @staticmethod
    def now() -> float:
        return time.monotonic() * _US

    def reserve(
        self, key: str, member: str, lease: float, poll: float, rates: Sequence[tuple[int, float]]
    ) -> list[int]:
        with self.lock:
            now, entry = self.now(), self._log(key)
            self._expire(entry, now)
            if entry.pause > now:
                return [int(entry.pause - now), -1, 0]
            floor = entry.floor if entry.floor_until > now else 0.0
            horizon = max([max(w, floor) for _, w in rates], default=0.0)
            if horizon <= 0:
                return [0, 0, 0]
            del entry.done[: bisect.bisect_right(entry.done, now - horizon)]
            worst, why = 0.0, 0
            for number, (limit, seconds) in enumerate(rates, start=1):
                wait = self._wait(entry, now, limit, max(seconds, floor), poll)
                if wait > worst:
                    worst, why = wait, number
            if worst > 0:
                return [int(worst), why, 0, int(floor)]
            if lease > 0:
                entry.leases[member] = now + lease
            else:
                entry.done.append(now)
            return [0, 0, 1]

    def _log(self, key: str) -> _Log:
        if (entry := self.logs.get(key)) is None:
            entry = self.logs[key] = _Log()
        return entry

    @staticmethod
    def _expire(entry: _Log, now: float) -> None:
        for member, expiry in list(entry.leases.items()):
            if expiry <= now:  # the holder died: its lease counts as ended at its expiry
                del entry.leases[member]
                bisect.insort(entry.done, expiry)

    @staticmethod
    def _wait(entry: _Log, now: float, limit: int, window: float, poll: float) -> float:
        if window <= 0:
            return 0.0
        start = bisect.bisect_right(entry.done, now - window)
        finished = len(entry.done) - start
        used = finished + len(entry.leases)
        if used < limit:
            return 0.0
        index = used - limit
        if index >= finished:  # a request still in flight: it may end any moment
            return poll
        return entry.done[start + index] + window - now + _SETTLE_US

    def release(self, key: str, member: str) -> None:
        with self.lock:
            entry = self.logs.get(key)
            if entry is not None and entry.leases.pop(member, None) is not None:
                bisect.insort(entry.done, self.now())

    def penalize(self, key: str, pause: float, floor: float, growth: float, cap: float, ttl: float) -> float:
        with self.lock:
            now, entry = self.now(), self._log(key)
            entry.pause = max(entry.pause, now + pause)
            previous = entry.floor if entry.floor_until > now else 0.0
            entry.floor, entry.floor_until = min(max(floor, previous * growth), cap), now + ttl
            return entry.floor

    def count(self, key: str, window: int, now: float) -> int:
        number = int(now // window)
        with self.lock:
            seen, used = self.counts.get(key, (number, 0))
            used = used + 1 if seen == number else 1
            self.counts[key] = (number, used)
            return used

    def used(self, key: str, window: int, now: float) -> int:
        with self.lock:
            seen, used = self.counts.get(key, (-1, 0))
            return used if seen == int(now // window) else 0


#: Shared by every limiter of this process that is not given a store of its own.
PROCESS_STORE = LocalStore()


class RateLimiter:
    """Sliding-window limits per scope key; in Redis when a client or URL is given.

    ``name`` namespaces the stats and log lines (``web``, ``feishu``, ``yuque``); keys are the
    caller's, already namespaced (``tributary:feishu:budget:<app>:<api>``).
    """

    def __init__(
        self,
        name: str,
        *,
        redis_url: str | None = None,
        redis_client: Any = None,
        store: LocalStore | None = None,
        poll_seconds: float = 0.05,
    ) -> None:
        self.name = name
        self.stats: Counter[str] = Counter()
        self._stat_names: dict[str, str] = {}
        self._store = store or PROCESS_STORE
        self._poll = int(poll_seconds * _US)
        self._owns_client = redis_client is None and bool(redis_url)
        self._redis: Any = redis_client
        if self._owns_client:
            import redis  # only when limits are shared: a process limiting alone never loads it

            self._redis = redis.Redis.from_url(str(redis_url), socket_timeout=5, socket_connect_timeout=5)
        self._script: Any = self._redis.register_script(_SCRIPT) if self._redis is not None else None

    @property
    def shared(self) -> bool:
        """True while the limits live in Redis (every worker sees them)."""
        return self._script is not None

    def _stat(self, event: str, amount: int = 1) -> None:
        if (stat := self._stat_names.get(event)) is None:
            stat = self._stat_names[event] = f"ratelimit/{self.name}/{event}"
        self.stats[stat] += amount

    def _redis_or_local(self, remote: Callable[[], _T], local: Callable[[], _T]) -> _T:
        if self._script is not None:
            import redis  # loaded already: a script is registered

            try:
                return remote()
            except (redis.RedisError, OSError) as exc:
                log.warning(
                    "%s: Redis rate limits unavailable (%s); limiting in this process", self.name, type(exc).__name__
                )
                self._stat("redis_fallback")
                self._script = None
        return local()

    # ---------------------------------------------------------------- the sliding-window log

    def reserve(self, key: str, rates: Sequence[Rate], *, lease: float = 0.0, member: str | None = None) -> Decision:
        """Admit and record one request to ``key`` if every rate has room; else say how long to wait.

        With ``lease`` (seconds, > 0) the request counts as in flight until :meth:`release` with
        the same ``member`` (or until the lease expires, should its holder die)."""
        pairs = [(r.limit, r.seconds * _US) for r in rates]
        # unique per request: members of a log must not collide (in process, only a lease needs one)
        name = member or (uuid.uuid4().hex if lease > 0 or self._script is not None else "")

        def remote() -> list[int]:
            args: list[Any] = ["reserve", name, int(lease * _US), self._poll]
            for limit, window in pairs:
                args += [limit, int(window)]
            return [int(v) for v in self._script(keys=[key], args=args)]

        wait, why, recorded, *floor = self._redis_or_local(
            remote, lambda: self._store.reserve(key, name, lease * _US, self._poll, pairs)
        )
        decision = Decision(wait / _US, bool(recorded), why, tuple(rates), floor[0] / _US if floor else 0.0)
        self._stat("admitted" if decision.admitted else "delayed")
        return decision

    def release(self, key: str, member: str) -> None:
        """The leased request ``member`` finished: its window runs from now."""
        self._redis_or_local(
            lambda: self._script(keys=[key], args=["release", member]),
            lambda: self._store.release(key, member),
        )

    def penalize(
        self, key: str, *, pause: float, floor: float, growth: float = 2.0, cap: float = 60.0, ttl: float = 300.0
    ) -> float:
        """A server said slow down: nothing before ``pause`` s, and for ``ttl`` s every window of
        ``key`` at least ``max(floor, previous floor * growth)`` (at most ``cap``). -> the new floor."""
        self._stat("penalized")
        args = [int(pause * _US), int(floor * _US), growth, int(cap * _US), int(ttl * _US)]
        new = self._redis_or_local(
            lambda: int(self._script(keys=[key], args=["penalize", *args])[2]),
            lambda: self._store.penalize(key, *(float(a) for a in args)),
        )
        log.info("%s %s: slowed down, paused %.2fs, windows at least %.2fs", self.name, key, pause, new / _US)
        return float(new) / _US

    def acquire(
        self,
        key: str,
        rates: Sequence[Rate],
        *,
        max_wait: float = 600.0,
        lease: float = 0.0,
        member: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Decision:
        """Block until admitted; :class:`RateLimitTimeout` when that would take over ``max_wait`` s."""
        deadline = time.monotonic() + max_wait
        while not (decision := self.reserve(key, rates, lease=lease, member=member)).admitted:
            self._check_deadline(key, decision, deadline, max_wait)
            sleep(decision.wait)
        return decision

    async def acquire_async(
        self, key: str, rates: Sequence[Rate], *, max_wait: float = 600.0, lease: float = 0.0, member: str | None = None
    ) -> Decision:
        """:meth:`acquire` for an event loop: Redis calls (short) run in a worker thread."""
        deadline = time.monotonic() + max_wait
        while not (
            decision := await self._off_loop(lambda: self.reserve(key, rates, lease=lease, member=member))
        ).admitted:
            self._check_deadline(key, decision, deadline, max_wait)
            await asyncio.sleep(decision.wait)
        return decision

    async def release_async(self, key: str, member: str) -> None:
        await self._off_loop(lambda: self.release(key, member))

    async def penalize_async(self, key: str, **kwargs: float) -> float:
        return await self._off_loop(lambda: self.penalize(key, **kwargs))

    def _off_loop(self, call: Callable[[], _T]) -> Awaitable[_T]:
        if self._script is None:  # in process: no I/O, nothing to move off the loop
            future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
            future.set_result(call())
            return future
        return asyncio.to_thread(call)

    def _check_deadline(self, key: str, decision: Decision, deadline: float, max_wait: float) -> None:
        log.debug("%s %s: %s", self.name, key, decision)
        if time.monotonic() + decision.wait > deadline:
            self._stat("refused")
            raise RateLimitTimeout(
                f"{self.name} limit for {key!r} not available within {max_wait:g}s ({decision.reason})",
                wait=decision.wait,
            )

    # ---------------------------------------------------------------- fixed-window counters

    def count(self, key: str, window: int) -> tuple[int, float]:
        """Count one request in the current clock window of ``window`` s (key ``<key>:<number>``).

        -> (requests counted in this window, including this one; seconds until it ends)."""
        now = time.time()
        number = int(now // window)

        def remote() -> int:
            pipe = self._redis.pipeline()
            pipe.incr(f"{key}:{number}")
            pipe.expire(f"{key}:{number}", window + 60)
            return int(pipe.execute()[0])

        used = self._redis_or_local(remote, lambda: self._store.count(key, window, now))
        self._stat("counted")
        return used, (number + 1) * window - now

    def used(self, key: str, window: int) -> int:
        """How many requests the current window of ``key`` has counted."""
        now = time.time()
        return self._redis_or_local(
            lambda: int(self._redis.get(f"{key}:{int(now // window)}") or 0),
            lambda: self._store.used(key, window, now),
        )

    def close(self) -> None:
        if self._owns_client and self._redis is not None:
            self._redis.close()
