"""Permissions through a content sync and the light permission sync (files source, SQLite index).

A files source's ``acl`` block declares who may read its items; a content sync writes each
document's entries to the index with its chunks and stores them, and a permission sync after an
edit of the block updates only the entries: nothing parsed, chunked or embedded, no chunk row
rewritten.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from include.acl import PUBLIC, user_entry
from include.config import AclConfig, AclRule, SourceConfig
from include.index import open_index
from include.stores import StateStore, open_state_store
from include.stores.access import AccessStore
from plugins.connectors.files.connector import FilesConnector
from plugins.engine import run_pipeline
from plugins.engine.permissions import sync_groups, sync_permissions

ALICE = user_entry("email", "alice@example.com")
BOB = user_entry("email", "bob@example.com")
ENG = "group:static:engineering"
SID = "files:acl"


def _source(root: Path, acl: AclConfig | None) -> SourceConfig:
    return SourceConfig(kind="files", name="acl", options={"root": str(root)}, batch_size=2, acl=acl)


def _acl(*users: str) -> AclConfig:
    """Private to ``users`` and the engineering group; ``pub/`` is public."""
    return AclConfig(users=list(users), groups=["engineering"], rules=[AclRule(match="pub/*", public=True)])


@pytest.fixture
def synced(tributary_home: Path, tmp_path: Path) -> Iterator[dict[str, Any]]:
    root = tmp_path / "docs"
    (root / "pub").mkdir(parents=True)
    (root / "plan.md").write_text("# Plan\n\nThe reservoir plan covers sluice gates.\n", encoding="utf-8")
    (root / "notes.md").write_text("# Notes\n\nNotes about the weir and fish ladders.\n", encoding="utf-8")
    (root / "pub" / "faq.md").write_text("# FAQ\n\nPublic answers about the towpath.\n", encoding="utf-8")
    source = _source(root, _acl("alice@example.com"))
    summary = run_pipeline(source)
    store = open_state_store()
    yield {"root": root, "source": source, "summary": summary, "store": store}
    store.close()


def _docs(store: StateStore) -> dict[str, str]:
    return {k: st.doc_id for k, st in store.items(SID).items()}


def test_content_sync_stores_declared_entries_in_index_and_store(synced: dict[str, Any]) -> None:
    summary, store = synced["summary"], synced["store"]
    assert summary.status == "success" and summary.counts["new"] == 3
    assert summary.counts["acl_unknown"] == 0 and summary.counts["acl_changed"] == 3
    docs = _docs(store)
    index = open_index(synced["source"].index)
    try:
        entries = index.access_of(SID, docs.values())
        assert entries[docs["plan.md"]] == (ENG, ALICE)
        assert entries[docs["pub/faq.md"]] == (PUBLIC,)
        # enforced: bob sees the public FAQ only, alice the plan too
        assert {h.doc_id for h in index.search("towpath reservoir weir", access={PUBLIC, BOB})} == {docs["pub/faq.md"]}
        assert docs["plan.md"] in {h.doc_id for h in index.search("reservoir sluice", access={PUBLIC, ALICE})}
    finally:
        index.close()
    access = AccessStore(store)
    rows = access.get(SID)
    assert rows["plan.md"].access.users == {ALICE} and rows["plan.md"].run_id == summary.run_id
    assert access.visibility_counts(SID) == {"public": 1, "tenant": 0, "restricted": 2, "unknown": 0}
    lineage = {r["item_key"]: r for r in store.run_items(summary.run_id, source=SID)}
    assert lineage["plan.md"]["access"]["added"] == [ENG, ALICE]
    assert lineage["plan.md"]["access"]["digest_before"] is None
    assert lineage["pub/faq.md"]["access"]["public_after"] is True


def _chunk_rows(source: SourceConfig, store: StateStore) -> dict[str, dict[str, Any]]:
    index = open_index(source.index)
    try:
        rows = {}
        for st in store.items(SID).values():
            for chunk_id in st.chunk_ids:
                row = index.get_chunk(chunk_id)
                assert row is not None
                row.pop("access")
                rows[chunk_id] = row
        return rows
    finally:
        index.close()


def test_permission_only_change_updates_entries_without_reprocessing(
    synced: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, root = synced["store"], synced["root"]
    before = _chunk_rows(synced["source"], store)
    docs = _docs(store)

    def no_parsing(*args: object, **kwargs: object) -> None:
        raise AssertionError("a permission sync parsed a document")

    monkeypatch.setattr("plugins.engine.process.parse_document", no_parsing)
    monkeypatch.setattr("plugins.engine.process.chunk_for_source", no_parsing)
    edited = _source(root, _acl("bob@example.com"))  # alice out, bob in
    access = AccessStore(store)
    index = open_index(edited.index)
    try:
        result = sync_permissions(edited, store=access, index=index, connector=FilesConnector(edited))
        entries = index.access_of(SID, docs.values())
        hits = index.search("reservoir sluice", access={PUBLIC, ALICE})
    finally:
        index.close()
    assert (result.checked, result.changed, result.unchanged, result.unknown) == (3, 2, 1, 0)
    assert result.requests == 1 and result.outcome == "success" and result.errors == {}
    assert entries[docs["plan.md"]] == (ENG, BOB) and entries[docs["pub/faq.md"]] == (PUBLIC,)
    assert docs["plan.md"] not in {h.doc_id for h in hits}  # revoked: alice no longer finds it
    assert _chunk_rows(edited, store) == before  # no chunk row rewritten (text, hashes, run id)
    run = store.get_run(result.run_id, SID)
    assert run is not None and run["params"] == {"kind": "permissions"} and run["status"] == "success"
    assert run["counts"]["changed"] == 2 and run["counts"]["chunks_embedded"] == 0
    rows = {r["item_key"]: r for r in store.run_items(result.run_id, source=SID)}
    assert set(rows) == {"plan.md", "notes.md"} and rows["plan.md"]["action"] == "changed"
    assert rows["plan.md"]["access"]["added"] == [BOB] and rows["plan.md"]["access"]["removed"] == [ALICE]
    assert result.to_dict()["changes_total"] == 2
    assert access.get(SID)["plan.md"].access.users == {BOB}
    # nothing changed since: a second sync writes nothing
    index = open_index(edited.index)
    try:
        again = sync_permissions(edited, store=access, index=index, connector=FilesConnector(edited))
    finally:
        index.close()
    assert (again.changed, again.unchanged) == (0, 3) and store.run_items(again.run_id, source=SID) == []


def test_refetched_unchanged_item_gets_new_permissions_in_a_content_sync(synced: dict[str, Any]) -> None:
    """A file touched with the same text is fetched and parsed to "unchanged": its permissions
    were read all the same, so an edited acl block reaches the index without re-chunking it."""
    store, root = synced["store"], synced["root"]
    plan = root / "plan.md"
    st = plan.stat()
    os.utime(plan, (st.st_atime, st.st_mtime + 10))
    edited = _source(root, AclConfig(public=True))
    summary = run_pipeline(edited)
    assert summary.status == "success" and summary.counts["chunks_written"] == 0
    assert summary.counts["acl_changed"] == 1
    docs = _docs(store)
    index = open_index(edited.index)
    try:
        assert index.access_of(SID, [docs["plan.md"]])[docs["plan.md"]] == (PUBLIC,)
        assert index.access_of(SID, [docs["notes.md"]])[docs["notes.md"]] == (ENG, ALICE)  # not read: kept
    finally:
        index.close()
    row = {r["item_key"]: r for r in store.run_items(summary.run_id, source=SID)}["plan.md"]
    assert row["action"] == "unchanged" and row["access"]["public_after"] is True
    assert row["access"]["removed"] == sorted([ALICE, ENG])


def test_deleted_item_loses_its_access_row(synced: dict[str, Any]) -> None:
    store, root = synced["store"], synced["root"]
    (root / "notes.md").unlink()
    summary = run_pipeline(synced["source"], {"allow_mass_delete": True})  # 1 of 3 is over the guard
    assert summary.counts["deleted"] == 1
    assert set(AccessStore(store).get(SID)) == {"plan.md", "pub/faq.md"}


def test_group_sync_of_a_source_without_groups_stores_nothing(synced: dict[str, Any]) -> None:
    source = synced["source"]
    access = AccessStore(synced["store"])
    result = sync_groups(source, store=access, connector=FilesConnector(source))
    assert result.synced is False and result.to_dict()["groups"] == 0
    assert access.group_sync_status(SID) is None
