"""Lineage on the web connector (the demo site served on 127.0.0.1): the versions recorded are
the HTTP validators, and an edit + a deletion show up as exactly those two items."""

from __future__ import annotations

import os
from pathlib import Path

from include.config import SourceConfig
from include.index import open_index
from include.stores import open_state_store
from plugins.engine import run_pipeline
from plugins.engine.lineage import chunk_lineage, diff_runs, run_report
from tests.support.airflow import write_sources


def test_web_edit_and_delete_lineage(tributary_home: Path, tmp_path: Path, demo_site, monkeypatch) -> None:
    root, url = demo_site
    entry = {
        "kind": "web",
        "name": "lin",
        "schedule": None,
        "options": {"seeds": [url], "delay_seconds": 0, "allowlist": ["127.0.0.1"], "use_sitemaps": False},
        "batch_size": 3,
    }
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "sources.yaml", [entry])))
    src = SourceConfig.model_validate(entry)
    first = run_pipeline(src)
    assert first.counts["new"] >= 5 and first.counts["failed"] == 0

    storage = root / "guide" / "storage.html"
    storage.write_text(storage.read_text().replace("never backed up", "replicated to a warm standby"))
    st = storage.stat()
    os.utime(storage, (st.st_atime, st.st_mtime + 30))
    (root / "guide" / "oncall.html").unlink()
    second = run_pipeline(src)

    store = open_state_store()
    try:
        report = run_report(store, second.run_id)
        touched = {i["item_key"]: i for i in report["items"] if i["action"] != "unchanged"}
        assert {k: i["action"] for k, i in touched.items()} == {
            url + "guide/storage.html": "changed",
            url + "guide/oncall.html": "deleted",
        }
        edit = touched[url + "guide/storage.html"]
        before, after = edit["version_before"], edit["version_after"]
        # HTTP validators are the version evidence: Last-Modified moved, the content hash too
        assert before["last_modified"] and after["last_modified"] and before["last_modified"] != after["last_modified"]
        assert before["content_hash"] != after["content_hash"] == edit["content_hash"]
        assert touched[url + "guide/oncall.html"]["chunks_removed"]
        assert report["actions"]["unchanged"] == first.counts["new"] - 2

        diff = diff_runs(store, first.run_id, second.run_id)
        assert {c["item_key"] for c in diff["changed"] if "content_hash" in c["differs"]} == set(touched)

        index = open_index(src.index)
        hit = index.search("warm standby")[0]
        index.close()
        traced = chunk_lineage(store, hit.chunk_id)
        assert traced["item_key"] == url + "guide/storage.html"
        assert traced["run"]["run_id"] == second.run_id and traced["source_version"] == after
    finally:
        store.close()
