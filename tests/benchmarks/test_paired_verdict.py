"""The chunker benchmark's verdict statistic: median of paired ratios with an order-statistic interval."""

from __future__ import annotations

import math
import os
import random

import pytest

from benchmarks.chunkers import _goal, _median_ci, _one_cpu


@pytest.mark.parametrize(("n", "rank"), [(21, 6), (11, 2), (7, 1), (3, 1)])
def test_interval_ranks_follow_the_binomial_tail(n: int, rank: int) -> None:
    ratios = [float(i) for i in range(1, n + 1)]
    random.Random(n).shuffle(ratios)  # the input order must not matter
    median, low, high = _median_ci(ratios)
    assert median == (n + 1) // 2
    assert (low, high) == (rank, n + 1 - rank)
    # The k-th order statistics cover the median with >= 95% when P(B < k) <= 2.5%.
    below = sum(math.comb(n, i) for i in range(rank)) / 2**n
    assert below <= 0.025 or rank == 1


def test_one_slow_round_moves_the_interval_by_a_rank_not_by_its_size() -> None:
    steady = [0.95 + 0.001 * i for i in range(21)]
    with_outlier = [*steady[:-1], 5.0]
    assert _median_ci(with_outlier) == _median_ci(steady)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_measuring_on_one_cpu_restores_the_affinity() -> None:
    before = os.sched_getaffinity(0)
    with _one_cpu() as pinning:
        assert os.sched_getaffinity(0) == {max(before)}
        assert pinning == f"pinned to CPU {max(before)} of {len(before)}"
    assert os.sched_getaffinity(0) == before


def test_goal_needs_every_peer_ahead_the_raw_interval_and_the_limit() -> None:
    ahead = {"langchain": "ahead of", "chonkie": "ahead of"}
    assert _goal(0.81, ahead, 0, []) == "MET"
    assert _goal(0.79, ahead, 0, []) == "NOT met"
    assert _goal(0.81, {**ahead, "langchain": "level with"}, 0, []) == "NOT met"
    assert _goal(0.81, ahead, 1, []) == "NOT met"
    assert _goal(0.81, {"chonkie": "ahead of"}, 0, ["langchain TokenTextSplitter"]) == (
        "not judged (missing peers: langchain TokenTextSplitter)"
    )
