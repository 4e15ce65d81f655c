"""The shared retry policy against a real HTTP server on 127.0.0.1: Retry-After in both of its
forms (RFC 9110 §10.2.3) and its cap, backoff with jitter, the deadline, patience with limits.
Sleeps are recorded (the policy's sleep is injectable), never timed."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from include.retry import RetryPolicy, parse_retry_after
from tests.support.server import serve_asgi


class _Refused(Exception):
    def __init__(self, status: int, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.retry_after = retry_after


class _Script:
    """An ASGI app answering a scripted list of (status, headers), then 200."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, dict[str, str]]] = []
        self.requests = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.requests += 1
        status, headers = self.answers.pop(0) if self.answers else (200, {})
        raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": b"ok" if status == 200 else b"slow down"})


@pytest.fixture
def server() -> Iterator[tuple[_Script, str]]:
    app = _Script()
    with serve_asgi(app) as base:
        yield app, base


def _get(client: httpx.Client, url: str, cap: float) -> str:
    response = client.get(url)
    if response.status_code in (429, 503):
        raise _Refused(response.status_code, parse_retry_after(response.headers.get("retry-after"), cap=cap))
    return response.text


def _run(base: str, policy: RetryPolicy, sleep: Callable[[float], None]) -> str:
    with httpx.Client() as client:
        return policy.retrying(sleep=sleep)(_get, client, f"{base}/", policy.max_retry_after)


def _policy(**kwargs: Any) -> RetryPolicy:
    return RetryPolicy("test", retry_on=lambda exc: isinstance(exc, _Refused), **kwargs)


def test_delta_seconds_retry_after_is_waited_exactly(server: tuple[_Script, str]) -> None:
    app, base = server
    app.answers = [(429, {"Retry-After": "3"}), (503, {"Retry-After": "2"})]
    sleeps: list[float] = []
    policy = _policy(max_attempts=4)
    assert _run(base, policy, sleeps.append) == "ok"
    assert sleeps == [3.0, 2.0] and app.requests == 3
    assert policy.stats["retry/test/retries"] == policy.stats["retry/test/retry_after_honoured"] == 2


def test_http_date_retry_after_is_waited_until_then(server: tuple[_Script, str]) -> None:
    app, base = server
    app.answers = [(429, {"Retry-After": email.utils.formatdate(time.time() + 30, usegmt=True)})]
    sleeps: list[float] = []
    assert _run(base, _policy(max_retry_after=60.0), sleeps.append) == "ok"
    (slept,) = sleeps
    assert 25.0 < slept <= 30.0  # the date has one-second resolution; the request took a moment


def test_retry_after_in_either_form_is_capped(server: tuple[_Script, str]) -> None:
    app, base = server
    a_day_later = email.utils.formatdate(time.time() + 86400, usegmt=True)
    app.answers = [(429, {"Retry-After": "86400"}), (429, {"Retry-After": a_day_later})]
    sleeps: list[float] = []
    assert _run(base, _policy(max_retry_after=10.0), sleeps.append) == "ok"
    assert sleeps == [10.0, 10.0]


def test_without_a_hint_backoff_grows_with_jitter_up_to_its_max(server: tuple[_Script, str]) -> None:
    app, base = server
    app.answers = [(503, {}), (503, {"Retry-After": "soon"}), (503, {}), (503, {})]
    sleeps: list[float] = []
    policy = _policy(max_attempts=5, backoff_initial=0.5, jitter=0.5, backoff_max=3.0)
    assert _run(base, policy, sleeps.append) == "ok"
    assert len(sleeps) == 4 and policy.stats["retry/test/retry_after_honoured"] == 0
    assert 0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 1.5 and 2.0 <= sleeps[2] <= 2.5 and sleeps[3] == 3.0


def test_out_of_attempts_raises_the_last_error(server: tuple[_Script, str]) -> None:
    app, base = server
    app.answers = [(503, {})] * 5
    policy = _policy(max_attempts=2)
    with pytest.raises(_Refused):
        _run(base, policy, lambda s: None)
    assert app.requests == 2 and policy.stats["retry/test/gave_up"] == 1


def test_no_retry_the_deadline_would_cut(server: tuple[_Script, str]) -> None:
    app, base = server
    app.answers = [(429, {"Retry-After": "3"})] * 5
    slept: list[float] = []
    # a clock that moves only by the policy's sleeps: 5 s for all attempts
    policy = _policy(max_attempts=10, deadline=lambda: 5.0 - sum(slept))
    with pytest.raises(_Refused):
        _run(base, policy, slept.append)
    assert slept == [3.0] and app.requests == 2  # a second 3 s wait would pass the deadline


def test_rate_limits_are_bounded_by_time_not_attempts(server: tuple[_Script, str]) -> None:
    app, base = server
    app.answers = [(429, {"Retry-After": "1"})] * 4
    slept: list[float] = []
    policy = _policy(max_attempts=2, deadline=lambda: 60.0 - sum(slept), patient=lambda e: e.status == 429)
    assert _run(base, policy, slept.append) == "ok"
    assert slept == [1.0] * 4 and app.requests == 5


def test_hint_jitter_only_adds(server: tuple[_Script, str]) -> None:
    app, base = server
    app.answers = [(429, {"Retry-After": "2"})]
    sleeps: list[float] = []
    assert _run(base, _policy(hint_jitter=0.25), sleeps.append) == "ok"
    assert 2.0 <= sleeps[0] <= 2.25


def test_parse_retry_after_forms() -> None:
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 120, usegmt=True)
    assert parse_retry_after("120") == 120.0 and parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after(date, now=now) == pytest.approx(120.0, abs=1.0)
    assert parse_retry_after(date, now=now, cap=60.0) == 60.0 and parse_retry_after("900", cap=60.0) == 60.0
    assert parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT") == 0.0  # a date past: retry now
    assert parse_retry_after("Sun Nov  6 08:49:37 1994") == 0.0  # asctime, the third form
    assert parse_retry_after("-5") == 0.0
    for junk in (None, "", "soon", "nan", "inf"):
        assert parse_retry_after(junk) is None
