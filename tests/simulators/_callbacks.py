"""Delivery of a simulated service's callbacks (Feishu events, Yuque webhooks) to a receiver.

One background thread sends queued deliveries in due order, as the services do: a delivery
answered anything but HTTP 200 within ``timeout`` (or not answered) is retried after the next
delay of ``retry_delays``, then given up. Feishu documents its schedule (answer within 3 s, else
pushed again after 15 s, 5 min, 1 h and 6 h: 4 retries); ``time_scale`` compresses it for tests
(0.01 makes it 0.15 s, 3 s, 36 s, 216 s). Knobs for what a receiver must survive:
``duplicates`` (every event delivered that many more times, the same event id) and
``reorder_window`` (each first delivery held a random 0..window seconds, so events overtake
each other).

Each attempt is built afresh by ``seal`` (Feishu signs with a new timestamp and nonce and
encrypts with a new IV on every push); :attr:`log` records every attempt and its answer.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = ["FEISHU_RETRY_DELAYS", "Attempt", "CallbackSender", "DeliveryKnobs"]

# Feishu's documented re-push schedule after a failed delivery (seconds)
FEISHU_RETRY_DELAYS = (15.0, 300.0, 3600.0, 21600.0)

# payload -> (body bytes, headers) for one attempt
Sealer = Callable[[dict[str, Any]], tuple[bytes, dict[str, str]]]


@dataclass
class DeliveryKnobs:
    retry_delays: tuple[float, ...] = FEISHU_RETRY_DELAYS
    time_scale: float = 1.0
    timeout: float = 3.0
    duplicates: int = 0
    reorder_window: float = 0.0
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    event_id: str
    attempt: int  # 0: the first push, n: the n-th retry
    status: int | None  # None: no answer (refused, timed out)
    at: float


@dataclass(order=True)
class _Due:
    due: float
    seq: int
    url: str = field(compare=False)
    event_id: str = field(compare=False)
    payload: dict[str, Any] = field(compare=False)
    seal: Sealer = field(compare=False)
    attempt: int = field(compare=False, default=0)


class CallbackSender:
    """Queues deliveries and sends them from one daemon thread."""

    def __init__(self, knobs: DeliveryKnobs | None = None) -> None:
        self.knobs = knobs or DeliveryKnobs()
        self.log: list[Attempt] = []
        self.counters: Counter[str] = Counter()
        self._heap: list[_Due] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._random = random.Random(self.knobs.seed)
        self._busy = 0
        self._closed = False
        self._http = httpx.Client(timeout=self.knobs.timeout, trust_env=False)
        self._thread = threading.Thread(target=self._run, name="sim-callbacks", daemon=True)
        self._thread.start()

    def send(self, url: str, event_id: str, payload: dict[str, Any], seal: Sealer) -> None:
        """Queue one event (plus its duplicates), each first push after the reorder hold."""
        with self._cond:
            for _ in range(1 + max(0, self.knobs.duplicates)):
                hold = self._random.uniform(0, self.knobs.reorder_window) if self.knobs.reorder_window else 0.0
                heapq.heappush(self._heap, _Due(time.monotonic() + hold, next(self._seq), url, event_id, payload, seal))
                self.counters["queued"] += 1
            self._cond.notify_all()

    def post_now(self, url: str, payload: dict[str, Any], seal: Sealer) -> httpx.Response:
        """One synchronous push, no retry (the URL-verification challenge)."""
        body, headers = seal(payload)
        return self._http.post(url, content=body, headers=headers)

    def idle(self, timeout: float = 30.0) -> bool:
        """Wait until nothing is queued or in flight (a retry scheduled later counts as queued)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._heap or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)
        self._http.close()

    def _next(self) -> _Due | None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                if self._heap and self._heap[0].due <= now:
                    self._busy += 1
                    return heapq.heappop(self._heap)
                wait = (self._heap[0].due - now) if self._heap else 0.5
                self._cond.wait(min(wait, 0.5))
        return None

    def _run(self) -> None:
        while (job := self._next()) is not None:
            try:
                self._attempt(job)
            finally:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()

    def _attempt(self, job: _Due) -> None:
        body, headers = job.seal(job.payload)
        try:
            status: int | None = self._http.post(job.url, content=body, headers=headers).status_code
        except httpx.HTTPError:
            status = None
        self.log.append(Attempt(job.event_id, job.attempt, status, time.time()))
        self.counters["attempts"] += 1
        if status == 200:
            self.counters["delivered"] += 1
            return
        self.counters["failed_attempts"] += 1
        delays = self.knobs.retry_delays
        if job.attempt >= len(delays):
            self.counters["given_up"] += 1
            return
        job.due = time.monotonic() + delays[job.attempt] * self.knobs.time_scale
        job.attempt += 1
        with self._cond:
            job.seq = next(self._seq)
            heapq.heappush(self._heap, job)


class OwnsSender:
    """What a simulator's delivery side shares: the sender it made (None before it is configured)
    and closing it. Subclasses hold ``_sender`` as a field of their own."""

    _sender: CallbackSender | None

    @property
    def sender(self) -> CallbackSender | None:
        return self._sender

    def close(self) -> None:
        if self._sender is not None:
            self._sender.close()
            self._sender = None
