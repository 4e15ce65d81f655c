"""The OpenAI-compatible provider against the simulator on a real socket (tests/embedders/simulator.py)."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

import numpy as np
import pytest

from include.connections import ConnectionRecord
from include.ratelimit import Rate
from plugins.embedders._openai_answers import CallRows, place_answer, vector_of
from plugins.embedders.base import EmbeddingError
from plugins.embedders.openai import OpenAIEmbedder, endpoint_of, estimate_tokens, truncate_estimated
from tests.embedders.simulator import EmbeddingSimulator, bag_of_words_vector
from tests.support.server import free_port, serve_asgi

MakeEmbedder = Callable[..., OpenAIEmbedder]
TEXTS = ["the cat sat on the mat", "如何重置密码", "a dog in the park", "retrieval augmented generation"]


def test_vectors_in_input_order_normalised_and_batched(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    embedder = make_embedder(batch_size=3, max_in_flight=1)  # one after another: requests in order
    result = embedder.embed_documents(TEXTS * 2)
    assert result.vectors.shape == (8, 1536) and result.vectors.dtype == np.float32
    expected = np.vstack([bag_of_words_vector(t, 1536) for t in TEXTS * 2])
    np.testing.assert_allclose(result.vectors, expected, atol=1e-6)
    assert [len(r["body"]["input"]) for r in sim.requests] == [3, 3, 2]
    body = sim.requests[0]["body"]
    assert body["model"] == "text-embedding-3-small" and body["encoding_format"] == "float"
    assert "dimensions" not in body
    assert result.truncated == []


def test_dimensions_sent_and_checked(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    embedder = make_embedder(dimensions=256)
    assert embedder.model_id == "openai:text-embedding-3-small:256"
    vectors = embedder.embed_documents(TEXTS).vectors
    assert vectors.shape == (4, 256)
    assert sim.requests[0]["body"]["dimensions"] == 256
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


def test_a_model_without_shortening_refuses_dimensions(make_embedder: MakeEmbedder) -> None:
    embedder = make_embedder(model="text-embedding-ada-002", dimensions=256)
    with pytest.raises(EmbeddingError) as caught:
        embedder.embed_documents(["one text"])
    assert caught.value.reason == "refused" and not caught.value.retryable and caught.value.rows == [0]
    assert "does not support specifying dimensions" in str(caught.value)


def test_index_field_orders_the_answer(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    sim.fault("shuffled")
    vectors = make_embedder().embed_documents(TEXTS).vectors
    np.testing.assert_allclose(vectors[1], bag_of_words_vector(TEXTS[1], 1536), atol=1e-6)


def test_unnormalised_vectors_are_normalised(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    sim.fault("not_normalised", rows=(0, 2))
    vectors = make_embedder().embed_documents(TEXTS).vectors
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


@pytest.mark.parametrize(
    ("fault", "reason"), [("wrong_dimension", "bad_dimension"), ("nan", "not_finite"), ("infinity", "not_finite")]
)
def test_bad_vectors_fail_their_rows(
    sim: EmbeddingSimulator, make_embedder: MakeEmbedder, fault: str, reason: str
) -> None:
    # rows are the call's: the second batch's first text is row 2
    sim.fault(fault, times=2, rows=(0,))
    with pytest.raises(EmbeddingError) as caught:
        make_embedder(batch_size=2, dimensions=1536).embed_documents(TEXTS)
    assert caught.value.reason == reason
    assert caught.value.retryable is False
    assert caught.value.rows == [0, 2]


def test_first_seen_dimension_binds_later_answers(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    embedder = make_embedder(model="some-local-model")  # no configured dimension: 64 from the simulator
    assert embedder.embed_documents(TEXTS[:1]).vectors.shape == (1, 64)
    sim.fault("wrong_dimension", rows=(1,))
    with pytest.raises(EmbeddingError) as caught:
        embedder.embed_documents(TEXTS)
    assert (caught.value.reason, caught.value.rows) == ("bad_dimension", [1])


def test_retry_after_is_honoured_and_shared(
    sim: EmbeddingSimulator, make_embedder: MakeEmbedder, sleeps: list[float]
) -> None:
    sim.fault("429", retry_after="1")
    embedder = make_embedder()
    assert embedder.embed_documents(TEXTS).vectors.shape == (4, 1536)
    assert len(sim.requests) == 2
    assert len(sleeps) == 1 and 1.0 <= sleeps[0] <= 1.1  # the server's 1 s, plus at most the hint jitter
    assert embedder.retries.stats["retry/embeddings/retry_after_honoured"] == 1
    assert embedder.limiter.stats["ratelimit/embeddings/penalized"] == 1


def test_a_429_pauses_other_workers_of_the_same_endpoint(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    sim.fault("429", retry_after="30", times=10)
    # a 2 s deadline (4 timeouts): the 30 s pause is more than the first worker will wait
    first, second = make_embedder(timeout_seconds=0.5), make_embedder()
    with pytest.raises(EmbeddingError) as caught:
        first.embed_documents(TEXTS)
    assert caught.value.reason == "rate_limited" and caught.value.retryable
    decision = second.limiter.reserve(second._budget_key, (Rate(1000, 60.0),))
    assert not decision.admitted and 25 < decision.wait <= 30


def test_5xx_is_retried_with_backoff(sim: EmbeddingSimulator, make_embedder: MakeEmbedder, sleeps: list[float]) -> None:
    sim.fault("500", times=2, retry_after=None)
    assert make_embedder().embed_documents(TEXTS).vectors.shape == (4, 1536)
    assert len(sim.requests) == 3 and len(sleeps) == 2 and sleeps[0] < sleeps[1] + 0.5


def test_5xx_past_the_retries_is_retryable(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    sim.fault("503", times=10, retry_after=None)
    with pytest.raises(EmbeddingError) as caught:
        make_embedder(max_attempts=3).embed_documents(TEXTS)
    assert (caught.value.reason, caught.value.retryable, caught.value.rows) == ("server_error", True, [])
    assert len(sim.requests) == 3


def test_unreachable_endpoint_is_retryable(make_embedder: MakeEmbedder, sleeps: list[float]) -> None:
    closed = ConnectionRecord("gone", host="127.0.0.1", schema="http", port=free_port(), password="sk-x")
    embedder = make_embedder(connection=closed, max_attempts=3)
    with pytest.raises(EmbeddingError) as caught:
        embedder.embed_documents(TEXTS)
    assert (caught.value.reason, caught.value.retryable) == ("unreachable", True)
    assert len(sleeps) == 2


def test_slow_endpoint_times_out_as_unreachable(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    sim.fault("slow", seconds=2.0, times=5)
    with pytest.raises(EmbeddingError) as caught:
        make_embedder(timeout_seconds=0.3, max_attempts=2).embed_documents(TEXTS[:1])
    assert (caught.value.reason, caught.value.retryable) == ("unreachable", True)


def test_a_refused_text_is_found_in_its_batch(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    texts = [*TEXTS, "word " * 9000, "last one"]  # 9,000 simulator tokens: over OpenAI's 8,192
    with pytest.raises(EmbeddingError) as caught:
        make_embedder(batch_size=8).embed_documents(texts)
    assert (caught.value.reason, caught.value.retryable, caught.value.rows) == ("refused", False, [4])
    assert "maximum context length is 8192 tokens" in str(caught.value)


def test_max_input_tokens_truncates_and_records(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    texts = ["short", "word " * 9000, "中文" * 5000]
    result = make_embedder(max_input_tokens=8000).embed_documents(texts)
    assert [t.row for t in result.truncated] == [1, 2]
    for t in result.truncated:
        assert t.tokens > 8000 >= t.kept > 7990
    sent = sim.requests[0]["body"]["input"]
    assert sent[0] == "short" and len(sent[2]) == 8000 and texts[1].startswith(sent[1])


def test_estimate_counts_ascii_as_a_third() -> None:
    assert estimate_tokens("abc" * 10) == 10 and estimate_tokens("中文") == 2
    assert truncate_estimated("abcdef中文", 2) == ("abcdef", 4, 2)


def test_empty_text_is_refused_before_sending(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    with pytest.raises(EmbeddingError) as caught:
        make_embedder().embed_documents(["fine", " ", "fine too"])
    assert (caught.value.reason, caught.value.rows) == ("empty_input", [1])
    assert sim.requests == []


def test_wrong_key_is_unauthorized_and_never_echoed(
    sim: EmbeddingSimulator, conn: ConnectionRecord, make_embedder: MakeEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "sk-wrong-" + "7" * 30
    bad_conn = ConnectionRecord(conn.conn_id, host=conn.host, schema="http", port=conn.port, password=wrong)
    embedder = make_embedder(connection=bad_conn)
    with pytest.raises(EmbeddingError) as caught:
        embedder.embed_documents(TEXTS)
    assert (caught.value.reason, caught.value.retryable) == ("unauthorized", False)
    assert sim.requests[0]["authorization"] == f"Bearer {wrong}"  # it was sent, to the endpoint only
    for shown in (str(caught.value), repr(embedder), repr(embedder.endpoint), caplog.text):
        assert wrong not in shown and wrong[-4:] * 2 not in shown


def test_key_not_in_logs_through_retries(
    sim: EmbeddingSimulator,
    make_embedder: MakeEmbedder,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)  # httpx and httpcore log requests at INFO / DEBUG
    # an earlier test in the same process may have loaded Airflow's logging config, which
    # disables the loggers that existed then: this test must see what they would log
    for name in ("httpx", "httpcore", "include.retry", "plugins.embedders.openai"):
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "disabled", False)
        monkeypatch.setattr(logger, "propagate", True)
        caplog.set_level(logging.DEBUG, logger=name)  # (the config may also have set their levels)
    sim.fault("500", times=1, retry_after=None)
    sim.fault("429", retry_after="0")
    make_embedder().embed_documents(TEXTS)
    assert "retry" in caplog.text and "HTTP Request" in caplog.text
    assert sim.api_key is not None and sim.api_key not in caplog.text


def test_key_only_sent_to_its_origin(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    other = EmbeddingSimulator(api_key=None)
    with serve_asgi(other.app) as other_url:
        sim.fault("redirect", location=f"{other_url}/v1/embeddings")
        with pytest.raises(EmbeddingError) as caught:
            make_embedder().embed_documents(TEXTS)
    assert (caught.value.reason, caught.value.retryable) == ("redirected", False)
    assert other.requests == []  # not followed: the other origin saw nothing, key or not


def test_endpoint_from_connection_fields() -> None:
    plain = endpoint_of(ConnectionRecord("c", host="api.openai.com", password="sk-1"))
    assert (plain.url, plain.origin, plain.key) == (
        "https://api.openai.com/v1/embeddings",
        "https://api.openai.com:443",
        "sk-1",
    )
    tei = endpoint_of(ConnectionRecord("c", host="tei.internal", schema="http", port=8080))
    assert (tei.url, tei.key) == ("http://tei.internal:8080/v1/embeddings", None)
    extra = endpoint_of(ConnectionRecord("c", host="ignored", extra={"base_url": "http://127.0.0.1:11434/v1/"}))
    assert (extra.url, extra.origin) == ("http://127.0.0.1:11434/v1/embeddings", "http://127.0.0.1:11434")
    assert endpoint_of(ConnectionRecord("c", host="https://gw.example/openai")).url == (
        "https://gw.example/openai/v1/embeddings"
    )
    with pytest.raises(ValueError, match="no host"):
        endpoint_of(ConnectionRecord("c"))
    with pytest.raises(ValueError, match="http"):
        endpoint_of(ConnectionRecord("c", extra={"base_url": "ftp://x"}))


def test_embed_query_is_one_vector(make_embedder: MakeEmbedder) -> None:
    vector = make_embedder().embed_query("如何重置密码")
    np.testing.assert_allclose(vector, bag_of_words_vector("如何重置密码", 1536), atol=1e-6)


def test_no_connection_leaves_loopback(monkeypatch: pytest.MonkeyPatch, make_embedder: MakeEmbedder) -> None:
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: object) -> None:
        assert isinstance(address, tuple) and address[0] in ("127.0.0.1", "::1"), address
        real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    assert make_embedder().embed_documents(TEXTS[:2]).vectors.shape == (2, 1536)


def test_dimensions_known_or_asked_once(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    assert make_embedder().dimensions == 1536 and sim.requests == []  # OpenAI's model: known
    other = make_embedder(model="nomic-embed-text")  # an Ollama model: asked of the endpoint
    assert other.dimensions == 64 and other.dimensions == 64
    assert len(sim.requests) == 1


@pytest.mark.parametrize(
    "answer",
    [
        {"data": [{"index": 0, "embedding": [0.1, 0.2]}]},  # one entry for two inputs
        {"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]},  # index repeated
        {"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [1.0]}, "extra"]},
        {"data": "not a list"},
        ["not", "an", "object"],
    ],
)
def test_malformed_answers_are_bad_responses(answer: object) -> None:
    with pytest.raises(EmbeddingError) as caught:
        place_answer(answer, [0, 1], CallRows([None, None]), 1, "http://127.0.0.1:9/v1/embeddings")
    assert (caught.value.reason, caught.value.retryable, caught.value.rows) == ("bad_response", False, [0, 1])


def test_a_vector_of_strings_fails_its_row() -> None:
    call = CallRows([None, None])
    answer = {"data": [{"index": 1, "embedding": ["a", "b"]}, {"index": 0, "embedding": [3.0, 4.0]}]}
    assert place_answer(answer, [0, 1], call, 2, "http://127.0.0.1:9/v1/embeddings") == 2
    assert call.bad == {"bad_response": [1]}
    np.testing.assert_allclose(call.vectors[0], [0.6, 0.8])


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ([True, 1.0], "bad_response"),  # a bool is no number, though Python counts it an int
        ([[0.6], [0.8]], "bad_response"),
        ([None, 1.0], "bad_response"),
        (["0.6", "0.8"], "bad_response"),
        ([3, 4.0], None),  # an int is a number
        ([10**400, 1.0], "not_finite"),
    ],
)
def test_only_plain_numbers_make_a_vector(raw: list[object], reason: str | None) -> None:
    vector, why = vector_of(raw, 2)
    assert why == reason and (vector is None) == (reason is not None)
