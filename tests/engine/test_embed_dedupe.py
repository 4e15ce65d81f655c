"""Text repeated on many pages (navigation, headers, footers) is embedded once per distinct text:
within a batch (the misses are deduplicated by text hash) and across the batches of one run (a
later batch finds an earlier one's vectors in the index, the vector cache)."""

from __future__ import annotations

from pathlib import Path

from include.config import EmbeddingConfig, SourceConfig
from plugins.embedders.registry import provider_model_id
from plugins.engine import run_pipeline
from tests.engine.test_embedding import HashEmbedder

PAGES = 50
NAV = "Home | Products | Pricing | Documentation | Blog | Careers | Contact us | Sign in | Status page | Legal"


def _site(root: Path, canal: str = "the canal") -> Path:
    root.mkdir()
    for n in range(PAGES):
        body = f"Page {n} explains lock number {n} on {canal}, its gates, its keeper and its opening hours."
        (root / f"page{n:02}.md").write_text(f"{NAV}\n\n# Page {n}\n\n{body}\n", encoding="utf-8")
    return root


def _source(root: Path, pages_per_batch: int, texts_per_request: int = 32) -> SourceConfig:
    return SourceConfig(
        kind="files",
        name=root.name,
        options={"root": str(root)},
        batch_size=pages_per_batch,
        chunker={"name": "token", "options": {"chunk_token_num": 32}},
        embedding=EmbeddingConfig(provider="local", batch_size=texts_per_request),
    )


def _model(source: SourceConfig) -> str:
    return str(provider_model_id(source.embedding))


def test_a_navigation_chunk_on_50_pages_is_sent_once(tributary_home: Path, tmp_path: Path) -> None:
    src = _source(_site(tmp_path / "site"), pages_per_batch=PAGES)
    embedder = HashEmbedder(_model(src))
    summary = run_pipeline(src, {}, embedder_factory=lambda: embedder)
    assert summary.status == "success", summary.counts
    assert summary.counts["new"] == PAGES
    sent = [text for call in embedder.calls for text in call]
    assert sum(NAV in text for text in sent) == 1  # one request row for the 50 copies
    assert len(sent) == len(set(sent)) == summary.counts["chunks_embedded"]
    assert summary.counts["chunks_vector_reused"] == PAGES - 1


def test_a_later_batch_finds_an_earlier_batchs_vectors(tributary_home: Path, tmp_path: Path) -> None:
    src = _source(_site(tmp_path / "site"), pages_per_batch=PAGES // 2)  # two batches of 25 pages
    embedder = HashEmbedder(_model(src))
    summary = run_pipeline(src, {}, embedder_factory=lambda: embedder)
    assert summary.counts["batches"] == 2 and summary.counts["new"] == PAGES
    sent = [text for call in embedder.calls for text in call]
    assert sum(NAV in text for text in sent) == 1  # the second batch took it from the index
    assert summary.counts["chunks_vector_reused"] == PAGES - 1


def test_a_call_carries_a_batch_per_request_in_flight(tributary_home: Path, tmp_path: Path) -> None:
    # different pages on each site (the shared navigation: found in the index the second time)
    one_src = _source(_site(tmp_path / "one", "the canal"), pages_per_batch=PAGES, texts_per_request=4)
    four_src = _source(_site(tmp_path / "four", "the river"), pages_per_batch=PAGES, texts_per_request=4)
    one, four = HashEmbedder(_model(one_src)), HashEmbedder(_model(four_src))
    four.max_in_flight = 4  # a provider that keeps 4 requests going gets 4 requests' worth per call
    run_pipeline(one_src, {}, embedder_factory=lambda: one)
    run_pipeline(four_src, {}, embedder_factory=lambda: four)
    assert (one.embedded, four.embedded) == (PAGES + 1, PAGES)
    assert {len(c) for c in one.calls[:-1]} == {4} and {len(c) for c in four.calls[:-1]} == {16}
