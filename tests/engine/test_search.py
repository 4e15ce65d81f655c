"""Search in three modes (plugins.engine.search and ``cli search --mode``) on the real SQLite index.

The deterministic embedder of test_embedding.py embeds the chunks and the query, so a query that
is a chunk's exact text finds that chunk first by vector; the last test runs the real local model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from include.config import SourceConfig
from plugins.embedders.registry import provider_model_id
from plugins.engine import run_pipeline
from plugins.engine.cli import main
from plugins.engine.search import SearchError, search_index, search_source
from tests.engine.test_embedding import HashEmbedder
from tests.support.airflow import write_sources

DOCS = {
    "rivers.md": "# Rivers\n\nThe Rhine flows north into the North Sea.\n",
    "lakes.md": "# Lakes\n\nLake Baikal is the deepest lake on Earth.\n",
    "salmon.md": "# Salmon\n\nSalmon swim upstream to spawn in the gravel beds where they hatched.\n",
}


def _entry(name: str, root: Path, provider: str = "local") -> dict[str, Any]:
    return {"kind": "files", "name": name, "options": {"root": str(root)}, "embedding": {"provider": provider}}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
def embedded(tributary_home: Path, root: Path) -> SourceConfig:
    """A synced source whose chunks carry the deterministic embedder's vectors."""
    src = SourceConfig.model_validate(_entry("geo", root))
    model = provider_model_id(src.embedding)
    assert model is not None
    assert run_pipeline(src, {}, embedder_factory=lambda: HashEmbedder(model)).status == "success"
    return src


def _fake_opener(source: SourceConfig) -> HashEmbedder:
    model = provider_model_id(source.embedding)
    assert model is not None
    return HashEmbedder(model)


def test_vector_and_hybrid_hits_keep_their_run_version_and_lineage(embedded: SourceConfig) -> None:
    exact = "Salmon swim upstream to spawn in the gravel beds where they hatched."
    chunk_text = next(
        h["text"] for h in search_index([embedded], "gravel beds", k=1, source="geo", mode="bm25")
    )  # the chunk's exact text (heading included): the deterministic embedder's nearest query
    assert exact in chunk_text
    for mode in ("vector", "hybrid"):
        hits = search_index([embedded], chunk_text, k=3, source="geo", mode=mode, embedder_opener=_fake_opener)
        top = hits[0]
        assert exact in top["text"] and top["mode"] == mode and top["rank"] == 1
        assert top["run_id"] and top["doc_version"] and top["lineage"]["chunk_id"] == top["chunk_id"]
        assert top["embedding_model"] == provider_model_id(embedded.embedding)
    hybrid = search_index([embedded], chunk_text, k=3, source="geo", mode="hybrid", embedder_opener=_fake_opener)
    assert set(hybrid[0]["ranks"]) == {"bm25", "vector"}


def test_the_search_source_is_named_or_the_only_one_that_embeds(tmp_path: Path) -> None:
    bm25 = SourceConfig.model_validate(_entry("plain", tmp_path, provider="none"))
    one = SourceConfig.model_validate(_entry("one", tmp_path))
    two = SourceConfig.model_validate(_entry("two", tmp_path))
    assert search_source([bm25, one], None, "vector") is one
    assert search_source([bm25, one, two], "files:two", "hybrid") is two
    assert search_source([bm25, one], None, "bm25") is None  # the default index, as before
    with pytest.raises(SearchError, match="several sources embed"):
        search_source([one, two], None, "vector")
    with pytest.raises(SearchError, match="BM25 only"):
        search_source([bm25, one], "plain", "vector")
    with pytest.raises(SearchError, match="every configured source is BM25 only"):
        search_source([bm25], None, "hybrid")
    with pytest.raises(SearchError, match="no configured source"):
        search_source([bm25], "nope", "bm25")


def test_cli_refuses_vector_search_of_a_bm25_only_source(
    tributary_home: Path,
    root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sources = write_sources(tmp_path / "s.yaml", [_entry("plain", root, provider="none")])
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(sources))
    assert main(["sync", "files:plain"]) == 0
    capsys.readouterr()
    assert main(["search", "deepest lake", "--mode", "vector", "--source", "plain"]) == 2
    assert "BM25 only" in capsys.readouterr().err
    assert main(["search", "deepest lake", "--mode", "hybrid"]) == 2
    assert "every configured source is BM25 only" in capsys.readouterr().err
    assert main(["search", "deepest lake", "--json"]) == 0  # bm25 (the default) as before
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert "Baikal" in hits[0]["text"] and hits[0]["run_id"] and hits[0]["mode"] == "bm25"


def test_cli_hybrid_search_with_the_local_model_end_to_end(
    tributary_home: Path,
    root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``run_pipeline`` with provider local (the bundled model, offline), then the CLI's modes."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sources = write_sources(tmp_path / "s.yaml", [_entry("geo", root)])
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(sources))
    assert main(["sync", "files:geo", "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)["counts"]
    assert counts["new"] == 3 and counts["chunks_embedded"] == counts["chunks_written"] == 3
    assert main(["sync", "files:geo", "--json"]) == 0  # nothing changed: nothing embedded
    assert json.loads(capsys.readouterr().out)["counts"]["chunks_embedded"] == 0
    # no word in common with the salmon note: only the vector ranking can find it
    assert main(["search", "fish migrating to breed", "--mode", "vector", "-k", "1", "--json"]) == 0
    (hit,) = json.loads(capsys.readouterr().out)["hits"]
    assert "Salmon" in hit["text"] and hit["embedding_model"].startswith("local:")
    assert main(["search", "which lake is deepest", "--mode", "hybrid", "--json"]) == 0
    hybrid = json.loads(capsys.readouterr().out)["hits"]
    assert "Baikal" in hybrid[0]["text"] and hybrid[0]["run_id"] and hybrid[0]["lineage"]["chunk_id"]
    assert main(["search", "fish migrating to breed", "--mode", "vector"]) == 0
    assert "lineage: chunk" in capsys.readouterr().out
