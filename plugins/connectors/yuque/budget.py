"""An hourly request budget and a per-second pace per Yuque *account*, shared through Redis.

Yuque limits an account (not a token: every token of one user or team draws on the same limit)
to about 5000 requests an hour and answers 429 beyond it; bursts are refused too (public
exporters hit "x-ratelimit-limit" errors with ~200 parallel fetches: web-farmer/yuque-exporter
PR #1, DIYgod/RSSHub PR #2156). Several Airflow workers fetch in parallel, so each one counting
for itself would overrun the limit. What is Yuque's own lives here: the hourly allowance counted
per account and clock hour, refused (not waited for) once spent, and the pace of ``per_second``
sends. Both are kept by the shared :class:`include.ratelimit.RateLimiter` (a fixed
window counter, and a sliding window of one request per ``1 / per_second``), in Redis when
configured and in this process otherwise (which is right for a single worker and the tests).

Until the client has asked ``/user`` whose account a token is (:meth:`RequestBudget.bind`), the
scope is the token. The token itself is never stored: keys carry a short SHA-256 of it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from include.ratelimit import Rate, RateLimiter, RateLimitTimeout
from plugins.connectors.yuque.errors import YuqueBudgetExhausted

__all__ = ["RequestBudget", "token_fingerprint"]

_WINDOW = 3600
_MAX_PACE_WAIT = 60.0  # a schedule further ahead than this is refused, not slept through


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
        self.limiter = RateLimiter("yuque", redis_url=redis_url)

    def bind(self, account: str) -> None:
        """Count from now on under ``account`` (Yuque's ``/user`` id), shared by all its tokens."""
        self.account = account
        self._prefix = f"{self._root}:budget:account:{account}"

    def acquire(self) -> int:
        """Count one request; returns how many this window has used, including this one."""
        used, reset_in = self.limiter.count(self._prefix, _WINDOW)
        if used > self.limit:
            raise YuqueBudgetExhausted(
                f"hourly Yuque request budget of {self.limit} spent; refills in {reset_in:.0f}s", reset_in=reset_in
            )
        if self.per_second is not None:
            self._pace()
        return used

    def _pace(self) -> None:
        """Wait for this request's send slot (``1 / per_second`` after the previous one)."""
        pace = (Rate(1, 1.0 / float(self.per_second or 1.0)),)
        try:
            self.limiter.acquire(f"{self._prefix}:pace", pace, max_wait=_MAX_PACE_WAIT, sleep=self._sleep)
        except RateLimitTimeout as exc:
            raise YuqueBudgetExhausted(
                f"Yuque send schedule is {exc.wait:.0f}s ahead; try later", reset_in=exc.wait
            ) from exc

    def used(self) -> int:
        return self.limiter.used(self._prefix, _WINDOW)

    def close(self) -> None:
        self.limiter.close()
