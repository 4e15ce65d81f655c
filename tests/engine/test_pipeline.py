"""The engine end to end in-process (same stage functions the DAG runs), on a local folder.

The ``files`` connector keeps these tests free of HTTP; the Airflow + web versions of the same
scenarios are in test_e2e_airflow.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from include.config import SourceConfig
from include.index import open_index
from include.stores import open_state_store
from plugins.engine import MassDeleteError, run_pipeline

DOCS = {
    "a.md": "# Alpha\n\nThe alpha page talks about river deltas and sediment.\n",
    "b.md": "# Beta\n\nBeta explains how salmon find their way upstream.\n",
    "c.txt": "Gamma is a plain text note about estuaries and tides.\n",
    "d.html": "<html><body><main><h1>Delta</h1><p>Delta covers flood plains in spring.</p></main></body></html>",
    "e.md": "# Epsilon\n\nEpsilon lists the bridges over the river.\n",
    "f.md": "# Zeta\n\nZeta is about fishing licences.\n",
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def _source(root: Path, **kw) -> SourceConfig:
    return SourceConfig(kind="files", name="t", options={"root": str(root)}, batch_size=2, **kw)


def _counts(source: SourceConfig, status: str = "success", **params) -> dict:
    summary = run_pipeline(source, params)
    assert summary.status == status
    return summary.counts


def _touch(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    st = path.stat()
    os.utime(path, (st.st_atime, st.st_mtime + 10))  # make sure mtime moves even on coarse clocks


def test_first_sync_then_nothing_changed(tributary_home: Path, folder: Path) -> None:
    src = _source(folder)
    first = _counts(src)
    assert first["new"] == 6 and first["failed"] == 0 and first["chunks_written"] >= 6
    index = open_index(src.index)
    assert index.search("salmon upstream")[0].title
    assert index.count(source="files:t") == first["chunks_written"]
    second = _counts(src)
    assert (second["new"], second["changed"], second["unchanged"]) == (0, 0, 6)
    assert second["fetched"] == second["parsed"] == second["chunked"] == second["chunks_written"] == 0


def test_edit_reindexes_exactly_that_document(tributary_home: Path, folder: Path) -> None:
    src = _source(folder)
    _counts(src)
    index = open_index(src.index)
    _touch(folder / "b.md", "# Beta\n\nBeta now explains how eels cross the ocean.\n")
    counts = _counts(src)
    assert (counts["changed"], counts["new"], counts["unchanged"]) == (1, 0, 5)
    assert index.search("salmon") == []
    store = open_state_store()
    # the index holds exactly the chunks the state says b.md has now
    assert {h.chunk_id for h in index.search("eels ocean")} == set(store.get_item("files:t", "b.md").chunk_ids)
    run = store.runs("files:t", limit=1)[0]
    changed = store.run_items(run["run_id"], action="changed")
    assert [c["item_key"] for c in changed] == ["b.md"]
    assert changed[0]["version_before"]["content_hash"] != changed[0]["version_after"]["content_hash"]


def test_touched_but_same_content_is_unchanged_by_hash(tributary_home: Path, folder: Path) -> None:
    src = _source(folder)
    _counts(src)
    _touch(folder / "a.md", DOCS["a.md"] + "\n\n")  # bytes differ, extracted content does not
    counts = _counts(src)
    assert counts["changed"] == 0 and counts["unchanged"] == 6 and counts["chunks_written"] == 0
    assert counts["fetched"] == 1


def test_deleted_file_leaves_the_index(tributary_home: Path, folder: Path) -> None:
    src = _source(folder)
    _counts(src)
    index = open_index(src.index)
    assert index.search("fishing licences")
    (folder / "f.md").unlink()
    counts = _counts(src)
    assert counts["deleted"] == 1 and counts["chunks_deleted"] >= 1
    assert index.search("fishing licences") == []
    assert open_state_store().get_item("files:t", "f.md") is None


def test_mass_delete_guard(tributary_home: Path, folder: Path) -> None:
    src = _source(folder)
    _counts(src)
    for name in ("a.md", "b.md", "c.txt"):
        (folder / name).unlink()
    with pytest.raises(MassDeleteError, match="3 of 6"):
        run_pipeline(src)
    index = open_index(src.index)
    assert index.search("salmon")  # nothing was deleted
    assert open_state_store().runs("files:t", limit=1)[0]["status"] == "failed"
    counts = _counts(src, allow_mass_delete=True)
    assert counts["deleted"] == 3 and index.search("salmon") == []


def test_changed_chunker_options_reprocess_everything(tributary_home: Path, folder: Path) -> None:
    _counts(_source(folder))
    counts = _counts(_source(folder, chunker={"name": "token", "options": {"chunk_token_num": 64}}))
    # short notes come out as the same one chunk: re-processed by force, recorded unchanged (forced)
    assert counts["changed"] == 0 and counts["unchanged"] == counts["unchanged_forced"] == counts["chunked"] == 6


def test_bad_document_is_recorded_and_retried(tributary_home: Path, folder: Path) -> None:
    (folder / "bad.pdf").write_bytes(b"%PDF-1.7\n this is not really a pdf")
    src = _source(folder)
    counts = _counts(src, status="partial")
    assert counts["new"] == 6 and counts["failed"] == 1
    store = open_state_store()
    bad = store.get_item("files:t", "bad.pdf")
    assert bad.failure_count == 1 and bad.last_error_reason.startswith("parse:") and not bad.indexed
    again = _counts(src, status="partial")  # retried next run (and still failing: the streak grows)
    assert again["failed"] == 1 and store.get_item("files:t", "bad.pdf").failure_count == 2


def test_dry_run_writes_nothing(tributary_home: Path, folder: Path) -> None:
    src = _source(folder)
    counts = _counts(src, dry_run=True)
    assert counts["would_add"] == 6 and counts["chunks_written"] == 0
    assert open_index(src.index).count() == 0
    assert open_state_store().items("files:t") == {}


def test_full_resync_reprocesses_and_max_items_limits(tributary_home: Path, folder: Path) -> None:
    src = _source(folder)
    limited = _counts(src, max_items=2)
    assert limited["new"] == 2 and limited["deferred"] == 4  # the rest said, not only left out
    rest = _counts(src)
    assert rest["new"] == 4 and rest["deferred"] == 0
    counts = _counts(src, full_resync=True)
    assert counts["unchanged_forced"] == 6 and counts["chunks_written"] == 0  # same chunks: not rewritten


def test_state_on_postgres(tributary_home: Path, folder: Path, postgres_url: str, monkeypatch) -> None:
    monkeypatch.setenv("TRIBUTARY_STATE_URL", postgres_url)
    src = _source(folder)
    assert _counts(src)["new"] == 6
    assert _counts(src)["unchanged"] == 6
    assert len(open_state_store().items("files:t")) == 6


def test_retain_raw_keeps_staged_bytes_for_audit(tributary_home: Path, folder: Path) -> None:
    src = _source(folder, retain_raw=True)
    summary = run_pipeline(src)
    store = open_state_store()
    staged = [i["staged_path"] for i in store.run_items(summary.run_id) if i["action"] == "new"]
    assert len(staged) == 6 and all(Path(p).is_file() for p in staged)
    assert not list(Path(staged[0]).parent.parent.glob("*.json"))  # manifests are cleaned


def test_javascript_shell_page_is_skipped_with_its_reason(tributary_home: Path, folder: Path) -> None:
    shell = '<html><head><script src="/app.js"></script></head><body><div id="root"></div></body></html>'
    (folder / "app.html").write_text(shell, encoding="utf-8")
    summary = run_pipeline(_source(folder))
    assert summary.counts["skipped"] == 1 and summary.counts["failed"] == 0
    item = next(i for i in open_state_store().run_items(summary.run_id) if i["item_key"] == "app.html")
    assert item["action"] == "skipped" and "javascript" in item["error"].lower()
