"""Staged files are checked when read back (issue 19, point 5).

A file replaced or truncated in staging between two tasks must not be indexed as the source's
content: the item fails at *fetch* with reason ``staging_corrupt`` (retryable), nothing of it is
written, and its stored version does not advance, so the next run fetches it again (instead of
being told "304 Not Modified" and keeping bad text until the page changes).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from include.config import SourceConfig
from include.index import open_index
from include.stores import open_state_store
from plugins.engine import (
    RunContext,
    chunk_stage,
    commit_stage,
    discover_stage,
    fetch_stage,
    finish_stage,
    open_connector,
    parse_stage,
    run_pipeline,
    start_run,
    upsert_stage,
)
from plugins.engine.manifests import read_stage_manifest
from plugins.engine.records import ItemRecord

FAQ = "faq.html"


def _web_source(url: str) -> SourceConfig:
    return SourceConfig.model_validate(
        {
            "kind": "web",
            "name": "integrity",
            "options": {"seeds": [url], "delay_seconds": 0, "allowlist": ["127.0.0.1"], "use_sitemaps": False},
        }
    )


def _files_source(root: Path) -> SourceConfig:
    return SourceConfig(kind="files", name="integrity", options={"root": str(root)}, batch_size=2)


def _indexed_text(source: str, doc_id: str | None = None) -> str:
    """The indexed text of one document (of the whole source without ``doc_id``)."""
    index = open_index()
    try:
        rows = [index.get_chunk(cid) for cid in sorted(index.chunk_ids(source=source))]
        return "\n".join(r["text"] for r in rows if doc_id is None or r["doc_id"] == doc_id)
    finally:
        index.close()


def _run_with(ctx: RunContext, between: dict[str, Callable[[Any], None]]) -> dict:
    """Every stage of one run in this process; ``between[stage](manifest_path)`` runs after that stage."""
    src = ctx.source
    store = open_state_store()
    try:
        start_run(ctx, store)
        plan = discover_stage(ctx, store)
        if hook := between.get("discover"):
            hook(plan)
        with open_connector(ctx) as connector:
            for batch in plan["batches"]:
                path = fetch_stage(batch, connector)
                if hook := between.get("fetch"):
                    hook(path)
                path = parse_stage(path, src)
                path = chunk_stage(path, src)
                if hook := between.get("chunk"):
                    hook(path)
                upsert_stage(path, src, lambda: open_index(src.index))
        counts = commit_stage(ctx, store, lambda: open_index(src.index))
        return finish_stage(ctx, store, counts)
    finally:
        store.close()


def _entries(manifest_path: str) -> list[ItemRecord]:
    return read_stage_manifest(manifest_path).items


def test_page_corrupted_in_staging_after_the_crawl_fails_and_is_fetched_again(tributary_home: Path, demo_site) -> None:
    root, url = demo_site
    src = _web_source(url)
    first = run_pipeline(src)
    assert first.counts["failed"] == 0
    faq_key = next(k for k in open_state_store().items(src.source_id) if k.endswith(FAQ))
    store = open_state_store()
    good = store.get_item(src.source_id, faq_key)
    assert good is not None and good.version is not None
    # the page changes at the source (a new Last-Modified, so the crawl downloads it)
    page = root / FAQ
    page.write_text(page.read_text(encoding="utf-8").replace("</main>", "<p>Sluice gates open at dawn.</p></main>"))
    os.utime(page, (page.stat().st_atime, page.stat().st_mtime + 10))

    def truncate_faq(plan: dict) -> None:
        for batch in plan["batches"]:
            for entry in _entries(batch):
                if entry.item_key == faq_key:
                    staged = Path(entry.change.staged_path or "")
                    staged.write_bytes(staged.read_bytes()[:40])  # cut off after the crawl staged it

    counts = _run_with(RunContext(source=src, run_id="corrupt"), {"discover": truncate_faq})
    assert counts["failed"] == 1 and counts["changed"] == 0, counts
    [row] = store.run_items("corrupt", action="failed", source=src.source_id)
    assert row["item_key"] == faq_key and row["reason"] == "fetch: staging_corrupt", row
    after = store.get_item(src.source_id, faq_key)
    assert after.version == good.version and after.chunk_ids == good.chunk_ids  # not advanced
    assert "Sluice gates" not in _indexed_text(src.source_id, good.doc_id)

    # the next run sends the old validators: the server answers 200 with the new page, not 304
    third = run_pipeline(src)
    assert third.counts["changed"] == 1 and third.counts["failed"] == 0, third.counts
    assert "Sluice gates" in _indexed_text(src.source_id, good.doc_id)
    store.close()


def test_raw_bytes_replaced_after_fetch_are_refused(tributary_home: Path, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"n{i}.md").write_text(f"# Note {i}\n\nWeirs and locks, note {i}.\n", encoding="utf-8")
    src = _files_source(docs)

    def replace_n1(fetched: str) -> None:
        for entry in _entries(fetched):
            if entry.item_key == "n1.md" and entry.raw is not None:
                raw = Path(entry.raw.file.path)
                # same size, other bytes: only the hash can tell
                raw.write_bytes(raw.read_bytes().replace(b"Weirs", b"Bears"))

    counts = _run_with(RunContext(source=src, run_id="swap"), {"fetch": replace_n1})
    assert (counts["new"], counts["failed"]) == (2, 1), counts
    store = open_state_store()
    [row] = store.run_items("swap", action="failed", source=src.source_id)
    assert row["item_key"] == "n1.md" and row["reason"] == "fetch: staging_corrupt"
    assert "sha256" in row["error"]
    state = store.get_item(src.source_id, "n1.md")
    assert state is not None and state.version is None and state.failure_count == 1
    assert store.get_item(src.source_id, "n1.md").last_error_reason == "staging_corrupt"
    store.close()
    assert "Bears" not in _indexed_text(src.source_id, state.doc_id)

    again = run_pipeline(src)
    assert (again.counts["new"], again.counts["unchanged"], again.counts["failed"]) == (1, 2, 0), again.counts
    assert "Weirs and locks, note 1" in _indexed_text(src.source_id, state.doc_id)


def test_chunks_edited_in_staging_before_upsert_are_not_written(tributary_home: Path, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nCanal locks raise boats.\n", encoding="utf-8")
    src = _files_source(docs)

    def edit_chunks(chunked: str) -> None:
        for entry in _entries(chunked):
            assert entry.chunked is not None
            path = Path(entry.chunked.file.path)
            # the batch's chunk file (msgpack: item key -> chunks), rewritten valid, other content
            staged = msgspec.msgpack.decode(path.read_bytes())
            staged[entry.item_key][0]["text"] = "Injected text that was never in the source."
            path.write_bytes(msgspec.msgpack.encode(staged))

    counts = _run_with(RunContext(source=src, run_id="edited"), {"chunk": edit_chunks})
    assert (counts["new"], counts["failed"], counts["chunks_written"]) == (0, 1, 0), counts
    store = open_state_store()
    [row] = store.run_items("edited", action="failed", source=src.source_id)
    assert row["reason"] == "fetch: staging_corrupt" and "chunks" in row["error"]
    store.close()
    assert "Injected" not in _indexed_text(src.source_id)
    assert run_pipeline(src).counts["new"] == 1
