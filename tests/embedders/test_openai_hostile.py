"""The OpenAI-compatible endpoint under attack (issue 32, points 8, 9, 10 and 13).

A hostile or broken endpoint answers with numbers no float holds or JSON nested 20,000 deep,
trickles its body, echoes the key in its errors, or is a Connection pointing at the cloud
metadata service. Everything runs against the simulator on a real 127.0.0.1 socket; addresses
that must not be reached are refused before any socket is opened (connects are counted).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from include.addresses import IPAddress
from include.config import EmbeddingConfig, SourceConfig
from include.connections import ConnectionRecord
from include.index import open_index
from include.pinned_http import RequestDeadline, guarded_transport
from include.redact import redact_secret
from include.stores import open_state_store
from plugins.embedders.base import EmbeddingError
from plugins.embedders.openai import OpenAIEmbedder, endpoint_of
from plugins.embedders.registry import provider_model_id
from plugins.engine import run_pipeline
from tests.embedders.simulator import EmbeddingSimulator, bag_of_words_vector
from tests.support.server import serve_asgi
from tests.web.tls import self_signed

MakeEmbedder = Callable[..., OpenAIEmbedder]
# every 8 characters of it distinctive: no run of the state database matches one by chance
KEY = "sk-proj-Q7vLx2RtZ9wKmB4nH6pJcD8fGsYaE3uTw5"


@pytest.fixture
def sim() -> EmbeddingSimulator:
    return EmbeddingSimulator(api_key=KEY)


def _key_fragments(found_in: str | bytes) -> list[str]:
    """Every 8-character piece of the key that ``found_in`` holds, in any letter case."""
    text = found_in.decode("utf-8", "replace") if isinstance(found_in, bytes) else found_in
    lowered, key = text.lower(), KEY.lower()
    return sorted({key[i : i + 8] for i in range(len(key) - 7) if key[i : i + 8] in lowered})


def _notes(root: Path, markers: dict[int, str]) -> Path:
    root.mkdir()
    for i in range(6):
        text = f"# Note {i}\n\nA short note number {i} about canal locks and weirs.{markers.get(i, '')}\n"
        (root / f"note{i}.md").write_text(text, encoding="utf-8")
    return root


def _source(root: Path) -> SourceConfig:
    # one text per request: a hostile answer is aimed at exactly one document
    embedding = EmbeddingConfig(
        provider="openai", model="text-embedding-3-small", dimensions=64, conn_id="embeddings_sim", batch_size=1
    )
    return SourceConfig(kind="files", name="hostile", options={"root": str(root)}, batch_size=2, embedding=embedding)


def _factory(source: SourceConfig, conn: ConnectionRecord) -> Callable[[], OpenAIEmbedder]:
    model_id = str(provider_model_id(source.embedding))
    return lambda: OpenAIEmbedder(source.embedding, endpoint_of(conn), model_id=model_id, sleep=lambda _: None)


def _committed_and_indexed(source: SourceConfig) -> tuple[set[str], set[str]]:
    store = open_state_store()
    try:
        committed = {key for key, state in store.items(source.source_id).items() if state.version is not None}
    finally:
        store.close()
    index = open_index(source.index)
    try:
        item_of = {c: index.get_chunk(c)["item_key"] for c in index.chunk_ids(source=source.source_id)}  # type: ignore[index]
        query = bag_of_words_vector("canal locks", 64).astype(np.float32)
        for mode in ("bm25", "vector"):  # what is indexed is searchable, by its text and its vector
            hits = index.search("canal locks", k=20, source=source.source_id, mode=mode, query_vector=query)
            assert {item_of[hit.chunk_id] for hit in hits} == set(item_of.values()), mode
    finally:
        index.close()
    return committed, set(item_of.values())


# ---------------------------------------------------------------- 8: one bad answer


def test_a_hostile_answer_fails_its_document_and_the_run_goes_on(
    tributary_home: Path, tmp_path: Path, sim: EmbeddingSimulator, conn: ConnectionRecord
) -> None:
    root = _notes(tmp_path / "notes", {2: " HUGEINT", 4: " DEEPNEST"})
    sim.fault("huge_integer", when="HUGEINT")  # a 400-digit integer in that text's vector
    deep = b'{"data": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"
    sim.fault("raw", when="DEEPNEST", body=deep, media_type="application/json")
    source = _source(root)
    summary = run_pipeline(source, {}, embedder_factory=_factory(source, conn))
    assert summary.status == "partial"  # two of six failed: the run says so
    assert (summary.counts["new"], summary.counts["failed"]) == (4, 2)
    store = open_state_store()
    try:
        run_id = store.runs(source.source_id, limit=1)[0]["run_id"]
        failed = {r["item_key"]: r["reason"] for r in store.run_items(run_id, action="failed")}
    finally:
        store.close()
    assert failed == {"note2.md": "embed: embed:not_finite", "note4.md": "embed: embed:bad_response"}
    committed, indexed = _committed_and_indexed(source)
    assert committed == indexed == {"note0.md", "note1.md", "note3.md", "note5.md"}


# ---------------------------------------------------------------- 9: a trickling body


def _outcome_within(call: Callable[[], Any], seconds: float) -> BaseException | None:
    """Run ``call`` in a thread; the exception it ended with (None for a return). Fails the
    test when the call is still running after ``seconds`` (a generous bound: a hang, not a
    slow answer)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s"
    return outcome[0]


def test_a_trickling_answer_is_cut_at_the_request_deadline(
    sim: EmbeddingSimulator, make_embedder: MakeEmbedder
) -> None:
    sim.fault("trickle", seconds=1.5, times=10)  # a byte every 1.5 s: under any per-read timeout
    embedder = make_embedder(timeout_seconds=2.0, max_attempts=2, dimensions=64)
    error = _outcome_within(lambda: embedder.embed_documents(["a text"]), 40.0)
    assert isinstance(error, EmbeddingError), error
    assert (error.reason, error.retryable) == ("unreachable", True)
    assert "deadline" in str(error)
    assert len(sim.requests) == 2  # each attempt cut at its deadline, then the retries given up


def test_a_query_is_one_deadline_retries_included(sim: EmbeddingSimulator, make_embedder: MakeEmbedder) -> None:
    sim.fault("trickle", seconds=1.5, times=10)
    embedder = make_embedder(timeout_seconds=2.0, max_attempts=5, dimensions=64)
    error = _outcome_within(lambda: embedder.embed_query("如何重置密码"), 40.0)
    assert isinstance(error, EmbeddingError) and error.retryable, error
    assert len(sim.requests) == 1  # the search is not kept waiting for a second attempt


# ---------------------------------------------------------------- 10: key echoes


def test_redaction_covers_fragments_in_any_case() -> None:
    body = f"pre {KEY[:20]} mid {KEY[10:30].upper()} tail {KEY[-9:]} short {KEY[:7]} end"
    scrubbed = redact_secret(body, KEY)
    assert _key_fragments(scrubbed) == []
    assert scrubbed.startswith("pre *** mid *** tail *** short ") and scrubbed.endswith(" end")
    assert KEY[:7] in scrubbed  # 7 characters say nothing of the key
    assert redact_secret("nothing here", KEY) == "nothing here"
    assert redact_secret("a PIN 1234 and 12345", "1234") == "a PIN *** and ***5"  # a short secret: whole only


@pytest.mark.parametrize(
    ("status", "body", "media_type"),
    [
        (500, b"E" * 280 + KEY.encode() + b" echoed by a proxy", "text/plain"),  # past the excerpt's start
        (400, json.dumps({"error": {"message": f"bad key {KEY.upper()}"}}).encode(), "application/json"),
        (400, json.dumps({"error": {"message": f"key ...{KEY[5:17]}... refused"}}).encode(), "application/json"),
        (400, f"<html>{KEY[:12].upper()}</html>".encode(), "text/html"),
    ],
)
def test_an_echoed_key_is_scrubbed_from_errors(
    sim: EmbeddingSimulator, make_embedder: MakeEmbedder, status: int, body: bytes, media_type: str
) -> None:
    sim.fault("raw", status=status, body=body, media_type=media_type, times=10)
    with pytest.raises(EmbeddingError) as caught:
        make_embedder(max_attempts=2, dimensions=64).embed_documents(["a text"])
    assert _key_fragments(str(caught.value)) == [], str(caught.value)
    assert "***" in str(caught.value)


def _database_bytes(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in home.glob("state.db*"))


def test_no_key_fragment_reaches_the_state_database_or_the_logs(
    tributary_home: Path,
    tmp_path: Path,
    sim: EmbeddingSimulator,
    conn: ConnectionRecord,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    root = _notes(tmp_path / "notes", {1: " ECHO-UPPER", 3: " ECHO-PIECE"})
    upper = json.dumps({"error": {"message": f"Invalid input; key {KEY.upper()}"}}).encode()
    piece = json.dumps({"error": {"message": f"refused for ...{KEY[9:25]}..."}}).encode()
    sim.fault("raw", when="ECHO-UPPER", status=400, body=upper, media_type="application/json")
    sim.fault("raw", when="ECHO-PIECE", status=400, body=piece, media_type="application/json")
    source = _source(root)
    first = run_pipeline(source, {}, embedder_factory=_factory(source, conn))
    assert (first.counts["new"], first.counts["failed"]) == (4, 2)  # refused texts: their documents
    # a second run meets a 500 whose plain-text body echoes the key from byte 280
    (root / "note0.md").write_text("# Note 0\n\nNow about ECHO-500 weirs.\n", encoding="utf-8")
    sim.fault("raw", when="ECHO-500", status=500, body=b"E" * 280 + KEY.encode(), times=100)
    with pytest.raises(EmbeddingError) as caught:
        run_pipeline(source, {}, embedder_factory=_factory(source, conn))
    assert caught.value.retryable
    store = open_state_store()
    try:
        runs = store.runs(source.source_id, limit=2)
        failures = store.run_items(runs[1]["run_id"], action="failed")
    finally:
        store.close()
    assert runs[0]["status"] == "failed" and "HTTP 500" in runs[0]["error"]  # the run page shows this
    assert len(failures) == 2 and all("***" in f["error"] for f in failures)
    assert _key_fragments(_database_bytes(tributary_home)) == []
    assert _key_fragments(caplog.text) == []


# ---------------------------------------------------------------- 13: the endpoint's address


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Every connection attempt, recorded and refused: no packet leaves for these addresses."""
    attempts: list[object] = []

    def create_connection(address: object, *args: object, **kwargs: object) -> socket.socket:
        attempts.append(address)
        raise ConnectionRefusedError(f"test: no connection to {address}")

    def connect(self: socket.socket, address: object) -> None:
        attempts.append(address)
        raise ConnectionRefusedError(f"test: no connection to {address}")

    monkeypatch.setattr(socket, "create_connection", create_connection)
    monkeypatch.setattr(socket.socket, "connect", connect)
    yield attempts


def _resolving(monkeypatch: pytest.MonkeyPatch, name: str, address: str) -> None:
    """DNS for ``name`` answers ``address`` (other names resolve as usual)."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == name:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            return [(family, socket.SOCK_STREAM, 6, "", (address, port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.mark.parametrize(
    "host",
    ["169.254.169.254", "[fd00:ec2::254]", "100.100.100.200", "169.254.10.10", "[fe80::1]", "0.0.0.0", "224.0.0.1"],
)
def test_a_link_local_or_metadata_endpoint_is_refused_before_connecting(
    make_embedder: MakeEmbedder, connects: list[object], host: str
) -> None:
    embedder = make_embedder(connection=ConnectionRecord("meta", host=host, schema="http", port=80, password=KEY))
    with pytest.raises(EmbeddingError) as caught:
        embedder.embed_documents(["a text"])
    assert (caught.value.reason, caught.value.retryable) == ("blocked_address", False)
    assert connects == []


def test_a_name_resolving_to_the_metadata_service_is_refused(
    make_embedder: MakeEmbedder, connects: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    _resolving(monkeypatch, "embeddings.example", "169.254.169.254")
    conn = ConnectionRecord("meta", host="embeddings.example", schema="https", password=KEY)
    with pytest.raises(EmbeddingError) as caught:
        make_embedder(connection=conn).embed_documents(["a text"])
    assert caught.value.reason == "blocked_address" and "169.254.169.254" in str(caught.value)
    assert connects == []


def test_allow_private_networks_admits_link_local_but_never_metadata(
    make_embedder: MakeEmbedder, connects: list[object]
) -> None:
    link_local = ConnectionRecord("ll", host="169.254.10.10", schema="http", port=8080)
    embedder = make_embedder(connection=link_local, allow_private_networks=True, max_attempts=1)
    with pytest.raises(EmbeddingError) as caught:
        embedder.embed_documents(["a text"])
    assert caught.value.reason == "unreachable"  # let through: the (refused) connect was tried
    assert connects == [("169.254.10.10", 8080)]
    metadata = ConnectionRecord("meta", host="169.254.169.254", schema="http", port=80)
    with pytest.raises(EmbeddingError) as caught:
        make_embedder(connection=metadata, allow_private_networks=True).embed_documents(["a text"])
    assert caught.value.reason == "blocked_address" and len(connects) == 1


def test_the_checked_address_is_the_one_connected_to(
    sim: EmbeddingSimulator, sim_url: str, make_embedder: MakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = int(sim_url.rsplit(":", 1)[1])
    _resolving(monkeypatch, "embeddings.example", "127.0.0.1")
    real_connect = socket.socket.connect
    connected: list[object] = []

    def connect(self: socket.socket, address: object) -> None:
        connected.append(address)
        real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    conn = ConnectionRecord("named", host="embeddings.example", schema="http", port=port, password=KEY)
    assert make_embedder(connection=conn, dimensions=64).embed_documents(["a text"]).vectors.shape == (1, 64)
    assert connected == [("127.0.0.1", port)]
    assert sim.requests[0]["authorization"] == f"Bearer {KEY}"


def test_https_through_the_pinned_transport_checks_and_verifies(sim: EmbeddingSimulator, tmp_path: Path) -> None:
    cert = self_signed("127.0.0.1", tmp_path)
    checked: list[tuple[str, IPAddress]] = []
    transport = guarded_transport(
        lambda host, ip: checked.append((host, ip)), RequestDeadline(), verify=cert.client_context()
    )
    tls = {"ssl_certfile": str(cert.certfile), "ssl_keyfile": str(cert.keyfile)}
    with serve_asgi(sim.app, **tls) as url, httpx.Client(transport=transport) as client:
        body = {"model": "text-embedding-3-small", "input": ["a text"], "dimensions": 8}
        answer = client.post(f"{url}/v1/embeddings", json=body, headers={"Authorization": f"Bearer {KEY}"})
    assert answer.status_code == 200 and len(answer.json()["data"][0]["embedding"]) == 8
    assert [str(ip) for _, ip in checked] == ["127.0.0.1"]  # checked once, then connected to
