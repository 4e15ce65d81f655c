"""The reaper in real Airflow 3.3.2: a killed DAG run's run-log row (issue 19, point 8).

Two runs of the crash DAG are SIGKILLed inside upsert (``airflow dags test`` with a failpoint, forked
by the driver as in test_crash_airflow.py): the run log keeps them ``running``, their staging stays. The next run's
discover asks the API server, through the Task SDK, for the state of those DAG runs:

1. still ``running`` in the metadata DB (``dags test`` has no scheduler to notice the lost task):
   left alone; a run Airflow still considers alive is never closed by us;
2. after one DAG run is set ``failed`` (what the scheduler does once the task's heartbeat times
   out and its retries are spent) and the other is deleted: both are marked failed with the
   reason, and their staging is removed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import sqlalchemy as sa

from include.staging import StagingArea
from tests.reliability._airflow_driver import DAG_ID
from tests.reliability.test_crash_airflow import Case, _jobs_crash, _jobs_dag_test, _spec, _write_notes, drive
from tests.support.airflow import write_sources

pytestmark = pytest.mark.airflow


def _metadata(statement: str, **params: str) -> None:
    from airflow.configuration import conf

    engine = sa.create_engine(conf.get("database", "sql_alchemy_conn"))
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(statement), params)
    finally:
        engine.dispose()


def test_next_run_reaps_killed_runs_whose_dag_run_failed_or_is_gone(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    _write_notes(notes)
    case = Case(tmp_path / "home", write_sources(tmp_path / "sources.yaml", [_spec(notes)]))
    *crashes, alive = drive(_jobs_crash(case, "upsert@1") + _jobs_crash(case, "upsert@1") + _jobs_dag_test(case))
    killed = []
    for crashed in crashes:  # killed, the DAG run left running
        assert crashed["exit"] < 0 and crashed["dag_run"]["state"] == "running", crashed["output"][-3000:]
        killed.append(crashed["dag_run"]["run_id"])
    stagings = [Path(StagingArea(DAG_ID, run_id, root=case.home / "staging").root) for run_id in killed]
    assert all((s / "raw").is_dir() for s in stagings)

    assert alive["dag_run"]["state"] == "success"
    from include.stores import open_state_store

    store = open_state_store(f"sqlite:///{case.home / 'state.db'}")
    try:
        assert [store.get_run(r, "files:crash")["status"] for r in killed] == ["running", "running"]
        assert all(s.exists() for s in stagings)

        _metadata("UPDATE dag_run SET state = 'failed' WHERE dag_id = :d AND run_id = :r", d=DAG_ID, r=killed[0])
        _metadata("DELETE FROM dag_run WHERE dag_id = :d AND run_id = :r", d=DAG_ID, r=killed[1])
        [reaping] = drive(_jobs_dag_test(case))
        assert reaping["dag_run"]["state"] == "success"
        failed, gone = (store.get_run(r, "files:crash") for r in killed)
        assert (
            failed["status"] == "failed"
            and failed["error"] == "reaped: its DAG run ended (failed) without closing the run"
        )
        assert gone["status"] == "failed"
        assert gone["error"] == f"reaped: its DAG run ({DAG_ID}, {killed[1]}) no longer exists"
        assert not any(s.exists() for s in stagings)
    finally:
        store.close()
        shutil.rmtree(tmp_path / "home", ignore_errors=True)


def test_reap_command_reads_the_metadata_db_outside_task_code(
    tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m plugins.tributary_airflow.cli reap`` is not task code: it reads DAG runs from
    Airflow's metadata DB (as Airflow's own CLI does). A run-log row whose DAG run does not exist
    there is reaped. The engine's own command (``plugins.engine.cli``, Airflow-free) leaves it alone
    and says which command judges it."""
    import json
    import os
    import subprocess
    import sys

    from include.stores import open_state_store
    from tests.conftest import ROOT
    from tests.support.airflow import ensure_airflow_db

    def reap(module: str) -> subprocess.CompletedProcess[bytes]:
        command = [sys.executable, "-m", module, "reap", "--json"]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=300, env=dict(os.environ))
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        return done

    ensure_airflow_db()
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "s.yaml", [_spec(tmp_path)])))
    store = open_state_store()
    store.start_run("manual__never", "files:crash", dag_id=DAG_ID, run_type="manual")
    StagingArea(DAG_ID, "manual__never").write_bytes("raw/x.md", b"# orphaned\n")
    try:
        engine_only = reap("plugins.engine.cli")
        assert json.loads(engine_only.stdout) == []
        assert b"Airflow runs are left alone: python -m plugins.tributary_airflow.cli reap" in engine_only.stderr
        assert store.get_run("manual__never", "files:crash")["status"] == "running"

        [reaped] = json.loads(reap("plugins.tributary_airflow.cli").stdout)
        assert reaped["reason"] == f"reaped: its DAG run ({DAG_ID}, manual__never) no longer exists"
        assert reaped["staging_removed"] and not StagingArea(DAG_ID, "manual__never").exists()
        assert store.get_run("manual__never", "files:crash")["status"] == "failed"
    finally:
        store.close()
