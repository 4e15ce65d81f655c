"""Fail-closed permissions: what cannot be read is private, counted ``acl_unknown``, alerted.

A connector whose ``read_access`` raises (a 403 / 99991672 "no permission to read permissions",
a missing scope, a timeout) or leaves items out of its answer makes those documents private:
no entries in the index, so only an unrestricted search sees them; the run is ``partial``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from include.acl import ACL_UNKNOWN, PUBLIC, AccessControl
from include.config import SourceConfig
from include.index import IndexBackend, open_index
from include.stores import open_state_store
from include.stores.access import AccessStore
from plugins.connectors.base import AccessRequest
from plugins.connectors.files.connector import FilesConnector
from plugins.engine import run_pipeline
from plugins.engine.alerts import acl_unknown_breach
from plugins.engine.permissions import sync_permissions

SID = "files:locked"
DOCS = {
    "a.md": "# A\n\nAlder trees by the canal.\n",
    "b.md": "# B\n\nBirch trees by the lock.\n",
    "c.md": "# C\n\nCedar.\n",
}


def _refuse(self: FilesConnector, items: Sequence[AccessRequest]) -> dict[str, AccessControl]:
    raise PermissionError("code 99991672: no permission to read the members of this document")


@pytest.fixture
def source(tributary_home: Path, tmp_path: Path) -> SourceConfig:
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    return SourceConfig(kind="files", name="locked", options={"root": str(root)}, batch_size=2)


@pytest.fixture
def alerts(monkeypatch: pytest.MonkeyPatch) -> list[Mapping[str, Any]]:
    posted: list[Mapping[str, Any]] = []

    def post(summary: Mapping[str, Any], conn_id: str | None = None) -> bool:
        posted.append(summary)
        return True

    monkeypatch.setattr("plugins.engine.alerts.post_failure_summary", post)
    monkeypatch.setattr("plugins.engine.permissions.post_failure_summary", post)
    return posted


def _doc_ids() -> dict[str, str]:
    store = open_state_store()
    try:
        return {k: st.doc_id for k, st in store.items(SID).items()}
    finally:
        store.close()


def test_unreadable_permissions_make_documents_private_and_the_run_partial(
    source: SourceConfig, monkeypatch: pytest.MonkeyPatch, alerts: list[Mapping[str, Any]]
) -> None:
    monkeypatch.setattr(FilesConnector, "read_access", _refuse)
    summary = run_pipeline(source)
    counts = summary.counts
    assert summary.status == "partial" and counts["new"] == 3
    assert counts["acl_unknown"] == 3 and counts["reasons"] == {ACL_UNKNOWN: 3}
    assert "private" in counts["outcome_note"]
    docs = _doc_ids()
    index = open_index(source.index)
    try:
        assert set(index.access_of(SID, docs.values()).values()) == {()}  # never public
        assert index.search("alder birch trees", access={PUBLIC}) == []
        assert index.search("alder birch trees")  # an unrestricted (admin) search still sees them
    finally:
        index.close()
    store = open_state_store()
    try:
        access = AccessStore(store)
        assert access.visibility_counts(SID)["unknown"] == 3
        row = {r["item_key"]: r for r in store.run_items(summary.run_id, source=SID)}["a.md"]
        assert row["access"]["unknown_reason"] == ACL_UNKNOWN and "99991672" in row["access"]["warning"]
        assert (store.get_run(summary.run_id, SID) or {})["status"] == "partial"
    finally:
        store.close()
    assert len(alerts) == 1 and "acl_unknown" in alerts[0]["outcome"]
    assert alerts[0]["reasons"] == {ACL_UNKNOWN: 3}


def test_an_item_left_out_of_the_answer_is_unknown(
    source: SourceConfig, monkeypatch: pytest.MonkeyPatch, alerts: list[Mapping[str, Any]]
) -> None:
    def only_a(self: FilesConnector, items: Sequence[AccessRequest]) -> dict[str, AccessControl]:
        return {i.item_key: AccessControl.everyone() for i in items if i.item_key == "a.md"}

    monkeypatch.setattr(FilesConnector, "read_access", only_a)
    summary = run_pipeline(source)
    assert summary.status == "partial" and summary.counts["acl_unknown"] == 2
    docs = _doc_ids()
    index = open_index(source.index)
    try:
        got = index.access_of(SID, docs.values())
    finally:
        index.close()
    assert got[docs["a.md"]] == (PUBLIC,) and got[docs["b.md"]] == got[docs["c.md"]] == ()


def test_permission_sync_that_cannot_read_makes_public_documents_private(
    source: SourceConfig, monkeypatch: pytest.MonkeyPatch, alerts: list[Mapping[str, Any]]
) -> None:
    assert run_pipeline(source).status == "success"  # no acl block: public
    monkeypatch.setattr(FilesConnector, "read_access", _refuse)
    store = open_state_store()
    index = open_index(source.index)
    try:
        access = AccessStore(store)
        result = sync_permissions(source, store=access, index=index, connector=FilesConnector(source), batch_size=2)
        assert (result.checked, result.changed, result.unknown, result.requests) == (3, 3, 3, 2)
        assert result.errors == {"PermissionError": 2} and result.outcome == "partial"
        assert index.search("alder birch trees", access={PUBLIC}) == []
        run = store.get_run(result.run_id, SID)
        assert run is not None and run["status"] == "partial" and run["counts"]["reasons"] == {ACL_UNKNOWN: 3}
        assert access.visibility_counts(SID)["unknown"] == 3
        rows = store.run_items(result.run_id, source=SID)
        assert {r["access"]["removed"][0] for r in rows} == {PUBLIC} and all(r["access"]["public_before"] for r in rows)
    finally:
        index.close()
        store.close()
    assert len(alerts) == 1 and alerts[0]["reasons"] == {ACL_UNKNOWN: 3}


def test_failed_index_write_leaves_stored_access_behind_the_index(
    source: SourceConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows are written after the index: an index that refuses leaves them as they were, the
    run is closed as failed, and the next sync finds the digests still differing."""
    assert run_pipeline(source).status == "success"
    monkeypatch.setattr(FilesConnector, "read_access", _refuse)

    def broken(self: IndexBackend, source: str, access: Mapping[str, Sequence[str]]) -> int:
        raise OSError("index unreachable")

    store = open_state_store()
    index = open_index(source.index)
    monkeypatch.setattr(type(index), "set_access", broken)
    try:
        access = AccessStore(store)
        before = {k: r.digest for k, r in access.get(SID).items()}
        with pytest.raises(OSError, match="unreachable"):
            sync_permissions(source, store=access, index=index, connector=FilesConnector(source))
        assert {k: r.digest for k, r in access.get(SID).items()} == before
        run = store.runs(SID, limit=1)[0]
        assert run["status"] == "failed" and run["params"] == {"kind": "permissions"}
    finally:
        index.close()
        store.close()


def test_acl_unknown_alert_threshold() -> None:
    assert acl_unknown_breach({"acl_unknown": 0}, {}) == []
    assert acl_unknown_breach({"acl_unknown": 2}, {})[0].startswith("2 documents private")
    assert acl_unknown_breach({"acl_unknown": 2}, {"alert_acl_unknown": 5}) == []
    assert acl_unknown_breach({"acl_unknown": 9}, {"alert_acl_unknown": None}) == []
    assert acl_unknown_breach({"acl_unknown": 9, "dry_run": True}, {}) == []
