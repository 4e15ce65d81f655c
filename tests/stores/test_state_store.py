"""The state store and run log on SQLite and on PostgreSQL (same tests, both backends)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from include.contract import VersionEvidence
from include.stores import ItemState, RunItem, StateStore


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    url = f"sqlite:///{tmp_path / 'state.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    s = StateStore(url)
    yield s
    s.close()


def _item(key: str, **kw: Any) -> ItemState:
    base: dict[str, Any] = {
        "source": "web:t",
        "item_key": key,
        "doc_id": f"doc-{key}",
        "version": VersionEvidence(etag='"v1"'),
        "content_hash": "h1",
        "processing_hash": "p1",
        "chunk_ids": [f"doc-{key}-00000"],
    }
    return ItemState(**(base | kw))


def _run(store: StateStore, run_id: str, source: str | None = None) -> dict[str, Any]:
    run = store.get_run(run_id, source)
    assert run is not None, f"no run {run_id!r}"
    return run


def test_items_round_trip_and_replace(store: StateStore) -> None:
    store.save_items([_item("a"), _item("b", version=None, failure_count=1, last_error="boom")])
    items = store.items("web:t")
    assert set(items) == {"a", "b"}
    assert items["a"].version == VersionEvidence(etag='"v1"')
    assert items["a"].indexed and not items["b"].indexed
    assert items["b"].failure_count == 1 and items["b"].last_error == "boom"
    # saving again replaces the row, never duplicates it
    store.save_items([_item("a", version=VersionEvidence(etag='"v2"'), chunk_ids=["x", "y"])])
    again = store.items("web:t")
    assert len(again) == 2
    assert again["a"].version == VersionEvidence(etag='"v2"') and again["a"].chunk_ids == ["x", "y"]
    found = store.find_by_doc_id("doc-a")
    assert found is not None and found.item_key == "a"
    store.delete_items("web:t", ["a"])
    assert set(store.items("web:t")) == {"b"}
    assert store.items("web:other") == {}


def test_run_log_and_lineage_are_idempotent(store: StateStore) -> None:
    store.start_run("r1", "web:t", dag_id="sync_web_t", params={"dry_run": False})
    store.record_run_items("r1", "web:t", [RunItem("a", "new", chunks_added=["c1"]), RunItem("b", "failed", error="x")])
    # a re-run of the commit task writes the same rows again
    store.record_run_items("r1", "web:t", [RunItem("a", "new", chunks_added=["c1"])])
    store.finish_run("r1", "success", {"new": 1, "failed": 1}, source="web:t")
    run = _run(store, "r1")
    assert run["status"] == "success" and run["counts"] == {"new": 1, "failed": 1}
    assert [i["item_key"] for i in store.run_items("r1")] == ["a", "b"]
    assert [i["item_key"] for i in store.run_items("r1", action="failed")] == ["b"]
    store.start_run("r2", "web:t")
    store.record_run_items("r2", "web:t", [RunItem("a", "changed")])
    assert [h["action"] for h in store.item_history("web:t", "a")] == ["new", "changed"]
    assert next(r["run_id"] for r in store.runs("web:t")) == "r2"


def test_same_run_id_in_two_sources_does_not_collide(store: StateStore) -> None:
    # two DAGs on one schedule both get "scheduled__<date>" from Airflow
    rid = "scheduled__2026-11-30T00:00:00+00:00"
    store.start_run(rid, "web:a")
    store.start_run(rid, "yuque:b")
    store.record_run_items(rid, "web:a", [RunItem("page", "new")])
    store.record_run_items(rid, "yuque:b", [RunItem("doc", "changed")])
    store.finish_run(rid, "success", {"new": 1}, source="web:a")
    store.finish_run(rid, "failed", {}, error="boom", source="yuque:b")
    assert _run(store, rid, "web:a")["status"] == "success"
    assert _run(store, rid, "yuque:b")["status"] == "failed"
    assert [i["item_key"] for i in store.run_items(rid, source="web:a")] == ["page"]
    assert [i["item_key"] for i in store.run_items(rid, source="yuque:b")] == ["doc"]


def test_tables_created_by_another_process_meanwhile_are_tolerated(tmp_path: Path) -> None:
    """Two first tasks on a fresh state DB: both see the tables missing, one creates them first.

    The other's CREATE TABLE then fails with "already exists"; opening the store must succeed.
    Reproduced deterministically: just before this store creates its first table, a second
    connection (another process, as far as SQLite is concerned) creates them all.
    """
    import sqlalchemy as sa

    from include.stores import state

    url = f"sqlite:///{tmp_path / 'state.db'}"
    other = sa.create_engine(url)
    raced: list[str] = []

    def other_process_wins(target: sa.Table, connection: sa.Connection, **_: object) -> None:
        if not raced:
            raced.append(target.name)
            state._meta.create_all(other)

    first = next(iter(state._meta.sorted_tables))
    sa.event.listen(first, "before_create", other_process_wins)
    try:
        store = StateStore(url)
    finally:
        sa.event.remove(first, "before_create", other_process_wins)
        other.dispose()
    assert raced == [first.name]  # the race really happened
    store.save_items([_item("a")])
    assert set(store.items("web:t")) == {"a"}
    store.close()
