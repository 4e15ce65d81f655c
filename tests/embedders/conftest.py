"""Fixtures: the embeddings simulator on a real socket, its Connection, an embedder on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from include.config import EmbeddingConfig
from include.connections import ConnectionRecord
from plugins.embedders.openai import OpenAIEmbedder, endpoint_of
from plugins.embedders.registry import provider_model_id
from tests.embedders.simulator import EmbeddingSimulator
from tests.support.server import serve_asgi


@pytest.fixture
def sim() -> EmbeddingSimulator:
    return EmbeddingSimulator()


@pytest.fixture
def sim_url(sim: EmbeddingSimulator) -> Iterator[str]:
    with serve_asgi(sim.app) as url:
        yield url


@pytest.fixture
def conn(sim: EmbeddingSimulator, sim_url: str) -> ConnectionRecord:
    host, port = sim_url.removeprefix("http://").split(":")
    return ConnectionRecord("embeddings_sim", "http", host=host, schema="http", port=int(port), password=sim.api_key)


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def make_embedder(conn: ConnectionRecord, sleeps: list[float]) -> Iterator[Callable[..., OpenAIEmbedder]]:
    """An embedder on the simulator whose retry and budget sleeps are recorded, not slept."""
    made: list[OpenAIEmbedder] = []

    def make(connection: ConnectionRecord | None = None, max_attempts: int = 4, **fields: Any) -> OpenAIEmbedder:
        config = EmbeddingConfig(
            **{"provider": "openai", "model": "text-embedding-3-small", "conn_id": "embeddings_sim", **fields}
        )
        embedder = OpenAIEmbedder(
            config,
            endpoint_of(connection or conn),
            model_id=str(provider_model_id(config)),
            sleep=sleeps.append,
            max_attempts=max_attempts,
        )
        made.append(embedder)
        return embedder

    yield make
    for embedder in made:
        embedder.close()
