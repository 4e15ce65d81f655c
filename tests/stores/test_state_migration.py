"""A state DB created by an older version gets the columns a newer one added (SQLite, PostgreSQL).

``create_all`` creates missing tables only: without ``_add_missing_columns`` a database from
before the reaper (``owner``, ``heartbeat_at``), lineage warnings (``warnings``) or the record of
what processed an item (``processed_with``, issue 36) fails the first insert that names them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from include.contract import VersionEvidence
from include.stores import ItemState, RunItem, StateStore

_ADDED = {
    "tributary_runs": ("owner", "heartbeat_at"),
    "tributary_run_items": ("warnings",),
    "tributary_items": ("processed_with",),
}


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return (
        f"sqlite:///{tmp_path / 'state.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    )


def test_columns_missing_from_an_older_database_are_added(url: str) -> None:
    old = StateStore(url)
    old.start_run("before", "files:m", run_type="inline")
    old.save_items([_item("old.md")])
    with old.engine.begin() as conn:  # what an older version's tables looked like
        for table, columns in _ADDED.items():
            for column in columns:
                conn.execute(sa.text(f'ALTER TABLE {table} DROP COLUMN "{column}"'))
    old.close()

    store = StateStore(url)
    try:
        inspector = sa.inspect(store.engine)
        for table, columns in _ADDED.items():
            assert set(columns) <= {c["name"] for c in inspector.get_columns(table)}
        store.start_run("after", "files:m", run_type="inline", owner={"host": "h", "pid": 1})
        store.record_run_items("after", "files:m", [RunItem(item_key="a.md", action="new")])
        after, before = store.get_run("after", "files:m"), store.get_run("before", "files:m")
        assert after is not None and after["owner"] == {"host": "h", "pid": 1}
        assert before is not None and before["owner"] is None  # old rows stay valid
        assert [r["run_id"] for r in store.running_runs("files:m")] == ["before", "after"]
        record = {"parser": {"name": "pdf", "version": "2.0", "engine": "auto"}}
        store.save_items([_item("new.md", processed_with=record)])
        items = store.items("files:m")
        assert items["old.md"].processed_with is None  # stored before records: planning treats it as current
        assert items["old.md"].content_hash == "h" and items["new.md"].processed_with == record
    finally:
        store.close()


def _item(key: str, **kw: object) -> ItemState:
    return ItemState("files:m", key, f"doc-{key}", VersionEvidence(etag="e"), "h", "proc", [f"doc-{key}-0"], **kw)  # type: ignore[arg-type]
