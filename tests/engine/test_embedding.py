"""The embedding step in-process: the vector cache, failures, truncation, lineage and counts.

A small deterministic embedder (vectors from the text's hash) stands in for the model, so the
tests count exactly what is sent to it; the state store and the SQLite index are the real ones.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from include.config import EmbeddingConfig, SourceConfig
from include.contract import text_hash
from include.index import open_index
from include.stores import RunItem, open_state_store
from plugins.embedders.base import EmbeddedTexts, Embedder, EmbeddingError, Truncation
from plugins.embedders.registry import provider_model_id
from plugins.engine import run_pipeline
from plugins.engine.context import RunContext, RunParams
from plugins.engine.discover import open_connector, processing_versions
from plugins.engine.lineage import chunk_lineage
from plugins.engine.records import BatchManifest, EmbedOutcome, StagedRef, TruncatedChunk, decode, encode
from plugins.engine.steps import ChunkStep, DiscoverStep, EmbedStep, FetchStep, ParseStep

DIMS = 8
PARAGRAPHS = 12


class HashEmbedder(Embedder):
    """Unit vectors from each text's SHA-256; texts containing a marker misbehave on purpose."""

    def __init__(self, model_id: str, *, truncate_over: int | None = None) -> None:
        self.model_id = model_id
        self.dimensions = DIMS
        self.batch_size = 4
        self.truncate_over = truncate_over
        self.calls: list[list[str]] = []

    @staticmethod
    def vector(text: str) -> npt.NDArray[np.float32]:
        raw = np.frombuffer(hashlib.sha256(text.encode()).digest()[: DIMS * 4], dtype="<u4").astype(np.float32)
        return (raw / np.linalg.norm(raw)).astype(np.float32)

    def embed_documents(self, texts: Sequence[str]) -> EmbeddedTexts:
        self.calls.append(list(texts))
        if any("OFFLINE" in t for t in texts):
            raise EmbeddingError("unreachable", "endpoint 127.0.0.1:9 refused the connection", retryable=True)
        if any("METADATA" in t for t in texts):
            raise EmbeddingError("blocked_address", "refusing to connect to 169.254.169.254", retryable=False)
        broken = [i for i, t in enumerate(texts) if "BROKEN" in t]
        if broken:
            raise EmbeddingError("dimension", "answered 7 dimensions", retryable=False, rows=broken)
        matrix = np.stack([self.vector(t) for t in texts])
        matrix[[i for i, t in enumerate(texts) if "POISON" in t]] = np.nan
        cut = self.truncate_over
        truncated = [Truncation(i, len(t), cut) for i, t in enumerate(texts) if cut is not None and len(t) > cut]
        return EmbeddedTexts(matrix, truncated)

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        return self.vector(text)

    @property
    def embedded(self) -> int:
        return sum(len(c) for c in self.calls)


def _note(i: int, edit: str | None = None, marker: str = "") -> str:
    paras = [f"Paragraph {j} of note {i} about canal locks and weirs, gates and sluices." for j in range(PARAGRAPHS)]
    if edit is not None:
        paras[PARAGRAPHS // 2] = edit
    paras[0] += marker
    return f"# Note {i}\n\n" + "\n\n".join(paras) + "\n"


def _source(root: Path, model: str | None = None) -> SourceConfig:
    return SourceConfig(
        kind="files",
        name="emb",
        options={"root": str(root)},
        batch_size=2,
        chunker={"name": "token", "options": {"chunk_token_num": 48}},
        embedding=EmbeddingConfig(provider="local", model=model),
    )


def _run(source: SourceConfig, embedder: HashEmbedder, status: str = "success", **params: object) -> dict[str, object]:
    summary = run_pipeline(source, params, embedder_factory=lambda: embedder)
    assert summary.status == status
    return summary.counts


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    st = path.stat()
    os.utime(path, (st.st_atime, st.st_mtime + 10))


def _model(source: SourceConfig) -> str:
    model = provider_model_id(source.embedding)
    assert model is not None
    return model


def test_first_sync_embeds_every_chunk_and_a_resync_reuses_them(tributary_home: Path, notes: Path) -> None:
    src = _source(notes)
    embedder = HashEmbedder(_model(src))
    first = _run(src, embedder)
    assert first["new"] == 5 and first["chunks_written"] > 5  # several chunks per note
    assert first["chunks_embedded"] == first["chunks_written"] == embedder.embedded
    assert first["chunks_vector_reused"] == 0
    index = open_index(src.index)
    try:
        stored = index.vectors_for(embedder.model_id, [text_hash(t) for c in embedder.calls for t in c])
    finally:
        index.close()
    assert len(stored) == embedder.embedded  # every vector went to the index with its chunk
    again = HashEmbedder(embedder.model_id)
    nothing = _run(src, again)
    assert (nothing["unchanged"], nothing["chunks_embedded"], again.embedded) == (5, 0, 0)
    # a full resync re-processes every document: every vector comes from the index's cache
    full = _run(src, again, full_resync=True)
    assert full["chunks_embedded"] == 0 and again.embedded == 0
    assert full["chunks_vector_reused"] == first["chunks_embedded"]


def test_an_edit_embeds_only_the_chunks_it_changed(tributary_home: Path, notes: Path) -> None:
    src = _source(notes)
    embedder = HashEmbedder(_model(src))
    first = _run(src, embedder)
    per_note = int(first["chunks_written"]) // 5
    edited = "Paragraph 6 of note 2 about river locks and weirs, gates and sluices."
    _write(notes / "note2.md", _note(2, edit=edited))
    later = HashEmbedder(embedder.model_id)
    counts = _run(src, later)
    assert counts["changed"] == 1
    assert counts["chunks_embedded"] == later.embedded == 1
    assert counts["chunks_vector_reused"] == per_note - 1
    assert any(edited in text for call in later.calls for text in call)


def test_a_refused_row_fails_its_document_only(tributary_home: Path, notes: Path) -> None:
    _write(notes / "note1.md", _note(1, marker=" BROKEN"))
    _write(notes / "note3.md", _note(3, marker=" POISON"))
    src = _source(notes)
    counts = _run(src, HashEmbedder(_model(src)), status="partial")
    assert (counts["new"], counts["failed"]) == (3, 2)
    store = open_state_store()
    try:
        run_id = store.runs("files:emb", limit=1)[0]["run_id"]
        failed = {r["item_key"]: r for r in store.run_items(run_id, action="failed")}
        assert sorted(failed) == ["note1.md", "note3.md"]
        assert failed["note1.md"]["reason"] == "embed: embed:dimension"
        assert failed["note3.md"]["reason"] == "embed: embed:not_finite"
        assert "answered 7 dimensions" in failed["note1.md"]["error"]
        assert store.get_item("files:emb", "note1.md").version is None  # never indexed
    finally:
        store.close()
    index = open_index(src.index)
    try:
        keys = {index.get_chunk(c)["item_key"] for c in index.chunk_ids(source="files:emb")}  # type: ignore[index]
        assert keys == {"note0.md", "note2.md", "note4.md"}
    finally:
        index.close()


def test_an_unreachable_endpoint_fails_the_task_not_the_documents(tributary_home: Path, notes: Path) -> None:
    _write(notes / "note4.md", _note(4, marker=" OFFLINE"))
    src = _source(notes)
    with pytest.raises(EmbeddingError, match="refused the connection"):
        run_pipeline(src, {}, embedder_factory=lambda: HashEmbedder(_model(src)))
    store = open_state_store()
    try:
        run = store.runs("files:emb", limit=1)[0]
        assert run["status"] == "failed" and "EmbeddingError" in run["error"]
        assert store.items("files:emb") == {}  # nothing committed: no document marked failed
        assert store.run_items(run["run_id"]) == []
    finally:
        store.close()


def test_a_refused_endpoint_fails_the_run_not_the_documents(tributary_home: Path, notes: Path) -> None:
    # no text is to blame for the endpoint's address: failing (and in time quarantining) every
    # document would hide a configuration error behind item failures
    _write(notes / "note2.md", _note(2, marker=" METADATA"))
    src = _source(notes)
    with pytest.raises(EmbeddingError, match="refusing to connect"):
        run_pipeline(src, {}, embedder_factory=lambda: HashEmbedder(_model(src)))
    store = open_state_store()
    try:
        run = store.runs("files:emb", limit=1)[0]
        assert run["status"] == "failed" and "169.254.169.254" in run["error"]
        assert store.run_items(run["run_id"]) == [] and store.items("files:emb") == {}
    finally:
        store.close()


def test_truncation_is_recorded_in_the_lineage_and_the_counts(tributary_home: Path, notes: Path) -> None:
    src = _source(notes)
    embedder = HashEmbedder(_model(src), truncate_over=60)
    counts = _run(src, embedder)
    long_texts = sum(1 for call in embedder.calls for t in call if len(t) > 60)
    assert long_texts > 0 and counts["chunks_truncated"] == long_texts
    store = open_state_store()
    try:
        run_id = store.runs("files:emb", limit=1)[0]["run_id"]
        rows = store.run_items(run_id, action="new")
    finally:
        store.close()
    cuts = [t for r in rows for t in r["chunks_truncated"]]
    assert len(cuts) == long_texts and all(t["kept"] == 60 and t["tokens"] > 60 for t in cuts)


def test_lineage_names_the_model_and_whether_each_vector_was_reused(tributary_home: Path, notes: Path) -> None:
    src = _source(notes)
    embedder = HashEmbedder(_model(src))
    _run(src, embedder)
    edited = "Paragraph 6 of note 0 about river locks and weirs, gates and sluices."
    _write(notes / "note0.md", _note(0, edit=edited))
    _run(src, HashEmbedder(embedder.model_id))
    store = open_state_store()
    try:
        run_id = store.runs("files:emb", limit=1)[0]["run_id"]
        (row,) = store.run_items(run_id, action="changed")
        assert row["embedding_model"] == embedder.model_id
        assert len(row["chunks_embedded"]) == 1 and row["chunks_vector_reused"]
        assert set(row["chunks_embedded"]) | set(row["chunks_vector_reused"]) == set(
            store.get_item("files:emb", "note0.md").chunk_ids
        )
        computed = chunk_lineage(store, row["chunks_embedded"][0])
    finally:
        store.close()
    assert computed is not None and computed["run"]["run_id"] == run_id
    assert computed["stages"]["embedding"] == {"model": embedder.model_id, "vector": "computed", "truncated": None}


def test_the_processing_hash_follows_the_chunker_version_and_the_model(notes: Path) -> None:
    default, other = _source(notes), _source(notes, model="cnmoro/portuguese-multilingual-e5-small")
    bm25 = SourceConfig(kind="files", name="emb", options={"root": str(notes)})
    assert set(processing_versions(bm25)) == {"chunker"}
    assert processing_versions(default)["embedding_model"] == provider_model_id(default.embedding)
    hashes = {s.processing_hash(processing_versions(s)) for s in (default, other, bm25)}
    assert len(hashes) == 3


def test_changing_the_model_re_embeds_every_document_once(tributary_home: Path, notes: Path) -> None:
    src = _source(notes)
    first = _run(src, HashEmbedder(_model(src)))
    switched = _source(notes, model="cnmoro/portuguese-multilingual-e5-small")
    embedder = HashEmbedder(_model(switched))
    counts = _run(switched, embedder)
    # same text, same chunks: "unchanged", re-embedded under the new model from the indexed texts
    assert counts["reembedded"] == 5 and counts["chunks_embedded"] == first["chunks_embedded"] == embedder.embedded
    # not re-fetched (tests/engine/test_reembedding.py has the details)
    assert counts["fetched"] == 0 and counts["reprocessed"] == {
        f"embedding model {_model(src)} -> {_model(switched)}": 5
    }
    assert _run(switched, HashEmbedder(embedder.model_id))["chunks_embedded"] == 0


def test_a_bm25_only_source_has_no_embedding_stage(tributary_home: Path, notes: Path) -> None:
    src = SourceConfig(kind="files", name="emb", options={"root": str(notes)}, batch_size=2)

    def refuse() -> Embedder:
        raise AssertionError("a BM25-only source must not open an embedder")

    summary = run_pipeline(src, {}, embedder_factory=refuse)
    assert summary.counts["new"] == 5 and summary.counts["chunks_embedded"] == 0


def test_an_embed_outcome_round_trips_and_older_manifests_still_read(tmp_path: Path) -> None:
    ref = StagedRef(str(tmp_path / "v.tvec"), 10, "ab" * 32)
    outcome = EmbedOutcome("m", DIMS, ref, 2, 1, ["c1"], [TruncatedChunk("c2", 600, 512)])
    assert decode(EmbedOutcome, encode(outcome), "x") == outcome
    old = {"run_id": "r", "source": "s", "batch": 0, "stage": "chunked", "schema_version": 2, "items": []}
    old["items"] = [{"change": {"item_key": "k", "kind": "new"}}]
    manifest = decode(BatchManifest, old, "chunked-0000.json")
    assert manifest.items[0].embedded is None


def test_identical_texts_in_one_batch_are_embedded_once(tributary_home: Path, tmp_path: Path) -> None:
    root = tmp_path / "twins"
    root.mkdir()
    for name in ("a.md", "b.md"):
        (root / name).write_text("# Same\n\nThe very same sentence in two files.\n", encoding="utf-8")
    src = _source(root)
    embedder = HashEmbedder(_model(src))
    counts = _run(src, embedder)
    assert counts["new"] == 2 and embedder.embedded == 1
    assert (counts["chunks_embedded"], counts["chunks_vector_reused"]) == (1, 1)
    store = open_state_store()
    try:
        run_id = store.runs("files:emb", limit=1)[0]["run_id"]
        rows = {r["item_key"]: r for r in store.run_items(run_id)}
        (twin,) = rows["b.md"]["chunks_vector_reused"] or rows["a.md"]["chunks_vector_reused"]
        traced = chunk_lineage(store, twin)
    finally:
        store.close()
    # the second copy's vector is the first's: its chunk's lineage says so
    assert traced is not None and traced["stages"]["embedding"]["vector"] == "reused"
    assert list(tributary_home.rglob("vectors/*.tvec")) == []  # staged vectors go with the run's staging


def test_a_state_db_made_before_embedding_gains_the_lineage_columns(tributary_home: Path) -> None:
    store = open_state_store()
    with store.engine.begin() as conn:  # the run-items table as an older release created it
        for column in ("embedding_model", "chunks_embedded", "chunks_vector_reused", "chunks_truncated"):
            conn.exec_driver_sql(f"ALTER TABLE tributary_run_items DROP COLUMN {column}")
    store.close()
    store = open_state_store()
    try:
        store.start_run("r1", "files:emb", dag_id="d", run_type="inline", params={}, window=(None, None))
        cut = [{"chunk_id": "c2", "tokens": 700, "kept": 512}]
        store.record_run_items(
            "r1",
            "files:emb",
            [
                RunItem(
                    "k",
                    "new",
                    embedding_model="m",
                    chunks_embedded=["c1"],
                    chunks_vector_reused=["c2"],
                    chunks_truncated=cut,
                )
            ],
        )
        (row,) = store.run_items("r1", source="files:emb")
    finally:
        store.close()
    assert (row["embedding_model"], row["chunks_embedded"], row["chunks_vector_reused"]) == ("m", ["c1"], ["c2"])
    assert row["chunks_truncated"] == cut


def test_the_embed_step_reports_its_counts_for_lineage(tributary_home: Path, notes: Path) -> None:
    src = _source(notes)
    embedder = HashEmbedder(_model(src))
    ctx = RunContext(source=src, run_id="inline__steps", params=RunParams.from_mapping({}), run_type="inline")
    store = open_state_store()
    try:
        plan = DiscoverStep(ctx).run(store)
        with open_connector(ctx) as connector:
            fetched = FetchStep(ctx, plan.batches[0], lambda: nullcontext(connector)).run(store)
        chunked = ChunkStep(ctx, ParseStep(ctx, fetched.manifest).run(store).manifest).run(store)
        step = EmbedStep(ctx, chunked.manifest, lambda: open_index(src.index), lambda: embedder)
        step.run(store)
    finally:
        store.close()
    counts = step.lineage().counts
    assert counts["items"] == 2 and counts["chunks_embedded"] == embedder.embedded > 0
    assert counts["chunks_vector_reused"] == 0 and step.lineage().stage == "embed"
