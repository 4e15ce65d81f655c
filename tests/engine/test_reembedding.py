"""A new embedding model re-embeds without re-chunking (issue 36, point 5).

Five notes synced with model A, then the source switched to model B: their chunk texts are read
back from the index and embedded with B (each distinct text once), the vectors written for the
same chunk ids; nothing is fetched, parsed or chunked. The counting embedder of
``test_embedding`` stands in for both models; the state store and SQLite index are the real ones.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from include.config import SourceConfig
from include.index import open_index
from include.stores import open_state_store
from plugins.embedders.base import EmbeddedTexts, EmbeddingError
from plugins.embedders.registry import provider_model_id
from plugins.engine import reembed_step, run_pipeline, steps
from plugins.engine.cli import main
from tests.engine.test_embedding import HashEmbedder, _model, _run, _source
from tests.support.airflow import write_sources

SID = "files:emb"
MODEL_B = "cnmoro/portuguese-multilingual-e5-small"


class RefusingEmbedder(HashEmbedder):
    """Model B refusing every text holding ``word`` (one document's paragraph)."""

    def __init__(self, model_id: str, word: str) -> None:
        super().__init__(model_id)
        self.word = word

    def embed_documents(self, texts: Sequence[str]) -> EmbeddedTexts:
        refused = [i for i, t in enumerate(texts) if self.word in t]
        if refused:
            self.calls.append(list(texts))
            raise EmbeddingError("input_rejected", "the model refused the text", retryable=False, rows=refused)
        return super().embed_documents(texts)


def _index_state(src: SourceConfig) -> tuple[set[str], dict[str, str]]:
    """(chunk ids of the source, chunk id -> the model its vector is of)."""
    index = open_index(src.index)
    try:
        ids = index.chunk_ids(source=SID)
        models = {cid: str((index.get_chunk(cid) or {}).get("embedding_model")) for cid in ids}
    finally:
        index.close()
    return ids, models


def _synced_with_a(notes: Path) -> tuple[SourceConfig, SourceConfig, dict[str, object]]:
    src_a = _source(notes)
    first = _run(src_a, HashEmbedder(_model(src_a)))
    assert first["new"] == 5
    return src_a, _source(notes, model=MODEL_B), first


def test_a_new_model_re_embeds_the_indexed_chunks_without_fetching(tributary_home: Path, notes: Path) -> None:
    src_a, src_b, first = _synced_with_a(notes)
    ids_before, _ = _index_state(src_a)
    embedder = HashEmbedder(_model(src_b))
    counts = _run(src_b, embedder)
    # no fetch, parse or chunk; every note re-embedded, said why
    assert (counts["fetched"], counts["parsed"], counts["chunked"], counts["chunks_written"]) == (0, 0, 0, 0)
    assert counts["reembedded"] == counts["unchanged"] == 5
    assert counts["reprocessed"] == {f"embedding model {_model(src_a)} -> {_model(src_b)}": 5}
    # every distinct chunk text embedded once, with B
    sent = [t for call in embedder.calls for t in call]
    assert len(sent) == len(set(sent)) == counts["chunks_embedded"] == first["chunks_embedded"]
    ids_after, models = _index_state(src_b)
    assert ids_after == ids_before and set(models.values()) == {_model(src_b)}
    # a vector search with B finds each note by one of its paragraphs
    index = open_index(src_b.index)
    try:
        for i in range(5):
            text = next(t for t in sent if f"note {i} " in t)
            hits = index.search("", mode="vector", query_vector=HashEmbedder.vector(text), k=1, source=SID)
            assert hits[0].text == text and hits[0].embedding_model == _model(src_b)
    finally:
        index.close()
    store = open_state_store()
    try:
        record = store.get_item(SID, "note0.md").processed_with  # type: ignore[union-attr]
        assert record is not None and record["embedding"]["model"] == _model(src_b)
        run_id = store.runs(SID, limit=1)[0]["run_id"]
        rows = store.run_items(run_id, action="unchanged")
        assert all("re-embedded" in r["reason"] and _model(src_b) in r["reason"] for r in rows)
    finally:
        store.close()
    # B is now what each item went through: the next run does nothing
    again = HashEmbedder(embedder.model_id)
    assert (_run(src_b, again)["reembedded"], again.embedded) == (0, 0)


def test_an_item_whose_chunks_left_the_index_is_fetched_again(tributary_home: Path, notes: Path) -> None:
    src_a, src_b, _ = _synced_with_a(notes)
    index = open_index(src_a.index)
    try:
        gone = next(iter(index.chunk_ids(source=SID)))
        doc_id = str((index.get_chunk(gone) or {})["doc_id"])
        item_key = str((index.get_chunk(gone) or {})["item_key"])
        index.delete_documents(SID, [doc_id])
    finally:
        index.close()
    counts = _run(src_b, HashEmbedder(_model(src_b)))
    assert (counts["fetched"], counts["reembedded"]) == (1, 4)
    reason = f"embedding model {_model(src_a)} -> {_model(src_b)}"
    assert counts["reprocessed"] == {reason: 4, f"{reason}; its chunk text is missing from the index": 1}
    store = open_state_store()
    try:
        rows = store.run_items(store.runs(SID, limit=1)[0]["run_id"])
        refetched = next(r for r in rows if r["item_key"] == item_key)
        assert "chunk text is missing from the index" in refetched["reason"]
    finally:
        store.close()
    ids, models = _index_state(src_b)
    assert gone in ids and set(models.values()) == {_model(src_b)}  # indexed again, whole


def test_a_refused_row_fails_its_document_only_and_it_is_retried(tributary_home: Path, notes: Path) -> None:
    src_a, src_b, _ = _synced_with_a(notes)
    refusing = RefusingEmbedder(_model(src_b), "Paragraph 3 of note 2 ")
    counts = run_pipeline(src_b, None, embedder_factory=lambda: refusing).counts
    assert (counts["reembedded"], counts["failed"], counts["fetched"]) == (4, 1, 0)
    store = open_state_store()
    try:
        failed = store.run_items(store.runs(SID, limit=1)[0]["run_id"], action="failed")
        assert [r["item_key"] for r in failed] == ["note2.md"]
        assert failed[0]["reason"] == "embed: embed:input_rejected"
        kept = store.get_item(SID, "note2.md")
        assert kept is not None and kept.processed_with is not None
        assert kept.processed_with["embedding"]["model"] == _model(src_a)  # still A: planned again
    finally:
        store.close()
    _, models = _index_state(src_b)
    assert sorted(set(models.values())) == sorted({_model(src_a), _model(src_b)})  # note2 keeps its A vectors
    retry = HashEmbedder(_model(src_b))
    again = _run(src_b, retry)
    assert (again["reembedded"], again["fetched"], again["failed"]) == (1, 0, 0)
    assert retry.embedded == again["chunks_embedded"] > 0
    _, models = _index_state(src_b)
    assert set(models.values()) == {_model(src_b)}


def test_the_cli_summary_and_json_say_what_was_re_embedded_and_why(
    tributary_home: Path,
    notes: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def counting(source: SourceConfig) -> HashEmbedder:
        return HashEmbedder(str(provider_model_id(source.embedding)))

    monkeypatch.setattr(steps, "open_source_embedder", counting)
    monkeypatch.setattr(reembed_step, "open_source_embedder", counting)
    entry = {"kind": "files", "name": "emb", "options": {"root": str(notes)}, "embedding": {"provider": "local"}}
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "a.yaml", [entry])))
    assert main(["sync", SID]) == 0
    entry["embedding"] = {"provider": "local", "model": MODEL_B}
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "b.yaml", [entry])))
    capsys.readouterr()
    assert main(["sync", SID, "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["would_reembed"] == 5
    assert main(["sync", SID, "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)["counts"]
    why = f"embedding model {_model(_source(notes))} -> {_model(_source(notes, model=MODEL_B))}"
    assert (counts["reembedded"], counts["fetched"], counts["reprocessed"]) == (5, 0, {why: 5})
    embedded = counts["chunks_embedded"]
    assert embedded >= 5  # one chunk or more per note
    # the text summary, from a fresh switch back to A (its vectors are in no cache: each chunk
    # had B's vector written in place of A's)
    monkeypatch.setenv(
        "TRIBUTARY_SOURCES", str(write_sources(tmp_path / "a.yaml", [{**entry, "embedding": {"provider": "local"}}]))
    )
    assert main(["sync", SID]) == 0
    out = capsys.readouterr().out
    assert f"(re-embedded 5: {embedded} chunks embedded)" in out and "re-processed 5: embedding model" in out
