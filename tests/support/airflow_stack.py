"""Airflow components (api-server, scheduler, dag-processor, triggerer, workers) as test subprocesses.

Each component runs ``python -m airflow <args>`` in its own session with its output in
``logs/<name>.log``; :meth:`AirflowProcesses.wait` polls a condition and fails fast, with the
logs' tails, when a component dies. :func:`trigger_and_wait` runs a DAG through the REST API.
:func:`component_env` gives the settings all its components share (a stack's metadata database
comes from :func:`tests.support.postgres.scratch_database`).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import ROOT

__all__ = ["AirflowProcesses", "component_env", "trigger_and_wait"]


def component_env(
    *, airflow_home: Path, meta_url: str, port: int, executor: str, dags_folder: Path = ROOT / "dags"
) -> dict[str, str]:
    """The Airflow settings every component of a test stack shares (fresh API secrets each call).

    The api-server listens on 127.0.0.1:``port``; tasks reach its execution API there.
    """
    return {
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__EXECUTOR": executor,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": meta_url,
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
        "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",  # one DAG file; spare the 2 cores
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        "PYTHONPATH": str(ROOT),
    }


@dataclass(kw_only=True)
class AirflowProcesses:
    env: dict[str, str]
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, *args: str) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = (self.logs / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "airflow", *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )

    def start_local_stack(self, port: int, *, triggerer: bool = False) -> None:
        """``airflow db migrate``, then the api-server on 127.0.0.1:``port`` (waited for: tasks
        talk to its execution API), the scheduler and the dag-processor, and with ``triggerer``
        the triggerer (deferred tasks, and the event triggers of asset watchers)."""
        migrate = subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
        self.start("api-server", "api-server", "-H", "127.0.0.1", "-p", str(port))
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            self.wait("the API server", lambda: http.get("/api/v2/version").status_code == 200)
        self.start("scheduler", "scheduler")
        self.start("dag-processor", "dag-processor")
        if triggerer:
            self.start("triggerer", "triggerer")

    def tails(self, lines: int = 40) -> str:
        """The task logs that record an error, then the components' logs (ends of each): a
        failed task's reason comes first, before an assertion message is cut."""
        components = [
            f"----- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-lines:])
            for p in sorted(self.logs.glob("*.log"))
        ]
        return "\n".join([*self._failed_task_logs(lines), *components])

    def _failed_task_logs(self, lines: int) -> list[str]:
        home = Path(self.env.get("AIRFLOW_HOME", "")) / "logs"
        if not self.env.get("AIRFLOW_HOME") or not home.is_dir():
            return []
        found = []
        for path in sorted(home.rglob("*.log")):
            text = path.read_text(errors="replace")
            if '"level":"error"' in text.replace(" ", "") or "Traceback" in text:
                found.append(f"----- task log {path.relative_to(home)}\n" + "\n".join(text.splitlines()[-lines:]))
        return found

    def wait(self, what: str, fn: Callable[[], Any], timeout: float = 240) -> Any:
        """Poll ``fn`` every second until it returns something truthy (HTTP errors retried)."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
            if dead:
                raise AssertionError(f"Airflow processes exited: {dead}\n{self.tails()}")
            try:
                result = fn()
                if result:
                    return result
            except (httpx.HTTPError, KeyError, IndexError) as exc:
                last = exc
            time.sleep(1)
        raise AssertionError(f"timed out waiting for {what} ({last})\n{self.tails()}")

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


def trigger_and_wait(
    http: httpx.Client, dag_id: str, wait: Callable[[str, Callable[[], Any], float], Any], timeout: float
) -> tuple[str, str]:
    """Trigger ``dag_id`` over REST, wait (with ``wait(what, fn, timeout)``) until it ends: (run id, state)."""
    resp = http.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": {}})
    assert resp.status_code == 200, resp.text
    run_id = resp.json()["dag_run_id"]

    def finished() -> str | None:
        state = http.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").json()["state"]
        return state if state in ("success", "failed") else None

    return run_id, wait(f"run {run_id}", finished, timeout)
