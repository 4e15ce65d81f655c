"""The in-flight benchmark's endpoint (benchmarks/_embedding_server.py) answers as an
OpenAI-compatible server would, the same vector for the same text, and counts concurrency."""

from __future__ import annotations

import numpy as np

from benchmarks._embedding_server import EmbeddingServer
from benchmarks.embedding_in_flight import _embedder, texts


def test_the_bench_server_answers_the_provider_and_counts_what_is_in_flight() -> None:
    corpus = texts(40)
    assert len(set(corpus)) == 40
    with EmbeddingServer(latency=0.02, dimensions=16) as server:
        embedder = _embedder(server.port, 3, 16)
        try:
            first = embedder.embed_documents(corpus).vectors
            again = embedder.embed_documents(corpus[::-1]).vectors
        finally:
            embedder.close()
        assert server.requests == 4 == 2 * -(-40 // 32)  # batch_size 32: two requests a call
        assert 1 <= server.most_in_flight <= 2  # two requests a call, whatever the cap of 3
    assert first.shape == (40, 16)
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(again[::-1], first, atol=1e-6)
