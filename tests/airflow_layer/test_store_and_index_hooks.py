"""The Airflow layer's hooks own the state store and the index: open, hand over, close."""

from __future__ import annotations

from pathlib import Path

import pytest

from include.config import IndexConfig, SourceConfig
from include.index.sqlite_vectors import DB_ERRORS
from plugins.engine import run_pipeline
from plugins.tributary_airflow.hooks import IndexHook, StateStoreHook
from tests.support.airflow import write_sources


@pytest.fixture
def notes(tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SourceConfig:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "weirs.md").write_text("# Weirs\n\nA weir raises the river upstream.\n", encoding="utf-8")
    (root / "locks.md").write_text("# Locks\n\nA lock lifts boats between two levels.\n", encoding="utf-8")
    entry = {"kind": "files", "name": "canals", "options": {"root": str(root)}, "index": {"name": "canals"}}
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "s.yaml", [entry])))
    source = SourceConfig(**entry)
    run_pipeline(source, run_id="r1")
    return source


def test_state_hook_keeps_one_store_until_closed(notes: SourceConfig) -> None:
    hook = StateStoreHook()
    store = hook.get_conn()
    assert hook.get_conn() is store  # one engine and pool per task, not one per call
    assert store.get_run("r1", notes.source_id)["status"] == "success"
    hook.close()
    hook.close()  # closing twice is harmless
    reopened = hook.get_conn()
    assert reopened is not store and sorted(reopened.items(notes.source_id)) == ["locks.md", "weirs.md"]
    hook.close()


def test_state_hook_closes_on_error(notes: SourceConfig) -> None:
    hook = StateStoreHook()
    with pytest.raises(RuntimeError, match="stage failed"), hook as store:
        assert store.get_run("r1", notes.source_id) is not None
        raise RuntimeError("stage failed")
    assert hook.get_conn() is not store  # the failed block's store was closed and let go
    hook.close()


def test_state_hook_opens_the_url_it_is_given(tributary_home: Path, postgres_url: str) -> None:
    with StateStoreHook(postgres_url) as store:
        assert store.engine.url.get_backend_name() == "postgresql"
        store.start_run("hook-r1", "files:hooked")
        assert store.get_run("hook-r1", "files:hooked")["status"] == "running"


def test_index_hook_resolves_a_source_by_id_dag_id_or_config(notes: SourceConfig) -> None:
    for source in (notes.source_id, notes.dag_id, notes):
        hook = IndexHook.for_source(source)
        assert hook.config == notes.index
        with hook.connection() as index:
            assert index.count(source=notes.source_id) > 0
            assert index.search("boats between levels", source=notes.source_id)[0].source == notes.source_id


def test_index_hook_get_conn_is_an_index_factory(notes: SourceConfig) -> None:
    hook = IndexHook.for_source(notes)
    first, second = hook.get_conn(), hook.get_conn()
    assert first is not second  # each caller owns (and closes) the backend it opened
    written = first.count(source=notes.source_id)
    first.close()
    assert written > 0 and second.count(source=notes.source_id) == written
    second.close()
    # the stdlib sqlite3 or pysqlite3 (where the stdlib cannot load sqlite-vec): either refuses
    with pytest.raises(DB_ERRORS, match="closed database"):
        first.count(source=notes.source_id)


def test_index_hook_defaults_to_the_embedded_index(notes: SourceConfig) -> None:
    hook = IndexHook()
    assert hook.config == IndexConfig()
    with hook.connection() as index:
        assert index.count(source=notes.source_id) == 0  # the source wrote to its own "canals" index
