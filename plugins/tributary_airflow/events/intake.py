"""What every callback route shares: the source, its secrets, the capped body, the rate limit, the store.

Each is cheap per request because each is cached or in process: the sources file is re-read at
most every ``ttl`` seconds, a source's Connection at most every ``ttl`` seconds (1,000 callbacks
a second must not be 1,000 secrets-backend reads; a Connection changed in Airflow is seen
within that time), the rate limit is a sliding window in process or in Redis (shared by every
API-server worker when ``TRIBUTARY_REDIS_URL`` is set: ``include/ratelimit.py``), and the event
store is opened once and shared (its engine's pool is thread-safe). Secrets are never logged:
a refusal logs the source and reason only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from cachetools import TTLCache
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from include.config import SourceConfig, load_sources_report
from include.connections import ConnectionRecord, get_connection
from include.event_refusals import EventRefused, RateLimited, TooLarge
from include.ratelimit import LocalStore, Rate, RateLimiter
from include.settings import get_settings
from include.stores.events import EventHint, EventStore, RecordResult
from plugins.connectors.base import callback_setup, validate_source_options

__all__ = ["Intake", "read_capped"]

log = logging.getLogger("tributary.events")


def _configured_sources() -> list[SourceConfig]:
    """The sources file's valid sources; none (every callback a 404) while it is unreadable."""
    try:
        return load_sources_report(get_settings().sources_file, validate_source_options)[0]
    except Exception as exc:  # a missing or broken file must not turn callbacks into 500s with tracebacks
        log.warning("events: sources file unreadable (%s)", type(exc).__name__)
        return []


async def read_capped(request: Request, limit: int) -> bytes:
    """The body, or :class:`TooLarge` as soon as it passes ``limit`` bytes: a declared
    Content-Length over the limit is refused before a byte is read, and a body that lies about
    its length (or is chunked) is refused once ``limit + 1`` bytes arrived; the rest is never read."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"Content-Length {declared} over {limit}")
    buf = bytearray()
    async for chunk in request.stream():
        buf += chunk
        if len(buf) > limit:
            raise TooLarge(f"body over {limit} bytes")
    return bytes(buf)


class Intake:
    """Per-process state of the receiver. Every argument is for tests: by default the sources
    file, Airflow's Connections, the configured state database and Redis (when set)."""

    def __init__(
        self,
        *,
        store: EventStore | None = None,
        limiter: RateLimiter | None = None,
        sources: Callable[[], list[SourceConfig]] = _configured_sources,
        connection: Callable[[str], ConnectionRecord] = get_connection,
        clock: Callable[[], float] = time.time,
        ttl: float = 30.0,
    ) -> None:
        self._store = store
        self._limiter = limiter
        self._sources = sources
        self._connection = connection
        self.clock = clock
        self._lock = threading.Lock()
        self._source_cache: TTLCache[str, dict[str, SourceConfig]] = TTLCache(maxsize=1, ttl=ttl)
        self._conn_cache: TTLCache[str, ConnectionRecord | None] = TTLCache(maxsize=1024, ttl=ttl)

    # ------------------------------------------------------------------ lazily opened
    @property
    def store(self) -> EventStore:
        with self._lock:
            if self._store is None:
                settings = get_settings()
                settings.ensure_dirs()
                self._store = EventStore(settings.state_url)
            return self._store

    @property
    def limiter(self) -> RateLimiter:
        with self._lock:
            if self._limiter is None:
                # its own in-process store: the connectors' shared one keys other scopes
                self._limiter = RateLimiter("events", redis_url=get_settings().redis_url, store=LocalStore())
            return self._limiter

    # ------------------------------------------------------------------ per request
    def source(self, kind: str, name: str) -> SourceConfig | None:
        """The source ``<kind>:<name>`` if it is configured and takes callbacks, else None."""
        with self._lock:
            by_id = self._source_cache.get("sources")
        if by_id is None:
            by_id = {s.source_id: s for s in self._sources()}
            with self._lock:
                self._source_cache["sources"] = by_id
        source = by_id.get(f"{kind}:{name}")
        if source is None or source.kind != kind or source.events.mode != "callback":
            return None
        return source

    async def extras(self, source: SourceConfig) -> dict[str, Any]:
        """The source's Connection extras ({} when there is no Connection), plus its ``login``
        as ``_login`` (Feishu's app id)."""
        setup = callback_setup(source.kind)
        conn_id = source.conn_id or (setup.default_conn_id if setup else "")
        with self._lock:
            hit = conn_id in self._conn_cache
            record = self._conn_cache.get(conn_id)
        if not hit:
            record = await run_in_threadpool(self._read_connection, conn_id)
            with self._lock:
                self._conn_cache[conn_id] = record
        if record is None:
            return {}
        return {**record.extra, "_login": record.login}

    def _read_connection(self, conn_id: str) -> ConnectionRecord | None:
        try:
            return self._connection(conn_id)
        except Exception as exc:  # not found, or the backend failed: the source is not configured
            log.warning("events: Connection %r unreadable (%s)", conn_id, type(exc).__name__)
            return None

    async def admit(self, source: SourceConfig) -> None:
        """:class:`RateLimited` when the source had ``max_per_minute`` callbacks in the last minute."""
        rates = [Rate(source.events.max_per_minute, 60.0)]
        key = f"tributary:events:{source.source_id}"
        limiter = self.limiter
        if limiter.shared:  # a Redis round trip: off the event loop
            decision = await run_in_threadpool(limiter.reserve, key, rates)
        else:
            decision = limiter.reserve(key, rates)
        if not decision.admitted:
            raise RateLimited(decision.reason)

    async def record(self, source: SourceConfig, hint: EventHint) -> RecordResult:
        return await run_in_threadpool(self.store.record, source.source_id, [hint])

    async def count(self, source: SourceConfig, name: str) -> None:
        await run_in_threadpool(self.store.count, source.source_id, name)

    async def refused(self, source: SourceConfig, exc: EventRefused) -> None:
        """Count a refusal (``refused:<reason>``) and log it by source and reason only."""
        # debug: a flood of forgeries must not flood the log too; the counters keep the numbers
        log.debug("events %s: refused %s", source.source_id, exc.reason)
        await self.count(source, f"refused:{exc.reason}")
