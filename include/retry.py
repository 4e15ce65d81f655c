"""One retry policy for every connector's HTTP calls (tenacity), honouring ``Retry-After``.

A :class:`RetryPolicy` is configured from a source's options; :meth:`RetryPolicy.retrying` /
:meth:`RetryPolicy.async_retrying` build the tenacity loop. Each step has one rule and a small
named helper, and logs one line saying why it retries or stops:

- *whether*: ``retry_on(exc)`` (the connector's own notion of transient);
- *how long*: the server's hint when the error carries one (``hint(exc)``, by default its
  ``retry_after``: a ``Retry-After`` parsed by :func:`parse_retry_after`, RFC 9110 §10.2.3),
  capped at ``max_retry_after`` so a hostile value cannot park a worker for hours; otherwise
  exponential backoff with jitter (``backoff_initial * 2**n`` plus up to ``jitter``, at most
  ``backoff_max``);
- *when to stop*: after ``max_attempts``, or when the next sleep would pass the ``deadline``
  (seconds for all attempts, or a callable giving the seconds left). Errors for which
  ``patient(exc)`` holds (a rate limit: a promise the call succeeds later) are bounded by the
  deadline only.

Stats are namespaced ``retry/<name>/<event>`` (:attr:`RetryPolicy.stats`).
"""

from __future__ import annotations

import datetime
import email.utils
import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception

__all__ = ["RetryPolicy", "parse_retry_after", "retry_after_of"]

log = logging.getLogger(__name__)


def parse_retry_after(value: str | None, *, cap: float | None = None, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` value: delta-seconds or an HTTP-date (RFC 9110 §10.2.3).

    A date in the past is 0; ``cap`` bounds the answer; anything unreadable is None (no hint).
    Fractional seconds are accepted too (some gateways send ``1.5``)."""
    if not value or not (value := value.strip()):
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # the asctime form names no zone: HTTP dates are GMT
            when = when.replace(tzinfo=datetime.UTC)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds or seconds in (float("inf"), float("-inf")):  # nan, inf
        return None
    seconds = max(0.0, seconds)
    return min(seconds, cap) if cap is not None else seconds


def retry_after_of(exc: BaseException | None) -> float | None:
    """The server's wait hint an error carries (``exc.retry_after``), if any."""
    hint = getattr(exc, "retry_after", None)
    return float(hint) if isinstance(hint, int | float) else None


@dataclass(slots=True)
class RetryPolicy:
    name: str
    retry_on: Callable[[BaseException], bool]
    max_attempts: int = 4
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    jitter: float = 0.5
    max_retry_after: float = 60.0
    # Up to this much added to a server's hint, so that workers do not return in lockstep.
    hint_jitter: float = 0.0
    deadline: float | Callable[[], float] | None = None
    patient: Callable[[BaseException], bool] | None = None
    hint: Callable[[BaseException | None], float | None] = retry_after_of
    stats: Counter[str] = field(default_factory=Counter)

    def _stat(self, event: str) -> None:
        self.stats[f"retry/{self.name}/{event}"] += 1

    # ---------------------------------------------------------------- the steps

    def _backoff(self, attempt: int) -> float:
        exp = float(self.backoff_initial * 2 ** (attempt - 1))
        return min(exp + random.uniform(0, self.jitter), self.backoff_max)

    def wait(self, state: RetryCallState) -> float:
        """Seconds before the next attempt: the server's hint (capped), else backoff."""
        exc = state.outcome.exception() if state.outcome else None
        hint = self.hint(exc)
        if hint is not None:
            seconds = min(hint, self.max_retry_after) + random.uniform(0, self.hint_jitter)
        else:
            seconds = self._backoff(state.attempt_number)
        left = self._left(state)
        return max(0.0, min(seconds, left)) if left is not None else seconds

    def _left(self, state: RetryCallState) -> float | None:
        if self.deadline is None:
            return None
        if callable(self.deadline):
            return self.deadline()
        return self.deadline - (state.seconds_since_start or 0.0)

    def stop(self, state: RetryCallState) -> bool:
        """Out of attempts (unless the error is one to be patient with), or out of time."""
        exc = state.outcome.exception() if state.outcome else None
        left = self._left(state)
        # tenacity computes the next sleep before asking stop: no retry the deadline would cut.
        if left is not None and left - state.upcoming_sleep <= 0:
            return self._give_up(state, exc, "out of time")
        patient = exc is not None and self.patient is not None and self.patient(exc)
        if not patient and state.attempt_number >= self.max_attempts:
            return self._give_up(state, exc, f"{self.max_attempts} attempts made")
        return False

    def _give_up(self, state: RetryCallState, exc: BaseException | None, why: str) -> bool:
        self._stat("gave_up")
        log.info("%s: giving up after attempt %d (%s): %s", self.name, state.attempt_number, why, _describe(exc))
        return True

    def _before_sleep(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        hinted = self.hint(exc) is not None
        self._stat("retries")
        if hinted:
            self._stat("retry_after_honoured")
        log.info(
            "%s: retry %d in %.2fs (%s): %s",
            self.name,
            state.attempt_number,
            state.upcoming_sleep,
            "server's Retry-After" if hinted else "backoff",
            _describe(exc),
        )

    # ---------------------------------------------------------------- tenacity

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for tenacity's ``Retrying`` / ``AsyncRetrying``."""
        return {
            "retry": retry_if_exception(self.retry_on),
            "stop": self.stop,
            "wait": self.wait,
            "before_sleep": self._before_sleep,
            "reraise": True,
        }

    def retrying(self, *, sleep: Callable[[float], None] | None = None) -> Retrying:
        extra: dict[str, Any] = {"sleep": sleep} if sleep is not None else {}
        return Retrying(**self.kwargs(), **extra)

    def async_retrying(self) -> AsyncRetrying:
        return AsyncRetrying(**self.kwargs())


def _describe(exc: BaseException | None) -> str:
    # The type and first line only: messages of HTTP errors never carry credentials here, but a
    # body excerpt could be long.
    if exc is None:
        return "no error"
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
