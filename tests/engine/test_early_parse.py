"""Pages parsed while the crawl still fetches (plugins/engine/early.py) change nothing a run keeps.

The in-process runner hands every page the web crawl stages to forked workers that parse and
chunk it at once; the plan, batches, index writes and state commits stay those of a serial run.
Checked here: the same chunks, state and lineage as a serial run; a run killed mid-crawl commits
nothing, and the next run indexes every page once; deletions still come only from a complete
listing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from include.config import SourceConfig
from include.index import open_index
from include.stores import open_state_store
from plugins.engine import early, run_pipeline
from plugins.engine.early import early_workers
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(early_workers() == 0, reason="needs two cores and fork")


def _source(url: str, name: str = "early") -> SourceConfig:
    options = {"seeds": [url], "delay_seconds": 0, "allowlist": ["127.0.0.1"], "use_sitemaps": False}
    return SourceConfig.model_validate({"kind": "web", "name": name, "options": options, "batch_size": 2})


def _kept(src: SourceConfig, run_id: str) -> dict[str, Any]:
    """What a run leaves: the index's chunks, the item state, the run's lineage (no times)."""
    index = open_index(src.index)
    chunks = sorted((c, (index.get_chunk(c) or {}).get("text")) for c in index.chunk_ids(source=src.source_id))
    index.close()
    store = open_state_store()
    items = {
        k: (s.doc_id, s.content_hash, s.processing_hash, s.chunk_ids, s.title, s.processed_with)
        for k, s in store.items(src.source_id).items()
    }
    fields = ("item_key", "action", "content_hash", "chunk_ids", "parser", "parser_version", "chunker")
    lineage = sorted(tuple(str(row.get(f)) for f in fields) for row in store.run_items(run_id, source=src.source_id))
    store.close()
    return {"chunks": chunks, "items": items, "lineage": lineage}


def test_pages_parsed_during_the_crawl_index_what_a_serial_run_indexes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_site: tuple[Path, str]
) -> None:
    _, url = demo_site
    kept = {}
    for workers in ("0", "2"):
        monkeypatch.setenv("TRIBUTARY_HOME", str(tmp_path / f"home-{workers}"))  # same source, same doc ids
        monkeypatch.setenv("TRIBUTARY_PARSE_WORKERS", workers)
        src = _source(url)
        summary = run_pipeline(src)
        assert summary.status == "success" and summary.counts["failed"] == 0, summary.counts
        if workers == "2":  # every page was parsed by a worker while the crawl went on
            assert summary.parsed_during_crawl == summary.counts["new"] >= 5
        else:
            assert summary.parsed_during_crawl is None
        kept[workers] = _kept(src, summary.run_id)
    assert kept["0"] == kept["2"]
    assert len(kept["2"]["chunks"]) >= 5 and len({c for c, _ in kept["2"]["chunks"]}) == len(kept["2"]["chunks"])


def _killed_mid_crawl(home: Path, sources: Path, at: str) -> None:
    code = "from plugins.engine import get_source, run_pipeline\nrun_pipeline(get_source('web:early'))\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIBUTARY_")}
    env.update(TRIBUTARY_HOME=str(home), TRIBUTARY_SOURCES=str(sources), TRIBUTARY_FAILPOINT=at)
    child = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, timeout=120, check=False)
    assert child.returncode == -signal.SIGKILL


def test_a_run_killed_mid_crawl_commits_nothing_and_the_next_indexes_each_page_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_site: tuple[Path, str]
) -> None:
    _, url = demo_site
    home, sources = tmp_path / "home", tmp_path / "sources.yaml"
    src = _source(url)
    sources.write_text(
        '{"sources": [{"kind": "web", "name": "early", "batch_size": 2, "options": '
        f'{{"seeds": ["{url}"], "delay_seconds": 0, "allowlist": ["127.0.0.1"], "use_sitemaps": false}}}}]}}',
        encoding="utf-8",
    )
    _killed_mid_crawl(home, sources, "early:submit@3")  # pages handed to the workers, crawl not done
    monkeypatch.setenv("TRIBUTARY_HOME", str(home))
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(sources))
    store = open_state_store()
    assert store.items(src.source_id) == {}  # nothing committed
    store.close()
    index = open_index(src.index)
    assert index.chunk_ids(source=src.source_id) == set()  # nothing indexed
    index.close()

    summary = run_pipeline(src)
    assert summary.status == "success" and summary.counts["failed"] == 0, summary.counts
    kept = _kept(src, summary.run_id)
    indexed = [c for c, _ in kept["chunks"]]
    assert len(indexed) == len(set(indexed)) == sum(len(item[3]) for item in kept["items"].values())
    assert len(kept["items"]) == summary.counts["new"] >= 5

    monkeypatch.setenv("TRIBUTARY_HOME", str(tmp_path / "serial"))
    monkeypatch.setenv("TRIBUTARY_PARSE_WORKERS", "0")
    serial = run_pipeline(src)
    assert _kept(src, serial.run_id)["chunks"] == kept["chunks"]  # the same chunks, none twice


def test_deletions_still_come_only_from_a_complete_listing(
    tributary_home: Path, monkeypatch: pytest.MonkeyPatch, demo_site: tuple[Path, str]
) -> None:
    root, url = demo_site
    monkeypatch.delenv("TRIBUTARY_PARSE_WORKERS", raising=False)  # the default: parsed during the crawl
    src = _source(url)
    first = run_pipeline(src)
    assert first.parsed_during_crawl == first.counts["new"] >= 5
    (root / "faq.html").unlink()
    partial = run_pipeline(src, {"max_items": 2})  # a listing cut short: it deletes nothing
    assert partial.counts["deleted"] == 0, partial.counts
    store = open_state_store()
    assert f"{url}faq.html" in store.items(src.source_id)
    complete = run_pipeline(src)
    assert complete.counts["deleted"] == 1, complete.counts
    assert f"{url}faq.html" not in {k for k, s in store.items(src.source_id).items() if s.indexed}
    store.close()


def test_results_past_the_memory_bound_wait_in_files_and_index_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo_site: tuple[Path, str]
) -> None:
    _, url = demo_site
    spilled: list[Path] = []
    real_hold = early.EarlyWork._hold

    def hold(self: early.EarlyWork, job: Any) -> None:
        real_hold(self, job)
        if self.workdir is not None:
            spilled.extend(self.workdir.iterdir())

    monkeypatch.setattr(early, "HELD_BYTES", 0)  # every result goes to a file
    monkeypatch.setattr(early.EarlyWork, "_hold", hold)
    kept = {}
    for workers in ("0", "1"):
        monkeypatch.setenv("TRIBUTARY_HOME", str(tmp_path / f"home-{workers}"))
        monkeypatch.setenv("TRIBUTARY_PARSE_WORKERS", workers)
        summary = run_pipeline(_source(url))
        assert summary.status == "success", summary.counts
        kept[workers] = _kept(_source(url), summary.run_id)
    assert summary.parsed_during_crawl == summary.counts["new"] >= 5
    assert spilled and not any(p.exists() for p in spilled)  # spilled, taken, removed with the run
    assert kept["0"] == kept["1"]
