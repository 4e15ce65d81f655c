"""Throughput of the ``openai`` provider against requests in flight: ``python -m benchmarks embedding_in_flight``.

The endpoint: :class:`benchmarks._embedding_server.EmbeddingServer` on 127.0.0.1 (a child process),
answering every
``/v1/embeddings`` request after a fixed latency (50 ms) with deterministic vectors of 256
dimensions, then of 1,536 (``text-embedding-3-small``'s: 0.6 MB of JSON an answer, which the client
parses and checks, so its own CPU time shows).
The texts: 2,048 distinct sentences (512 with ``--quick``), embedded by one ``embed_documents``
call of :class:`plugins.embedders.openai.OpenAIEmbedder` at ``batch_size`` 32 (64 requests) with
``max_in_flight`` 1, 2, 4 and 8: the code under test, through its real HTTP path (address check,
capped body, strict answer parsing, the in-process budget).

The peer: the same provider at ``max_in_flight`` 1, one request after another (the behaviour
before ``max_in_flight``). The ``openai`` Python package's client is not in the benchmark venv, so
it is not measured. Timing: rounds; in each, every setting embeds the whole set once, in an order
rotated from round to round, so all settings see the same machine load; a row's figure is texts
over its total seconds, its ratio that over the peer's, with the median of per-round ratios beside
it. Goal: at least 0.75 x N the peer's texts/s at N in flight (the latency overlapped, the client's
own CPU time per request not in the way). The server's count of requests answered at once shows
the cap was reached and never passed. Load averages are read (``os.getloadavg``) after each row's
last round and over the run.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

from benchmarks._embedding_server import ServerProcess
from include.config import EmbeddingConfig
from include.connections import ConnectionRecord
from plugins.embedders.openai import OpenAIEmbedder, endpoint_of

LATENCY = 0.05
DIMENSION_SETS = (256, 1536)
BATCH = 32
IN_FLIGHT = (1, 2, 4, 8)
GOAL_EFFICIENCY = 0.75
_PEER = "the same provider at max_in_flight 1 (one request after another)"
_WORDS = ["lock", "gate", "weir", "sluice", "canal", "river", "keeper", "barge", "towpath", "basin", "quay", "mooring"]


def texts(count: int) -> list[str]:
    """``count`` distinct sentences of 12-20 words."""
    return [
        f"Sentence {n}: " + " ".join(_WORDS[(n * 7 + k * 3) % len(_WORDS)] for k in range(12 + n % 9))
        for n in range(count)
    ]


def _embedder(port: int, in_flight: int, dimensions: int) -> OpenAIEmbedder:
    config = EmbeddingConfig(
        provider="openai",
        model="bench-embed",
        dimensions=dimensions,
        conn_id="bench",
        batch_size=BATCH,
        max_in_flight=in_flight,
        timeout_seconds=30,
    )
    conn = ConnectionRecord("bench", host="127.0.0.1", schema="http", port=port, password="sk-bench-0000")
    return OpenAIEmbedder(config, endpoint_of(conn), model_id=f"openai:bench-embed:{dimensions}")


def _measure(server: ServerProcess, rounds: int, corpus: list[str]) -> dict[int, dict[str, Any]]:
    embedders = {n: _embedder(server.port, n, server.dimensions) for n in IN_FLIGHT}
    seen = {n: {"seconds": [], "most_in_flight": 0, "requests": 0, "load": 0.0} for n in IN_FLIGHT}
    try:
        for embedder in embedders.values():
            embedder.embed_documents(corpus[: BATCH * 2])  # connections open, vectors cached at the server
        for number in range(rounds):
            order = IN_FLIGHT[number % len(IN_FLIGHT) :] + IN_FLIGHT[: number % len(IN_FLIGHT)]
            for n in order:
                server.reset_counts()
                start = time.perf_counter()
                result = embedders[n].embed_documents(corpus)
                seen[n]["seconds"].append(time.perf_counter() - start)
                assert result.vectors.shape == (len(corpus), server.dimensions)
                counts = server.counts()
                seen[n]["most_in_flight"] = max(seen[n]["most_in_flight"], counts["most_in_flight"])
                seen[n]["requests"] = counts["requests"]
                seen[n]["load"] = os.getloadavg()[0]
    finally:
        for embedder in embedders.values():
            embedder.close()
    return seen


def _rows(seen: dict[int, dict[str, Any]], dimensions: int, corpus: list[str], rounds: int) -> list[dict[str, Any]]:
    peer = seen[1]["seconds"]
    rows = []
    for n in IN_FLIGHT:
        secs = seen[n]["seconds"]
        ratio = sum(peer) / sum(secs)
        goal = GOAL_EFFICIENCY * n if n > 1 else 1.0
        rows.append(
            {
                "dimensions": dimensions,
                "max_in_flight": n,
                "texts x rounds": f"{len(corpus)} x {rounds}",
                "requests a round": seen[n]["requests"],
                "texts/s": len(corpus) * rounds / sum(secs),
                "peer texts/s (in flight 1)": len(corpus) * rounds / sum(peer),
                "ratio": ratio,
                "median per-round ratio": statistics.median(p / s for p, s in zip(peer, secs, strict=True)),
                "goal": f">= {goal:.2g}x",
                "met": "met" if ratio >= goal * 0.999 else "NOT met",
                "most in flight at the server": seen[n]["most_in_flight"],
                "load avg (1 min)": f"{seen[n]['load']:.2f}",
            }
        )
    return rows


def run(quick: bool = False) -> dict[str, Any]:
    corpus = texts(512 if quick else 2048)
    rounds = 3 if quick else 7
    load_before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    for dimensions in DIMENSION_SETS:
        with ServerProcess(LATENCY, dimensions) as server:
            rows += _rows(_measure(server, rounds, corpus), dimensions, corpus, rounds)
    load_after = os.getloadavg()
    ideal = len(corpus) / BATCH * LATENCY
    summary = (
        f"Server latency {LATENCY * 1000:.0f} ms a request, batch_size {BATCH}: "
        f"{len(corpus) // BATCH} requests a round, {ideal:.2f} s of pure latency at 1 in flight. "
        f"Load average (1/5/15 min) {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f} before, "
        f"{load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f} after, on {os.cpu_count()} cores. "
        "The openai package is not installed in the benchmark venv: not measured."
    )
    return {
        "title": "openai provider: throughput vs requests in flight",
        "peer": _PEER,
        "rows": rows,
        "summary": summary,
    }
