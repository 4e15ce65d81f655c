"""Fixtures of the engine's unit tests: a real SQLite state store and index under a fresh home."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from include.config import SourceConfig
from include.contract import VersionEvidence, document_id
from include.stores import ItemState, StateStore, open_state_store

SID = "files:unit"


@pytest.fixture
def source(tmp_path: Path) -> SourceConfig:
    root = tmp_path / "docs"
    root.mkdir()
    return SourceConfig(kind="files", name="unit", options={"root": str(root)}, batch_size=2)


@pytest.fixture
def store(tributary_home: Path) -> Iterator[StateStore]:
    """The SQLite state store of the fresh home (the one the engine opens by default)."""
    st = open_state_store()
    yield st
    st.close()


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    """Five notes of twelve paragraphs each (the embedding tests' documents)."""
    from tests.engine.test_embedding import _note  # the text lives beside the tests that edit it

    root = tmp_path / "notes"
    root.mkdir()
    for i in range(5):
        (root / f"note{i}.md").write_text(_note(i), encoding="utf-8")
    return root


def state(key: str, *, indexed: bool = True, **kw: object) -> ItemState:
    """An item's stored state; indexed ones have a version and one chunk."""
    doc = document_id(SID, key)
    fields: dict[str, object] = {
        "source": SID,
        "item_key": key,
        "doc_id": doc,
        "version": VersionEvidence(etag=f"e-{key}", content_hash=f"h-{key}") if indexed else None,
        "content_hash": f"h-{key}" if indexed else None,
        "processing_hash": "proc",
        "chunk_ids": [f"{doc}-00000"] if indexed else [],
    }
    fields.update(kw)
    return ItemState(**fields)  # type: ignore[arg-type]


def stored(store: StateStore, *states: ItemState) -> dict[str, ItemState]:
    """Save ``states`` and read them back (what a stage sees of them)."""
    store.save_items(states)
    return store.items(SID)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Seven markdown notes of 30 paragraphs each (a files source of several batches)."""
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(7):
        body = "\n\n".join(f"Paragraph {j} of note {i} about canal locks and weirs." for j in range(30))
        (root / f"note{i}.md").write_text(f"# Note {i}\n\n{body}\n", encoding="utf-8")
    return root
