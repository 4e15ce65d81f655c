"""Killed runs are closed and their staging removed (issue 19, point 8).

A SIGKILLed in-process run (``tributary sync``; ``TRIBUTARY_FAILPOINT`` kills it at a stage
boundary) runs no ``finally``: before, the run log showed it ``running`` forever and its staging
directory (raw bytes included) stayed. The reaper judges it dead because its recorded process is
gone, marks it failed with that reason and removes the staging; it runs when the next run of the
source starts, and on demand (``python -m plugins.engine.cli reap``). A run whose process lives is left
alone, and so is one on another host until its heartbeat is older than TRIBUTARY_REAP_AFTER_HOURS.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from include.config import SourceConfig
from include.index import open_index
from include.stores import open_state_store
from include.stores.state import runs_table
from plugins.engine import RunContext, commit_stage, run_pipeline
from plugins.engine.reaper import process_owner, reap_stale_runs
from tests.conftest import ROOT
from tests.support.airflow import write_sources

SOURCE = "files:reap"


@pytest.fixture
def source(tmp_path: Path, tributary_home: Path, monkeypatch: pytest.MonkeyPatch) -> SourceConfig:
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(5):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nLocks and weirs of canal {i}.\n", encoding="utf-8")
    spec = {"kind": "files", "name": "reap", "options": {"root": str(root)}, "batch_size": 2}
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "sources.yaml", [spec])))
    return SourceConfig.model_validate(spec)


def _killed_run(failpoint: str, run_id: str) -> int:
    """``run_pipeline`` in a child process that SIGKILLs itself at ``failpoint``; returns its pid."""
    code = (
        "from plugins.engine import get_source, run_pipeline\n"
        f"run_pipeline(get_source({SOURCE!r}), run_id={run_id!r})\n"
        "raise SystemExit('the failpoint did not fire')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIBUTARY_FAILPOINT")}
    child = subprocess.Popen([sys.executable, "-c", code], env={**env, "TRIBUTARY_FAILPOINT": failpoint}, cwd=ROOT)
    assert child.wait(timeout=120) == -signal.SIGKILL
    return child.pid


def _staging(source: SourceConfig, run_id: str) -> Path:
    return Path(RunContext(source=source, run_id=run_id).staging.root)


def test_a_killed_run_is_reaped_by_the_next_run_of_its_source(source: SourceConfig) -> None:
    pid = _killed_run("upsert@1", "killed")
    store = open_state_store()
    run = store.get_run("killed", SOURCE)
    assert run["status"] == "running" and run["owner"]["pid"] == pid
    staged = _staging(source, "killed")
    assert any((staged / "raw").iterdir())  # the killed run's raw bytes are there

    summary = run_pipeline(source)
    assert summary.status == "success" and summary.counts["new"] == 5
    run = store.get_run("killed", SOURCE)
    assert run["status"] == "failed" and run["ended_at"] is not None
    assert run["error"] == f"reaped: its process (pid {pid} on {socket.gethostname()}) is gone"
    assert not staged.exists()  # files sources keep no raw bytes: all of it removed

    # a single task of the reaped run cannot be redone (its plan is gone): a clear error says so
    ctx = RunContext(source=source, run_id="killed")
    with pytest.raises(FileNotFoundError, match=r"reaped: its process .* re-run the whole DAG run"):
        commit_stage(ctx, store, lambda: open_index(source.index))
    # the whole run can: it plans again (against the state the run after it committed)
    again = run_pipeline(source, run_id="killed")
    assert (again.status, again.counts["unchanged"], again.counts["new"]) == ("success", 5, 0)
    store.close()


def test_reap_command_closes_a_killed_run_and_leaves_a_live_one(source: SourceConfig) -> None:
    pid = _killed_run("fetch@1", "killed")
    store = open_state_store()
    store.start_run("live", SOURCE, run_type="inline", owner=process_owner())  # this process: alive
    command = [sys.executable, "-m", "plugins.engine.cli", "reap", "--no-airflow", "--json"]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    reaped = json.loads(out.stdout)
    assert [(r["source"], r["run_id"], r["staging_removed"]) for r in reaped] == [(SOURCE, "killed", True)]
    assert str(pid) in reaped[0]["reason"]
    assert store.get_run("killed", SOURCE)["status"] == "failed"
    assert not _staging(source, "killed").exists()
    assert store.get_run("live", SOURCE)["status"] == "running"
    again = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=120, env=dict(os.environ))
    assert json.loads(again.stdout) == []  # nothing left to reap
    store.close()


def test_runs_of_another_host_are_reaped_only_after_the_heartbeat_timeout(source: SourceConfig) -> None:
    store = open_state_store()
    for run_id in ("quiet", "beating"):
        store.start_run(run_id, SOURCE, run_type="inline", owner={"host": "worker-7", "pid": 4242})
    # "reused": recorded as this host's live pid, but with another start time (the pid was reused)
    mine = {"host": socket.gethostname(), "pid": os.getpid(), "pid_started": "another-boot:1"}
    store.start_run("reused", SOURCE, run_type="inline", owner=mine)
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=13)
    with store.engine.begin() as conn:
        conn.execute(runs_table.update().where(runs_table.c.run_id == "quiet").values(heartbeat_at=long_ago))
    reaped = {r.run_id: r.reason for r in reap_stale_runs(store, source=SOURCE)}
    assert reaped == {
        "quiet": "reaped: no heartbeat for more than 12 h from its process on worker-7",
        "reused": f"reaped: its process (pid {os.getpid()} on {socket.gethostname()}) is gone "
        "(the pid now names another process)",
    }
    assert store.get_run("beating", SOURCE)["status"] == "running"
    with store.engine.connect() as conn:
        statuses = dict(conn.execute(sa.select(runs_table.c.run_id, runs_table.c.status)).all())
    assert statuses == {"quiet": "failed", "beating": "running", "reused": "failed"}
    store.close()


def test_reaping_keeps_raw_bytes_of_a_source_that_retains_them(
    source: SourceConfig, tmp_path: Path, monkeypatch
) -> None:
    spec = {**source.model_dump(include={"kind", "name", "options", "batch_size"}), "retain_raw": True}
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "retain.yaml", [spec])))
    _killed_run("parse@1", "killed")
    staged = _staging(source, "killed")
    run_pipeline(SourceConfig.model_validate(spec))
    assert open_state_store().get_run("killed", SOURCE)["status"] == "failed"
    assert sorted(p.name for p in staged.iterdir()) == ["raw"] and any((staged / "raw").iterdir())
