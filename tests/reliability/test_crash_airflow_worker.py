"""Crash and resume under a real worker (issue 10, point 1): SIGKILL at every boundary, Airflow retries.

``airflow dags test`` runs tasks in its own process, so a kill there ends the whole run
(test_crash_airflow.py). In a deployment each task instance runs in a process of its own under
the task runner's supervisor. This test starts that: api-server, scheduler (LocalExecutor) and
dag-processor on a fresh PostgreSQL metadata DB, all on 127.0.0.1, with every failpoint armed
once (``TRIBUTARY_FAILPOINT_ONCE`` is a directory: the first process to reach each failpoint dies,
its retry runs through) and 3 retries without delay. One triggered run then loses a task process
at every stage boundary and inside the bulk upsert; the supervisor reports each as
``up_for_retry``, the scheduler retries it, and the run must end as a clean sync does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from include.config import SourceConfig
from plugins.engine import run_pipeline
from tests.reliability._airflow_driver import DAG_ID, run_log, snapshot
from tests.reliability.test_crash_airflow import _PER_HOME, _assert_same, _spec, _write_notes
from tests.support.airflow import write_sources
from tests.support.airflow_stack import AirflowProcesses, component_env, trigger_and_wait
from tests.support.postgres import scratch_database
from tests.support.server import free_port

pytestmark = [pytest.mark.airflow, pytest.mark.postgres, pytest.mark.slow]

# Every failpoint once; upsert:doc:1 fires inside the bulk upsert of whichever batch gets there first.
FAILPOINTS = ("discover", "fetch", "parse", "chunk", "upsert:doc:1", "upsert", "commit")


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[AirflowProcesses, str, Path]]:
    notes = tmp_path / "notes"
    _write_notes(notes)
    sources = write_sources(tmp_path / "sources.yaml", [_spec(notes)])
    (tmp_path / "fired").mkdir()
    port = free_port()
    with scratch_database("tributary_crash") as meta_url:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIBUTARY_", "AIRFLOW__"))}
        env.update(
            component_env(airflow_home=tmp_path / "airflow", meta_url=meta_url, port=port, executor="LocalExecutor")
        )
        env.update(
            {
                "AIRFLOW__CORE__PARALLELISM": "2",
                "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
                "AIRFLOW__OPENLINEAGE__DISABLED": "true",
                "TRIBUTARY_HOME": str(tmp_path / "home"),
                "TRIBUTARY_SOURCES": str(sources),
                "TRIBUTARY_TASK_RETRIES": "3",
                "TRIBUTARY_RETRY_DELAY_SECONDS": "0",
                "TRIBUTARY_FAILPOINT": ",".join(FAILPOINTS),
                "TRIBUTARY_FAILPOINT_ONCE": str(tmp_path / "fired"),
            }
        )
        s = AirflowProcesses(env=env, logs=tmp_path / "logs")
        try:
            s.start_local_stack(port)
            yield s, f"http://127.0.0.1:{port}", notes
        finally:
            s.stop()


def test_worker_sigkill_at_every_boundary_is_retried_to_the_clean_result(
    stack: tuple[AirflowProcesses, str, Path], tmp_path: Path
) -> None:
    s, base_url, notes = stack
    with httpx.Client(base_url=base_url, timeout=30) as http:
        http.headers["Authorization"] = "Bearer " + http.get("/auth/token").json()["access_token"]
        s.wait("the DAG parsed", lambda: http.get(f"/api/v2/dags/{DAG_ID}").status_code == 200)
        run_id, state = trigger_and_wait(http, DAG_ID, s.wait, 400)
        assert state == "success", s.tails()
        tis = http.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances").json()["task_instances"]
        tries: dict[str, list[str]] = {}
        for ti in tis:
            key = ti["task_id"] + (f"[{ti['map_index']}]" if ti["map_index"] >= 0 else "")
            path = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{ti['task_id']}/{ti['map_index']}/tries"
            tries[key] = [t["state"] for t in http.get(path).json()["task_instances"]]

    # every failpoint fired once: that many task processes were SIGKILLed ...
    assert sorted(p.name for p in (tmp_path / "fired").iterdir()) == sorted(FAILPOINTS)
    # ... the supervisor saw each die of SIGKILL and reported up_for_retry (retries were left) ...
    supervisor = [
        line
        for line in (s.logs / "scheduler.log").read_text(errors="replace").splitlines()
        if "Workload finished" in line
    ]
    killed = [line for line in supervisor if "SIGKILL" in line]
    assert len(killed) == len(FAILPOINTS) and all("final_state=up_for_retry" in line for line in killed), killed
    # ... and the scheduler retried each; the killed try is archived as failed (TaskInstanceHistory
    # records a state that is not finished, up_for_retry, as failed), the retry succeeded
    retried = {k: states for k, states in tries.items() if len(states) > 1}
    assert sum(len(states) - 1 for states in retried.values()) == len(FAILPOINTS), tries
    assert all(states[:-1] == ["failed"] * (len(states) - 1) for states in retried.values()), tries
    assert all(states[-1] == "success" for states in tries.values()), tries
    assert {k.split("[")[0] for k in retried} == {"discover", "fetch", "parse", "chunk", "upsert", "commit"}

    # the run converged: index and state equal a clean sync's, the run log like a first sync's
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRIBUTARY_HOME", str(tmp_path / "clean"))
        for var in _PER_HOME:
            mp.delenv(var, raising=False)
        run_pipeline(SourceConfig.model_validate(_spec(notes)))
    home = Path(s.env["TRIBUTARY_HOME"])
    _assert_same(snapshot(home), snapshot(tmp_path / "clean"))
    log = run_log(home, run_id)
    assert log["status"] == "success" and log["lineage_rows"] == 7
    assert (log["counts"]["new"], log["counts"]["failed"]) == (7, 0)
