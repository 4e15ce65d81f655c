"""Airflow components (api-server, scheduler, dag-processor, workers) as test subprocesses.

Each component runs ``python -m airflow <args>`` in its own session with its output in
``logs/<name>.log``; :meth:`AirflowProcesses.wait` polls a condition and fails fast, with the
logs' tails, when a component dies. :func:`trigger_and_wait` runs a DAG through the REST API.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

__all__ = ["AirflowProcesses", "trigger_and_wait"]

ROOT = Path(__file__).resolve().parents[2]


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

    def tails(self, lines: int = 40) -> str:
        return "\n".join(
            f"----- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-lines:])
            for p in sorted(self.logs.glob("*.log"))
        )

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
