"""A big batch never fails a run on size; staged parts are decoded within bounds (issue 33, 12 and 14).

Before: a stage's output was one msgpack object per batch (51 pages of 6 MiB: a 524 MB object),
which the database backend refuses (256 MiB cap): ``StagingTooLargeError`` escaped the parse
stage and the run failed, on every retry; the batch was held whole (every document, then its
encoding). A part planted with a metadata map nested 200,000 deep raised ``RecursionError``.
Now the output is split into parts under the backend's cap, encoded item by item; one item over
the cap fails alone; a part that does not decode fails the items pointing at it.
"""

from __future__ import annotations

import random
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import sqlalchemy as sa

from include.config import SourceConfig
from include.contract import Block, BlockKind, Chunk, ParsedDocument, RawDocument
from include.index import open_index
from include.staging import StagingArea, StagingCorruptError, StagingTooLargeError
from include.staging import database as db_staging
from include.staging.locations import location_name
from include.stores import open_state_store
from plugins.engine import packed, process, run_pipeline
from plugins.engine import steps as engine_steps
from plugins.engine.early import EarlyWork
from plugins.engine.manifests import read_stage_manifest, write_stage_manifest
from plugins.engine.packed import PackedReader, PackedWriter, UnstageableError
from plugins.engine.records import StagedRef
from tests.support.postgres import PG_ADMIN_URL, scratch_database

MIB = 1024 * 1024
WORDS = ["river", "delta", "lock", "weir", "salmon", "tide", "bridge", "canal", "sluice", "boat"]


def _text(size: int, seed: int) -> str:
    """About ``size`` characters of prose in 4 KB paragraphs (one block each)."""
    rng = random.Random(seed)
    paragraph = " ".join(rng.choice(WORDS) for _ in range(700))
    return "\n\n".join(f"{seed} {paragraph}" for _ in range(size // len(paragraph) + 1))


def _postgres_reachable() -> bool:
    try:
        engine = sa.create_engine(PG_ADMIN_URL)
        with engine.connect():
            pass
        engine.dispose()
    except sa.exc.OperationalError:
        return False
    return True


@pytest.fixture
def pg_staging(tributary_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """State and staging in a fresh PostgreSQL database (``db:///...``)."""
    if not _postgres_reachable():
        pytest.skip(f"PostgreSQL is unreachable at {PG_ADMIN_URL}")
    with scratch_database("tributary_parts") as url:
        monkeypatch.setenv("TRIBUTARY_STATE_URL", url)
        staging = f"db:///staging-{uuid.uuid4().hex[:8]}"
        monkeypatch.setenv("TRIBUTARY_STAGING_URL", staging)
        yield staging


@pytest.fixture
def parts_written(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[StagedRef]]]:
    """Every part the stages write: (name of the batch's output, its parts)."""
    written: list[tuple[str, list[StagedRef]]] = []
    close = PackedWriter.close

    def recording_close(self: PackedWriter) -> dict[str, StagedRef]:
        refs = close(self)
        written.append((self._name, list(self.parts)))
        return refs

    monkeypatch.setattr(PackedWriter, "close", recording_close)
    return written


def _indexed_items(source_id: str) -> set[str]:
    index = open_index()
    try:
        rows = [index.get_chunk(c) for c in index.chunk_ids(source=source_id)]
        return {r["item_key"] for r in rows if r is not None}
    finally:
        index.close()


def _failures(run_id: str, source_id: str) -> dict[str, str]:
    store = open_state_store()
    try:
        return {row["item_key"]: row["reason"] for row in store.run_items(run_id, action="failed", source=source_id)}
    finally:
        store.close()


# -- point 12: size ---------------------------------------------------------------------------


def test_a_batch_over_the_database_cap_is_staged_in_parts_and_all_of_it_indexed(
    pg_staging: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parts_written: list[Any]
) -> None:
    """12 x 256 KiB in one batch (3 MiB) with the database cap lowered to 1 MiB (the ratio of
    51 x 6 MiB against 256 MiB; at 12 x 2 MiB against 8 MiB the test took 224 s of CI for the
    same parts): before, the run failed with StagingTooLargeError and nothing indexed."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(12):
        (docs / f"big{i:02d}.txt").write_text(_text(MIB // 4, i), encoding="utf-8")
    monkeypatch.setattr(db_staging, "MAX_OBJECT_BYTES", MIB)
    src = SourceConfig(kind="files", name="parts", options={"root": str(docs)}, batch_size=12)
    summary = run_pipeline(src)
    assert summary.status == "success" and summary.counts["new"] == 12 and summary.counts["failed"] == 0
    assert _indexed_items(src.source_id) == {f"big{i:02d}.txt" for i in range(12)}
    parsed = [parts for name, parts in parts_written if name.startswith("parsed/")]
    chunked = [parts for name, parts in parts_written if name.startswith("chunks/")]
    assert len(parsed) == len(chunked) == 1
    assert len(parsed[0]) >= 4 and len(chunked[0]) >= 4, (parsed, chunked)  # 3 items of ~256 KiB per part
    assert all(p.size <= MIB and p.path.startswith("db:///") for p in parsed[0] + chunked[0])


def test_one_item_over_the_cap_fails_alone_and_the_rest_of_its_batch_is_indexed(
    pg_staging: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 90 KB text of 30,000 one-letter paragraphs parses into a 3.8 MB document: its raw bytes
    fit under a 2 MiB cap, its parsed document does not. That item fails (not retryable: it is as
    large next time); before, StagingTooLargeError failed the whole run."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(4):
        (docs / f"n{i}.md").write_text(f"# Note {i}\n\nLocks and weirs, note {i}.\n", encoding="utf-8")
    (docs / "blocks.txt").write_text("a\n\n" * 30_000, encoding="utf-8")
    monkeypatch.setattr(db_staging, "MAX_OBJECT_BYTES", 2 * MIB)
    src = SourceConfig(kind="files", name="parts", options={"root": str(docs)}, batch_size=10)
    summary = run_pipeline(src)
    assert summary.status == "partial" and summary.counts["new"] == 4 and summary.counts["failed"] == 1
    assert _failures(summary.run_id, src.source_id) == {"blocks.txt": "parse: staging_too_large"}
    assert _indexed_items(src.source_id) == {f"n{i}.md" for i in range(4)}
    store = open_state_store()
    try:
        state = store.get_item(src.source_id, "blocks.txt")
        assert state is not None and state.last_error_reason == "staging_too_large" and "over" in state.last_error
    finally:
        store.close()


def _cheap_parse(raw: RawDocument, options: Any) -> ParsedDocument:
    """One block of the file's text: a parser whose own working memory (the text parser's is
    some 20 times the document) does not hide what the stage holds."""
    return ParsedDocument([Block(BlockKind.PARAGRAPH, raw.data.decode("utf-8"))], parser="cheap")


def test_parse_stage_memory_is_about_one_part_and_one_document_not_the_batch(
    tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tracemalloc's peak over the parse stage of 10 documents of 2 MiB, 2 MiB parts. Before:
    the batch was held whole, every document and then its encoding (measured: 46.0 MiB); now
    one part and about one document (its bytes, its text, its encoding)."""
    n, size, part = 10, 2 * MIB, 2 * MIB
    monkeypatch.setattr(packed, "PART_TARGET_BYTES", part)
    monkeypatch.setattr(process, "parse_document", _cheap_parse)
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(n):
        # words of 4,000 letters: the content hash's split makes a few strings, not 300,000
        (docs / f"big{i}.txt").write_text(f"{i} " + ("w" * 4000 + " ") * (size // 4001), encoding="utf-8")
    peaks: list[int] = []
    parse_stage = engine_steps.parse_stage

    def measured(fetched: str, source: SourceConfig, early: EarlyWork | None = None) -> str:
        tracemalloc.start()
        try:
            return parse_stage(fetched, source, early)
        finally:
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()

    monkeypatch.setattr(engine_steps, "parse_stage", measured)
    summary = run_pipeline(SourceConfig(kind="files", name="mem", options={"root": str(docs)}, batch_size=n))
    assert summary.counts["new"] == n and summary.counts["failed"] == 0 and len(peaks) == 1
    assert peaks[0] < part + 6 * size, f"parse stage peak {peaks[0] / MIB:.1f} MiB for {n} x {size / MIB:.0f} MiB"


# -- point 14: decoding within bounds ---------------------------------------------------------


def _deep_map(depth: int) -> bytes:
    return b"\x81\xa1a" * depth + b"\xc0"  # {"a": {"a": ... None}}


def _plant_deep_metadata(fetched: str, parsed: str, planted: list[str]) -> str:
    """Rewrite the part of the batch's first parsed item with that item's metadata nested 200,000
    deep, record the part's new size and hash (so the digest check passes) in a rewritten parsed
    manifest, and return that manifest's ref; the items of that part go to ``planted``."""
    manifest = read_stage_manifest(parsed)
    target = manifest.items[0].parsed.file if manifest.items[0].parsed else None
    assert target is not None
    entries = msgspec.msgpack.decode(StagingArea.read_bytes(target.path))
    entries[next(iter(entries))]["metadata"] = msgspec.Raw(_deep_map(200_000))
    data = msgspec.msgpack.encode(entries)
    rewritten = StagedRef.of(StagingArea.of(target.path).put_bytes(location_name(target.path), data))
    for item in manifest.items:
        if item.parsed is not None and item.parsed.file == target:
            item.parsed.file = rewritten
            planted.append(item.item_key)
    return write_stage_manifest(fetched, manifest)


def test_a_part_with_metadata_nested_200000_deep_fails_its_items_as_staging_corrupt(
    tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(4):
        (docs / f"n{i}.md").write_text(f"# Note {i}\n\n{_text(3000, i)}\n", encoding="utf-8")
    monkeypatch.setattr(packed, "PART_TARGET_BYTES", 10_000)  # two notes (4.5 KB each) per part
    planted: list[str] = []
    parse_stage = engine_steps.parse_stage

    def parse_then_plant(fetched: str, source: SourceConfig, early: EarlyWork | None = None) -> str:
        return _plant_deep_metadata(fetched, parse_stage(fetched, source, early), planted)

    monkeypatch.setattr(engine_steps, "parse_stage", parse_then_plant)
    src = SourceConfig(kind="files", name="deep", options={"root": str(docs)}, batch_size=4)
    summary = run_pipeline(src)
    assert sorted(planted) == ["n0.md", "n1.md"]
    assert (summary.status, summary.counts["new"], summary.counts["failed"]) == ("partial", 2, 2), summary
    assert _failures(summary.run_id, src.source_id) == dict.fromkeys(planted, "fetch: staging_corrupt")
    assert _indexed_items(src.source_id) == {"n2.md", "n3.md"}
    monkeypatch.setattr(engine_steps, "parse_stage", parse_stage)
    assert run_pipeline(src).counts["new"] == 2  # retried as staging_corrupt: fetched again, indexed


@pytest.mark.parametrize(
    "planted",
    [
        b"\xdf\x00\x00\x00\x01\xa1k\x82\xa6blocks\x90\xa8metadata" + _deep_map(200_000),  # RecursionError
        b"\xdf\x00\x00\x00\x01\xa1k\x81\xa6blocks\xdd\xff\xff\xff\xff",  # an array of 4 billion items
        b"\xdf\x00\x00\x00\x02\xa1k",  # truncated
        b"\xcb" + b"\x7f\xf0" + bytes(6),  # a float (Infinity), not a map
    ],
)
def test_every_decoding_error_of_a_part_is_staging_corrupt(tmp_path: Path, planted: bytes) -> None:
    area = StagingArea.at(str(tmp_path / "run"))
    ref = StagedRef.of(area.put_bytes("parsed/parsed-0000-p000.msgpack", planted))
    reader = PackedReader()
    with pytest.raises(StagingCorruptError, match="parsed-0000-p000"):
        reader.parsed(ref, "k")
    with pytest.raises(StagingCorruptError):  # the next item of that part: refused without a second read
        reader.parsed(ref, "k2")


# -- the writer and the reader ----------------------------------------------------------------


def _doc(n: int, chars: int) -> ParsedDocument:
    return ParsedDocument([Block(BlockKind.PARAGRAPH, f"{n} " + "w" * chars)], title=f"D{n}", metadata={"n": n})


def test_parts_fill_in_order_under_the_target_and_are_each_read_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(packed, "PART_TARGET_BYTES", 10_000)
    area = StagingArea.at(str(tmp_path / "run"))
    writer = PackedWriter(area, "parsed", 3)
    docs = {f"k{i}": _doc(i, 3000) for i in range(7)}
    for key, doc in docs.items():
        writer.add(key, doc)
    writer.add("alone", _doc(99, 25_000))  # over the target, under any cap: a part of its own
    refs = writer.close()
    assert [p.path.rsplit("/", 1)[-1] for p in writer.parts] == [f"parsed-0003-p{i:03d}.msgpack" for i in range(4)]
    assert [p.size <= 10_000 for p in writer.parts] == [True, True, True, False]
    assert [refs[f"k{i}"] for i in range(7)] == [writer.parts[i // 3] for i in range(7)]
    reads: list[str] = []
    read_verified = StagingArea.read_verified

    def counted(path: str, digest: dict[str, Any] | None) -> bytes:
        reads.append(path)
        return read_verified(path, digest)

    monkeypatch.setattr(StagingArea, "read_verified", staticmethod(counted))
    reader = PackedReader()
    assert all(reader.parsed(refs[k], k).to_dict() == doc.to_dict() for k, doc in docs.items())
    assert reads == [p.path for p in writer.parts[:3]]
    assert len(reader._entries) == 1  # only the current part's entries are kept


def test_an_item_over_the_cap_or_not_representable_is_refused_and_the_part_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRIBUTARY_STATE_URL", f"sqlite:///{tmp_path / 'state.db'}")
    monkeypatch.setattr(db_staging, "MAX_OBJECT_BYTES", 20_000)
    area = StagingArea.at("db:///staging/t/run")
    writer = PackedWriter(area, "chunked", 0)
    chunk = Chunk("d-1", "d", 0, "Weirs.", 2, "h")
    writer.add("a", [chunk])
    with pytest.raises(StagingTooLargeError, match="over the staging backend's cap of 20000"):
        writer.add("big", [Chunk("d-2", "d", 1, "x" * 30_000, 2, "h")])
    with pytest.raises(UnstageableError, match="OverflowError"):
        writer.add("huge-int", [Chunk("d-3", "d", 2, "Locks.", 2, "h", metadata={"n": 2**70})])
    writer.add("b", [chunk])
    refs = writer.close()
    assert set(refs) == {"a", "b"} and len(writer.parts) == 1
    assert PackedReader().chunks(refs["b"], "b") == [chunk]
