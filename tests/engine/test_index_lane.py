"""The index lane: embed and upsert in a thread of their own, in batch order, bounded, failing loud.

The lane's unit tests drive it with a work function that records what it was given; the runner
tests compare a laned run with a serial one (``TRIBUTARY_INDEX_LANE=0``) on the real state store
and SQLite index, with the counting embedder of ``test_embedding``. Nothing is timed: a blocked
producer is seen as a thread still alive while the lane's work is held by an event.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from include.config import EmbeddingConfig, SourceConfig
from include.index import open_index
from plugins.engine import run_pipeline
from plugins.engine.index_lane import IndexLane, lane_wanted
from tests.engine.test_embedding import HashEmbedder, _model


def test_batches_are_indexed_in_the_order_handed_over() -> None:
    seen: list[str] = []
    late: Future[str] = Future()
    with IndexLane(lambda chunked: seen.append(chunked) or f"up:{chunked}") as lane:
        lane.submit(late)  # the parse pool's future of batch 0, not done yet
        lane.submit("b1")
        late.set_result("b0")
        lane.submit("b2")
        assert lane.finish() == ["up:b0", "up:b1", "up:b2"]
    assert seen == ["b0", "b1", "b2"]


def test_a_producer_waits_when_depth_batches_are_waiting() -> None:
    release = threading.Event()
    lane = IndexLane(lambda chunked: release.wait(60) and chunked, depth=2)
    handed: list[int] = []

    def produce() -> None:
        for n in range(6):
            lane.submit(f"b{n}")
            handed.append(n)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    producer.join(0.5)
    # one batch in the lane's hands, two waiting, the fourth blocked in submit
    assert producer.is_alive() and handed == [0, 1, 2]
    release.set()
    producer.join(60)
    assert lane.finish() == [f"b{n}" for n in range(6)]


def test_the_first_failure_stops_the_lane_and_reaches_the_runner() -> None:
    done: list[str] = []

    def work(chunked: str) -> str:
        if chunked == "b1":
            raise RuntimeError("index refused batch 1")
        done.append(chunked)
        return chunked

    lane = IndexLane(work, depth=8)
    for n in range(4):
        lane.submit(f"b{n}")
    with pytest.raises(RuntimeError, match="batch 1"):
        lane.finish()
    assert done == ["b0"]  # nothing after the failed batch reached the index
    with pytest.raises(RuntimeError, match="batch 1"):
        lane.submit("b4")


def test_a_failing_runner_cancels_what_is_still_waiting() -> None:
    release, done = threading.Event(), []

    def work(chunked: str) -> str:
        release.wait(60)
        done.append(chunked)
        return chunked

    with pytest.raises(ValueError, match="fetch failed"), IndexLane(work, depth=4) as lane:
        for n in range(3):
            lane.submit(f"b{n}")
        release.set()
        raise ValueError("fetch failed")
    assert len(done) <= 1  # at most the batch already in the lane's hands


def test_the_lane_is_off_for_one_batch_or_when_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert lane_wanted(2) and not lane_wanted(1)
    monkeypatch.setenv("TRIBUTARY_INDEX_LANE", "0")
    assert not lane_wanted(5)


def _notes(root: Path) -> Path:
    root.mkdir()
    nav = " | ".join(["Home", "Docs", "Download", "Community", "Mirrors", "Archive", "Support"] * 3)
    for i in range(7):
        body = " ".join(f"Sluice {i}.{j} holds the water of reach {j} between two gates." for j in range(4))
        (root / f"n{i}.md").write_text(f"{body}\n\n{nav}\n", encoding="utf-8")
    return root


def _source(root: Path, name: str) -> SourceConfig:
    return SourceConfig(
        kind="files",
        name=name,
        options={"root": str(root)},
        batch_size=2,
        chunker={"name": "token", "options": {"chunk_token_num": 48}},
        embedding=EmbeddingConfig(provider="local"),
    )


def _indexed(src: SourceConfig) -> list[tuple[str, str, int]]:
    index = open_index(src.index)
    try:
        rows = [index.get_chunk(c) for c in sorted(index.chunk_ids(source=src.source_id))]
    finally:
        index.close()
    return sorted((r["item_key"], r["text"], r["seq"]) for r in rows if r is not None)


def test_a_laned_run_indexes_what_a_serial_run_indexes_and_embeds_a_repeated_text_once(
    tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _notes(tmp_path / "notes")
    runs = {}
    for lane, name in (("0", "serial"), ("1", "laned")):
        monkeypatch.setenv("TRIBUTARY_INDEX_LANE", lane)
        src = _source(root, name)
        embedder = HashEmbedder(f"{_model(src)}#{name}")  # a model of its own: no vectors shared across runs
        summary = run_pipeline(src, embedder_factory=lambda e=embedder: e)  # type: ignore[misc]
        assert summary.status == "success" and summary.counts["new"] == 7, summary.counts
        sent = [t for call in embedder.calls for t in call]
        runs[name] = (_indexed(src), sent)
    assert runs["serial"][0] == runs["laned"][0] and len(runs["laned"][0]) >= 14
    # seven notes in four batches share one navigation chunk: it is embedded once in the run,
    # because each batch's embed step finds the earlier batches' vectors already in the index
    for _, sent in runs.values():
        assert len(sent) == len(set(sent)) == 7 * 2 + 1
        assert sum("Community" in t for t in sent) == 1
