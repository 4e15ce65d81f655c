"""Several requests of one call in flight (``embedding.max_in_flight``), against the simulator on
a real socket: the cap holds, rows keep their order, failures mean what they meant one request
at a time, and every request still takes its place in the budget."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from include.ratelimit import Rate
from plugins.embedders._in_flight import Abandoned, Failures, run_bounded
from plugins.embedders.base import EmbeddingError
from plugins.embedders.openai import OpenAIEmbedder
from plugins.engine.embed import BatchVectors, _embed_group
from tests.embedders.simulator import EmbeddingSimulator, bag_of_words_vector

MakeEmbedder = Callable[..., OpenAIEmbedder]
TEXTS = [f"text number {n} about canal locks" for n in range(16)]  # 8 requests of 2


def _count_acquires(embedder: OpenAIEmbedder) -> list[int]:
    """The limiter's ``acquire`` counted (from any thread) as the provider calls it."""
    counted: list[int] = []
    acquire = embedder.limiter.acquire

    def counting(*args: Any, **kwargs: Any) -> Any:
        counted.append(1)  # list.append is atomic
        return acquire(*args, **kwargs)

    embedder.limiter.acquire = counting  # type: ignore[method-assign]
    return counted


@pytest.mark.parametrize("cap", [2, 3, 4])
def test_in_flight_reaches_the_cap_and_never_more(
    sim: EmbeddingSimulator, make_embedder: MakeEmbedder, cap: int
) -> None:
    sim.hold_until_in_flight, sim.latency = cap, 0.02  # the first `cap` requests answered only together
    result = make_embedder(batch_size=2, max_in_flight=cap).embed_documents(TEXTS)
    assert sim.most_in_flight == cap
    assert len(sim.requests) == 8 and result.vectors.shape == (16, 1536)


def test_one_in_flight_is_one_after_another(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    sim.latency = 0.01
    make_embedder(batch_size=2, max_in_flight=1).embed_documents(TEXTS)
    assert sim.most_in_flight == 1 and [r["body"]["input"][0] for r in sim.requests] == TEXTS[::2]


def test_rows_keep_their_order_whatever_answers_first(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    sim.fault("slow", seconds=0.3, when="number 0 ")  # the first request answers after the others
    sim.hold_until_in_flight = 4
    result = make_embedder(batch_size=2, max_in_flight=4).embed_documents(TEXTS)
    expected = np.vstack([bag_of_words_vector(t, 1536) for t in TEXTS])
    np.testing.assert_allclose(result.vectors, expected, atol=1e-6)


def _error_of(make_embedder: MakeEmbedder, texts: list[str], **fields: Any) -> tuple[str, bool, list[int], str]:
    with pytest.raises(EmbeddingError) as caught:
        make_embedder(batch_size=2, **fields).embed_documents(texts)
    return caught.value.reason, caught.value.retryable, caught.value.rows, str(caught.value)


def _queue_faults(sim: EmbeddingSimulator) -> None:
    """Bad rows in two requests (rows 3 and 12)."""
    sim.fault("nan", when="number 3 ", times=5)
    sim.fault("wrong_dimension", when="number 12 ", times=5)


@pytest.mark.parametrize(
    ("setup", "texts"),
    [
        (_queue_faults, TEXTS),
        (lambda sim: None, [*TEXTS[:9], "word " * 9000, *TEXTS[10:]]),  # row 9 over the model's context
        # request 3 (rows 6, 7) unreachable past its retries, request 6 refused: the first failure is the call's
        (lambda sim: sim.fault("503", when="number 7 ", times=50, retry_after="0"), [*TEXTS[:13], "word " * 9000]),
        # a 404 for request 2 and a 500 for request 1: the earlier is raised, as one at a time would
        (
            lambda sim: (
                sim.fault("500", when="number 2 ", times=50, retry_after="0"),
                sim.fault("raw", when="number 5 ", status=404, times=50),
            ),
            TEXTS,
        ),
    ],
    ids=["bad-rows", "refused", "unreachable", "first-error"],
)
def test_a_failing_request_means_what_it_meant_one_at_a_time(
    sim: EmbeddingSimulator, make_embedder: MakeEmbedder, setup: Callable[[EmbeddingSimulator], Any], texts: list[str]
) -> None:
    setup(sim)
    one_at_a_time = _error_of(make_embedder, texts, max_in_flight=1, max_attempts=2)
    setup(sim)
    several = _error_of(make_embedder, texts, max_in_flight=4, max_attempts=2)
    assert several == one_at_a_time


def test_bad_rows_of_several_requests_are_named_together(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    _queue_faults(sim)
    reason, retryable, rows, _ = _error_of(make_embedder, TEXTS, max_in_flight=4)
    assert (reason, retryable, rows) == ("bad_dimension", False, [3, 12])


def test_every_request_takes_its_place_in_the_budget(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    sim.fault("500", when="number 4 ", retry_after="0")  # one retried request: two places
    embedder = make_embedder(batch_size=2, max_in_flight=4, requests_per_minute=1000)
    acquires = _count_acquires(embedder)
    embedder.embed_documents(TEXTS)
    assert len(sim.requests) == 9 == len(acquires) == embedder.stats["requests"]
    assert embedder.limiter.stats["ratelimit/embeddings/admitted"] == 9
    decision = embedder.limiter.reserve(embedder._budget_key, (Rate(9, 60.0),))
    assert not decision.admitted  # the 9 places are in the endpoint's log


def test_the_budget_paces_requests_in_flight(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    embedder = make_embedder(batch_size=2, max_in_flight=4, requests_per_minute=3, timeout_seconds=0.5)
    with pytest.raises(EmbeddingError) as caught:  # 3 places a minute: the 4th waits past its deadline
        embedder.embed_documents(TEXTS)
    assert (caught.value.reason, caught.value.retryable) == ("rate_limited", True)
    assert len(sim.requests) == 3


# ---------------------------------------------------------------- run_bounded itself


def test_run_bounded_starts_nothing_after_a_failure_and_raises_the_earliest() -> None:
    failures = Failures()
    started: list[int] = []
    task_2_failed = threading.Event()

    def task(n: int) -> Callable[[], None]:
        def run() -> None:
            started.append(n)
            if n == 2:
                task_2_failed.set()
                raise ValueError("task 2")
            assert task_2_failed.wait(10)
            for _ in range(1000):  # until run_bounded has seen task 2's failure (10 s at most)
                if failures.abandons(3):
                    break
                threading.Event().wait(0.01)
            assert not failures.abandons(n)  # tasks before the failure run on, as a loop ran them first
            if n == 0:
                raise KeyError("task 0")  # failed later, but first in order: the one raised
            if n == 1:
                return
            raise Abandoned

        return run

    with pytest.raises(KeyError, match="task 0"):
        run_bounded([task(n) for n in range(8)], 3, failures)
    assert sorted(started) == [0, 1, 2]  # nothing started after the failure


def test_run_bounded_with_one_runs_in_order_in_the_caller() -> None:
    seen: list[tuple[int, str]] = []
    tasks = [lambda n=n: seen.append((n, threading.current_thread().name)) for n in range(4)]
    run_bounded(tasks, 1, Failures())
    assert seen == [(n, threading.current_thread().name) for n in range(4)]


def test_a_bad_row_leaves_the_others_embedded_once(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    # the engine's embed step keeps the good rows the error carries instead of sending them again
    sim.fault("nan", when="number 5 ", times=5)
    embedder = make_embedder(batch_size=2, max_in_flight=4, dimensions=1536)
    found = BatchVectors(1536, cached={})
    hashes = [f"h{n}" for n in range(len(TEXTS))]
    assert _embed_group(embedder, hashes, TEXTS, found) == 16
    assert sum(len(r["body"]["input"]) for r in sim.requests) == 16  # nothing asked twice
    assert set(found.failed) == {"h5"} and found.failed["h5"][0] == "not_finite"
    assert sorted(found.computed) == sorted(h for h in hashes if h != "h5")
    np.testing.assert_allclose(found.computed["h6"], bag_of_words_vector(TEXTS[6], 1536), atol=1e-6)
