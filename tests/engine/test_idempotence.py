"""Nothing lost, nothing doubled: re-running any stage, or crashing anywhere, converges.

Each scenario ends by comparing the index and the item state with those of a clean sync of
the same folder in a separate TRIBUTARY_HOME: same chunk ids, same texts, same versions.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from include.config import SourceConfig
from include.index import open_index
from include.stores import open_state_store
from plugins.engine import (
    RunContext,
    abort_run,
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


def _source(root: Path) -> SourceConfig:
    return SourceConfig(
        kind="files", name="t", options={"root": str(root)}, batch_size=3, chunker={"options": {"chunk_token_num": 64}}
    )


def _snapshot() -> tuple[dict, dict]:
    index = open_index()
    chunks = {cid: index.get_chunk(cid)["text"] for cid in index.chunk_ids(source="files:t")}
    index.close()
    store = open_state_store()
    state = {
        k: (s.version.content_hash if s.version else None, tuple(s.chunk_ids), s.failure_count)
        for k, s in store.items("files:t").items()
    }
    store.close()
    return chunks, state


@pytest.fixture
def clean(folder: Path, tmp_path: Path, monkeypatch) -> tuple[dict, dict]:
    monkeypatch.setenv("TRIBUTARY_HOME", str(tmp_path / "clean"))
    run_pipeline(_source(folder))
    snap = _snapshot()
    monkeypatch.setenv("TRIBUTARY_HOME", str(tmp_path / "subject"))
    return snap


def _process_batches(ctx: RunContext, plan: dict, *, repeat: int = 1) -> None:
    """Fetch, parse, chunk and upsert every batch of ``plan``, each stage ``repeat`` times in a row."""
    src = ctx.source
    with open_connector(ctx) as connector:
        for batch in plan["batches"]:
            for _ in range(repeat):
                fetched = fetch_stage(batch, connector)
            for _ in range(repeat):
                parsed = parse_stage(fetched, src)
            for _ in range(repeat):
                chunked = chunk_stage(parsed, src)
            for _ in range(repeat):
                upsert_stage(chunked, src, lambda: open_index(src.index))


def _stages_twice(src: SourceConfig, run_id: str) -> None:
    """Every task of one run executed twice in a row, as an Airflow retry or clear would."""
    store = open_state_store()
    ctx = RunContext(source=src, run_id=run_id)
    start_run(ctx, store)
    discover_stage(ctx, store)
    plan = discover_stage(ctx, store)
    _process_batches(ctx, plan, repeat=2)

    def factory():
        return open_index(src.index)

    counts = commit_stage(ctx, store, factory)
    assert commit_stage(ctx, store, factory) == counts
    finish_stage(ctx, store, counts)
    store.close()


def test_every_stage_rerun_gives_the_clean_result(folder: Path, clean, tributary_home) -> None:
    src = _source(folder)
    _stages_twice(src, "run-1")
    assert _snapshot() == clean
    store = open_state_store()
    items = store.run_items("run-1")
    assert len(items) == 7 and {i["action"] for i in items} == {"new"}
    # a second run (also with every stage twice) changes nothing
    _stages_twice(src, "run-2")
    assert _snapshot() == clean
    assert {i["action"] for i in store.run_items("run-2")} == {"unchanged"}


def test_every_stage_of_a_finished_run_rerun_changes_nothing(folder: Path, clean, tributary_home) -> None:
    """Clearing tasks of a finished run (staging cleaned) re-runs them; the run is closed: each
    stage does nothing, the run log keeps its counts and status, index and state do not move."""
    src = _source(folder)
    _stages_twice(src, "done")
    store = open_state_store()
    before = store.get_run("done", "files:t")
    assert before["status"] == "success" and before["counts"]["batches"] == 3
    ctx = RunContext(source=src, run_id="done")
    assert not Path(ctx.staging.path("discover.json")).exists()  # cleaned by finish_stage

    start_run(ctx, store)
    plan = discover_stage(ctx, store)
    assert [Path(b).name for b in plan["batches"]] == ["batch-0000.json", "batch-0001.json", "batch-0002.json"]

    def factory():
        return open_index(src.index)

    assert commit_stage(ctx, store, factory) == before["counts"]
    abort_run(ctx, store, "RuntimeError: a cleared task failed")  # the failure path of a re-run task
    assert finish_stage(ctx, store, {"new": 0}) == before["counts"]
    after = store.get_run("done", "files:t")
    assert (after["status"], after["counts"], after["error"]) == ("success", before["counts"], None)
    assert {i["action"] for i in store.run_items("done")} == {"new"}
    store.close()
    assert _snapshot() == clean


def test_discover_rerun_keeps_the_runs_plan(folder: Path, clean, tributary_home) -> None:
    """A discover cleared after the run committed (before the summary) must not plan again against
    the state the run itself committed: same batches, and commit counts stay those of the run."""
    src = _source(folder)
    store = open_state_store()
    ctx = RunContext(source=src, run_id="replan")
    start_run(ctx, store)
    plan = discover_stage(ctx, store)
    _process_batches(ctx, plan)

    def factory():
        return open_index(src.index)

    counts = commit_stage(ctx, store, factory)
    again = discover_stage(ctx, store)  # cleared discover, after the commit
    assert again["batches"] == plan["batches"]
    assert commit_stage(ctx, store, factory) == counts
    assert counts["new"] == 7 and counts["unchanged"] == 0
    finish_stage(ctx, store, counts)
    store.close()
    assert _snapshot() == clean


def test_crash_between_upsert_and_commit_then_next_run(folder: Path, clean, tributary_home) -> None:
    src = _source(folder)
    store = open_state_store()
    ctx = RunContext(source=src, run_id="crashed")
    start_run(ctx, store)
    _process_batches(ctx, discover_stage(ctx, store))
    # the worker dies here: chunks are in the index, state was never committed
    assert store.items("files:t") == {}
    summary = run_pipeline(src)
    assert summary.counts["new"] == 7 and summary.counts["chunks_written"] == 0  # same ids: nothing rewritten
    assert _snapshot() == clean


_KILL_INSIDE_UPSERT = textwrap.dedent(
    """
    import os, signal, sys
    from include.index.sqlite_fts import SqliteFtsIndex
    from include.config import SourceConfig
    from plugins.engine import run_pipeline

    original = SqliteFtsIndex._upsert_one
    calls = []

    def dying(self, cur, write):
        calls.append(1)
        result = original(self, cur, write)
        if len(calls) == int(os.environ["KILL_AFTER_DOCS"]):
            os.kill(os.getpid(), signal.SIGKILL)  # mid-transaction, mid-batch
        return result

    SqliteFtsIndex._upsert_one = dying
    src = SourceConfig(kind="files", name="t", options={"root": sys.argv[1]}, batch_size=3,
                       chunker={"options": {"chunk_token_num": 64}})
    run_pipeline(src)
    """
)


@pytest.mark.parametrize("kill_after", [1, 4])
def test_sigkill_inside_bulk_upsert(folder: Path, clean, tributary_home, kill_after: int) -> None:
    env = {**os.environ, "KILL_AFTER_DOCS": str(kill_after)}
    child = subprocess.run([sys.executable, "-c", _KILL_INSIDE_UPSERT, str(folder)], env=env, capture_output=True)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    summary = run_pipeline(_source(folder))
    assert summary.status == "success" and summary.counts["new"] == 7
    assert _snapshot() == clean
