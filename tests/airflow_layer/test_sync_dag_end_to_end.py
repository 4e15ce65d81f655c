"""End to end in real Airflow 3 (dag.test()): the demo site served on 127.0.0.1 into SQLite.

Proves the spine's promises from the run summary, never from timing: a no-change resync
parses, chunks and writes nothing; an edited page is re-indexed alone and its old chunks are
gone; a deleted page leaves the index.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from include.index import open_index
from include.stores import open_state_store
from tests.support.airflow import run_dag, write_sources

pytestmark = pytest.mark.airflow


@pytest.fixture
def demo_source(tributary_home: Path, tmp_path: Path, demo_site, monkeypatch) -> tuple[Path, str]:
    root, url = demo_site
    sources = write_sources(
        tmp_path / "sources.yaml",
        [
            {
                "kind": "web",
                "name": "demo",
                "schedule": None,
                "options": {"seeds": [url], "delay_seconds": 0, "allowlist": ["127.0.0.1"], "use_sitemaps": False},
                "chunker": {"name": "token", "options": {"chunk_token_num": 128}},
                "batch_size": 3,
            }
        ],
    )
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(sources))
    monkeypatch.setenv("TRIBUTARY_TASK_RETRIES", "0")
    return root, url


def _last_run() -> tuple[dict, list[dict]]:
    store = open_state_store()
    try:
        run = store.runs("web:demo", limit=1)[0]
        return run, store.run_items(run["run_id"])
    finally:
        store.close()


def test_demo_site_sync_resync_edit_delete(demo_source) -> None:
    root, url = demo_source
    index = open_index()

    # 1. first sync: every page in, searchable
    dr = run_dag("sync_web_demo")
    assert str(dr.state).endswith("success")
    run, items = _last_run()
    counts = run["counts"]
    assert run["status"] == "success"
    assert counts["new"] == 7 and counts["failed"] == 0, [
        (i["item_key"], i["error"]) for i in items
    ]  # robots keeps /private/ out
    hit = index.search("who approves production access")[0]
    assert hit.url == url + "faq.html" and "team lead" in hit.text
    assert index.search("知识库")[0].url == url + "guide/zh-kb.html"
    assert all("/private/" not in (h.url or "") for h in index.search("salary bands confidential", k=50))
    total = index.count(source="web:demo")

    # 2. nothing changed: validators answer 304, nothing downstream runs
    run_dag("sync_web_demo")
    run, _ = _last_run()
    c = run["counts"]
    assert (c["unchanged"], c["new"], c["changed"], c["deleted"]) == (7, 0, 0, 0)
    assert c["fetched"] == c["parsed"] == c["chunked"] == c["chunks_written"] == 0
    assert index.count(source="web:demo") == total

    # 3. one page edited: exactly that document re-indexed, its old chunks gone
    storage = root / "guide" / "storage.html"
    storage.write_text(storage.read_text().replace("never backed up", "replicated to a warm standby"))
    os.utime(storage, (storage.stat().st_atime, storage.stat().st_mtime + 5))
    run_dag("sync_web_demo")
    run, items = _last_run()
    changed = [i["item_key"] for i in items if i["action"] == "changed"]
    assert changed == [url + "guide/storage.html"]
    assert run["counts"]["unchanged"] == 6
    assert not any("never backed up" in h.text for h in index.search("never backed up", k=50))
    assert index.search("warm standby")[0].url == url + "guide/storage.html"

    # 4. one page deleted: its chunks leave the index
    (root / "guide" / "oncall.html").unlink()
    run_dag("sync_web_demo")
    run, items = _last_run()
    assert [i["item_key"] for i in items if i["action"] == "deleted"] == [url + "guide/oncall.html"]
    assert not any("never debugs" in h.text for h in index.search("incident commander never debugs", k=50))
    assert open_state_store().get_item("web:demo", url + "guide/oncall.html") is None
