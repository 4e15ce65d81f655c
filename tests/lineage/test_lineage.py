"""Item-level lineage end to end (in-process engine on a folder): sync, edit + delete, then ask.

The second run's lineage must list exactly the edited and deleted items with the right actions
and versions; a chunk found by search must resolve to the run that wrote it and the source
version it came from; the CLI answers the same questions as JSON.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import pytest

from include.config import SourceConfig
from include.index import open_index
from include.stores import open_state_store
from plugins.engine import run_pipeline
from plugins.engine.cli import main as cli
from plugins.engine.lineage import chunk_lineage, diff_runs, item_history, list_runs, run_report
from tests.support.airflow import write_sources

DOCS = {
    "rivers.md": "# Rivers\n\nRivers carry sediment to the delta every spring.\n",
    "salmon.md": "# Salmon\n\nSalmon find their way upstream by smell.\n",
    "tides.txt": "Tides rise twice a day in the estuary.\n",
    "bridges.md": "# Bridges\n\nThe old stone bridge has seven arches.\n",
    "ferries.md": "# Ferries\n\nThe ferry crosses at dawn and dusk.\n",
}


@pytest.fixture
def source(tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[SourceConfig, Path]:
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    entry = {"kind": "files", "name": "lin", "schedule": None, "options": {"root": str(root)}, "batch_size": 2}
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "sources.yaml", [entry])))
    return SourceConfig.model_validate(entry), root


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    capsys.readouterr()
    assert cli([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_second_run_lineage_lists_exactly_the_edit_and_the_delete(source, capsys) -> None:
    src, root = source
    first = run_pipeline(src)
    assert first.counts["new"] == 5

    salmon = root / "salmon.md"
    salmon.write_text("# Salmon\n\nSalmon smell their home river from the sea.\n", encoding="utf-8")
    st = salmon.stat()
    os.utime(salmon, (st.st_atime, st.st_mtime + 30))
    (root / "ferries.md").unlink()
    second = run_pipeline(src)

    store = open_state_store()
    try:
        report = run_report(store, second.run_id)
        assert report is not None
        assert report["index"] == {"backend": "sqlite", "name": "tributary"}
        assert report["actions"] == {"new": 0, "changed": 1, "unchanged": 3, "deleted": 1, "failed": 0, "skipped": 0}
        touched = {i["item_key"]: i for i in report["items"] if i["action"] != "unchanged"}
        assert set(touched) == {"salmon.md", "ferries.md"}

        edit, gone = touched["salmon.md"], touched["ferries.md"]
        first_items = {i["item_key"]: i for i in run_report(store, first.run_id)["items"]}
        # versions: before = what the first run indexed, after = the file now
        assert edit["action"] == "changed"
        assert edit["version_before"] == first_items["salmon.md"]["version_after"]
        assert edit["version_after"]["revision"] == f"size:{salmon.stat().st_size}"
        assert edit["version_after"]["content_hash"] == edit["content_hash"] != first_items["salmon.md"]["content_hash"]
        assert edit["parser"] and edit["parser_version"] and edit["chunker"] == "token"
        assert edit["blocks"] >= 1 and edit["chars"] > 0 and edit["byte_size"] == salmon.stat().st_size
        assert edit["chunker_options_hash"] and set(edit["stage_ms"]) >= {"parse", "chunk"}
        assert edit["chunks_added"] or edit["chunks_kept"]
        assert gone["action"] == "deleted"
        assert gone["version_before"] == first_items["ferries.md"]["version_after"]
        assert gone["chunks_removed"] == first_items["ferries.md"]["chunks_added"]
        assert gone["version_after"] is None

        # filtering by action
        assert [i["item_key"] for i in run_report(store, second.run_id, "deleted")["items"]] == ["ferries.md"]

        # history across runs
        history = item_history(store, "files:lin", "salmon.md")
        assert [h["action"] for h in history["history"]] == ["new", "changed"]
        assert [h["run_id"] for h in history["history"]] == [first.run_id, second.run_id]
        assert history["state"]["content_hash"] == edit["content_hash"]
        assert item_history(store, "files:lin", "ferries.md")["state"] is None

        # diff of the two runs: exactly the edit and the delete differ
        diff = diff_runs(store, first.run_id, second.run_id)
        assert {c["item_key"]: c["b"]["action"] for c in diff["changed"]} == {
            "salmon.md": "changed",
            "ferries.md": "deleted",
            # the three untouched items went from new to unchanged
            "rivers.md": "unchanged",
            "tides.txt": "unchanged",
            "bridges.md": "unchanged",
        }
        assert {c["item_key"] for c in diff["changed"] if "content_hash" in c["differs"]} == {
            "salmon.md",
            "ferries.md",
        }
        assert diff["counts_delta"]["new"] == -5 and diff["counts_delta"]["changed"] == 1
        assert diff["only_in_a"] == diff["only_in_b"] == []
        assert [r["run_id"] for r in list_runs(store, "files:lin")] == [second.run_id, first.run_id]

        # a search hit traces back to the run and the source version it came from
        index = open_index(src.index)
        hit = index.search("smell home river sea")[0]
        index.close()
        traced = chunk_lineage(store, hit.chunk_id)
        assert traced["run"]["run_id"] == second.run_id and traced["run"]["status"] == "success"
        assert traced["item_key"] == "salmon.md" and traced["current"] is True
        assert traced["source_version"] == edit["version_after"]
        assert traced["doc_content_hash"] == edit["content_hash"]
        assert traced["stages"]["parser"] == edit["parser"] and traced["stages"]["chunker"] == "token"
        assert hit.chunk_id in edit["chunks_added"] + edit["chunks_kept"]
        # an unchanged item's chunk still names the first run, which wrote it
        old = open_index(src.index)
        tide = old.search("tides twice estuary")[0]
        old.close()
        assert chunk_lineage(store, tide.chunk_id)["run"]["run_id"] == first.run_id
        assert chunk_lineage(store, "no-such-chunk") is None
    finally:
        store.close()

    # the CLI gives the same answers as JSON
    run_json = _cli_json(capsys, "run", second.run_id, "--action", "changed")
    assert [i["item_key"] for i in run_json["items"]] == ["salmon.md"]
    assert _cli_json(capsys, "chunk", hit.chunk_id)["run"]["run_id"] == second.run_id
    item_json = _cli_json(capsys, "item", "files:lin", "salmon.md")
    assert [h["action"] for h in item_json["history"]] == ["new", "changed"]
    diff_json = _cli_json(capsys, "diff", first.run_id, second.run_id)
    assert diff_json == json.loads(json.dumps(diff))
    runs_json = _cli_json(capsys, "runs", "--source", "files:lin")
    assert [r["run_id"] for r in runs_json] == [second.run_id, first.run_id]
    # and readable text without --json
    capsys.readouterr()
    assert cli(["diff", first.run_id, second.run_id]) == 0
    out = capsys.readouterr().out
    assert "~ ferries.md: new -> deleted" in out and "~ salmon.md: new -> changed" in out
    assert cli(["run", "no-such-run"]) == 1


def test_failed_item_lineage_keeps_error_and_previous_version(source) -> None:
    src, root = source
    run_pipeline(src)
    bridges = root / "bridges.md"
    bridges.write_bytes(b"# Bridges\n\n" + b"x" * 4096)
    st = bridges.stat()
    os.utime(bridges, (st.st_atime, st.st_mtime + 30))
    limited = src.model_copy(update={"options": {**src.options, "max_file_bytes": 1024}})
    second = run_pipeline(limited)
    store = open_state_store()
    try:
        [failed] = run_report(store, second.run_id, "failed")["items"]
        assert failed["item_key"] == "bridges.md"
        assert "too_large" in failed["reason"] and "limit 1024" in failed["error"]
        assert failed["version_before"]["revision"].startswith("size:")
        history = item_history(store, "files:lin", "bridges.md")
        assert [h["action"] for h in history["history"]] == ["new", "failed"]
        assert history["state"]["failure_count"] == 1 and history["state"]["version"] is not None
    finally:
        store.close()


def test_cli_sync_dry_run_window_and_only_key(source, capsys) -> None:
    src, root = source
    run_pipeline(src)
    old = dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC).timestamp()
    (root / "rivers.md").write_text("# Rivers\n\nRivers also carry driftwood.\n", encoding="utf-8")
    os.utime(root / "rivers.md", (old, old))
    _touch_now(root / "tides.txt", "Tides now rise three times a day.\n")
    index = open_index(src.index)
    before = {cid: index.get_chunk(cid)["text_hash"] for cid in index.chunk_ids()}

    dry = _cli_json(capsys, "sync", "files:lin", "--dry-run")
    assert dry["counts"]["dry_run"] is True and dry["counts"]["would_update"] == 2
    assert {cid: index.get_chunk(cid)["text_hash"] for cid in index.chunk_ids()} == before

    # a window around March re-syncs only what was modified in it
    windowed = _cli_json(
        capsys, "sync", "files:lin", "--window-start", "2026-03-01T00:00:00Z", "--window-end", "2026-03-02T00:00:00Z"
    )
    store = open_state_store()
    try:
        changed = [i["item_key"] for i in run_report(store, windowed["run_id"], "changed")["items"]]
        assert changed == ["rivers.md"]
        only = _cli_json(capsys, "sync", "files:lin", "--only-key", "tides.txt")
        assert [i["item_key"] for i in run_report(store, only["run_id"], "changed")["items"]] == ["tides.txt"]
        assert store.get_run(only["run_id"])["params"]["only_keys"] == ["tides.txt"]
    finally:
        store.close()
        index.close()


def _touch_now(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    later = time.time() + 30
    os.utime(path, (later, later))
