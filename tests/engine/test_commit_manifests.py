"""Commit refuses a run with a batch's manifests missing (issue 19, point 8).

Before, commit globbed the ``upserted`` manifests it found: one lost file (a task marked success
by hand, a staging directory not shared between workers) and the run was "success" with that
batch's items neither in the state nor in the lineage, their chunks orphaned in the index.
Now commit fails naming the batch; re-running that batch's tasks, then commit, gives the result
of a clean sync, in Airflow's task-by-task way and in the in-process runner.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from include.index import open_index
from include.stores import open_state_store
from plugins.engine import RunContext, commit_stage, discover_stage, finish_stage, run_pipeline, start_run
from plugins.engine.commit import MissingManifestsError
from tests.engine.test_idempotence import _process_batches, _snapshot, _source


@pytest.fixture
def clean(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, dict]:
    """Index and state of a clean sync in another TRIBUTARY_HOME."""
    monkeypatch.setenv("TRIBUTARY_HOME", str(tmp_path / "clean"))
    run_pipeline(_source(folder))
    snap = _snapshot()
    monkeypatch.setenv("TRIBUTARY_HOME", str(tmp_path / "subject"))
    return snap


def _planned_and_processed(src, run_id: str) -> RunContext:
    store = open_state_store()
    ctx = RunContext(source=src, run_id=run_id)
    start_run(ctx, store)
    _process_batches(ctx, discover_stage(ctx, store))
    store.close()
    return ctx


def test_commit_names_the_batch_without_manifest_then_redoing_it_converges(folder: Path, clean, tributary_home) -> None:
    src = _source(folder)
    ctx = _planned_and_processed(src, "lost")
    lost = Path(ctx.staging.path("upserted-0001.json"))
    lost.unlink()
    store = open_state_store()

    def factory():
        return open_index(src.index)

    with pytest.raises(MissingManifestsError, match=r"batch 1 \(last manifest chunked-0001.json\)") as info:
        commit_stage(ctx, store, factory)
    assert info.value.batches == [1]
    assert store.items("files:t") == {} and store.run_items("lost", source="files:t") == []  # nothing committed

    # a retry of the batch's tasks (Airflow: clear fetch/parse/chunk/upsert of map index 1), then commit
    from plugins.engine import chunk_stage, fetch_stage, open_connector, parse_stage, upsert_stage

    with open_connector(ctx) as connector:
        path = fetch_stage(str(ctx.staging.path("batch-0001.json")), connector)
    upsert_stage(chunk_stage(parse_stage(path, src), src), src, factory)
    counts = commit_stage(ctx, store, factory)
    assert (counts["new"], counts["failed"]) == (7, 0)
    finish_stage(ctx, store, counts)
    assert len(store.run_items("lost", source="files:t")) == 7
    store.close()
    assert _snapshot() == clean


def test_in_process_runner_resumes_a_run_redoing_only_the_batches_without_manifest(
    folder: Path, clean, tributary_home
) -> None:
    """``run_pipeline`` with the id of an unfinished run keeps its plan and processes again only
    the batches that have no upserted manifest (those that did are not fetched again)."""
    src = _source(folder)
    ctx = _planned_and_processed(src, "resume")  # killed before commit, say; then a manifest is lost
    Path(ctx.staging.path("upserted-0002.json")).unlink()
    Path(ctx.staging.path("chunked-0002.json")).unlink()
    index = open_index(src.index)
    total = len(index.chunk_ids(source="files:t"))
    index.close()
    summary = run_pipeline(src, run_id="resume")
    assert summary.status == "success" and (summary.counts["new"], summary.counts["failed"]) == (7, 0)
    # batches 0 and 1 count the chunks their first (only) upsert wrote; batch 2, redone, found its own
    # chunks in place: redoing every batch would have written none
    written, unchanged = summary.counts["chunks_written"], summary.counts["chunks_unchanged"]
    assert written > 0 and unchanged > 0 and written + unchanged == total, summary.counts
    assert not Path(ctx.staging.path("discover.json")).exists()  # closed and cleaned
    assert _snapshot() == clean
