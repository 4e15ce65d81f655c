"""The fast pipeline keeps what the slow one did: packed staging, bulk state writes, parallel parse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from include.config import SourceConfig
from include.contract import Block, BlockKind, Chunk, ParsedDocument, Position
from include.index import open_index
from include.staging import StagingArea, StagingCorruptError
from include.stores import ItemState, open_state_store
from plugins.engine import run_pipeline
from plugins.engine.packed import PackedReader, put_chunks, put_parsed
from plugins.engine.records import StagedRef


def _doc(n: int) -> ParsedDocument:
    block = Block(
        BlockKind.PARAGRAPH,
        f"Lock {n} lifts boats.",
        heading_path=["Canals"],
        positions=[Position(path="/p[1]", bbox=(1.0, 2.0, 3.0, 4.0))],
    )
    return ParsedDocument([block], title=f"Lock {n}", parser="html", metadata={"language": "en"})


def test_a_batch_file_round_trips_and_a_changed_one_is_refused(tmp_path: Path) -> None:
    area = StagingArea.at(str(tmp_path / "run"))
    docs = {"a.html": _doc(1), "b.html": _doc(2)}
    ref = StagedRef.of(put_parsed(area, 3, docs))
    reader = PackedReader()
    assert {k: reader.parsed(ref, k).to_dict() for k in docs} == {k: d.to_dict() for k, d in docs.items()}
    Path(ref.path).write_bytes(Path(ref.path).read_bytes().replace(b"Lock 1", b"Bear 1"))
    with pytest.raises(StagingCorruptError):
        PackedReader().parsed(ref, "a.html")


def test_chunks_staged_as_json_by_an_older_run_are_still_read(tmp_path: Path) -> None:
    area = StagingArea.at(str(tmp_path / "run"))
    chunk = Chunk("d-1", "d", 0, "Weirs.", 2, "h", positions=[Position(line=3)])
    old = StagedRef.of(area.put_json("chunks/d.json", [chunk.to_dict()]))
    new = StagedRef.of(put_chunks(area, 0, {"k": [chunk]}))
    assert PackedReader().chunks(old, "k") == PackedReader().chunks(new, "k") == [chunk]


def test_position_to_dict_names_every_field() -> None:
    full = Position(page=1, bbox=(0.0, 1.0, 2.0, 3.0), sheet="S", row=2, line=3, slide=4, path="/x")
    assert set(full.to_dict()) == set(Position.__dataclass_fields__)
    assert full.to_dict()["bbox"] == [0.0, 1.0, 2.0, 3.0] and Position(line=1).to_dict() == {"line": 1}


def _state(i: int, title: str) -> ItemState:
    return ItemState("s", f"k{i}", f"d{i}", None, None, None, [f"d{i}-c"], title=title)


def test_bulk_item_writes_update_and_insert_in_one_call(tributary_home: Path) -> None:
    store = open_state_store()
    store.save_items([_state(i, "old") for i in range(3)])
    store.save_items([_state(i, f"new{i}") for i in range(1, 700)])
    items = store.items("s")
    assert len(items) == 700 and items["k0"].title == "old" and items["k2"].title == "new2"
    store.close()


def test_parse_workers_index_what_one_process_indexes(
    tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(7):
        (docs / f"n{i}.md").write_text(
            f"# Note {i}\n\nSluices and weirs, note {i}.\n\n## More\n\nText {i}.\n", encoding="utf-8"
        )
    indexed = []
    for workers, name in (("0", "serial"), ("2", "pooled")):
        monkeypatch.setenv("TRIBUTARY_PARSE_WORKERS", workers)
        src = SourceConfig(kind="files", name=name, options={"root": str(docs)}, batch_size=2)
        summary = run_pipeline(src)
        assert summary.counts["new"] == 7 and summary.counts["failed"] == 0, summary.counts
        index = open_index()
        rows = [index.get_chunk(c) for c in sorted(index.chunk_ids(source=src.source_id))]
        index.close()
        indexed.append(sorted((r["item_key"], r["text"], r["seq"]) for r in rows if r is not None))
    assert indexed[0] == indexed[1] and len(indexed[0]) >= 7
    assert json.dumps(indexed[0])  # plain values
