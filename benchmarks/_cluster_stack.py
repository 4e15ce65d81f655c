"""A real Airflow cluster on this machine for the cluster benchmark (processes, not containers).

``airflow db migrate`` into a fresh PostgreSQL database, then api-server, scheduler,
dag-processor, triggerer and two ``airflow celery worker`` processes, each with its own
hostname, on a Redis database as broker; as docker-compose.yaml runs them. The same set-up as
``tests/cluster/test_celery_cluster.py`` (which another change owns), written here for a
benchmark: it stays up across several DAG runs, samples each worker's memory while a run is
going, and reads the REST API's task instances page by page.

``worker_hostname`` is the ``[core] hostname_callable``: both workers share one host, so each
names itself from ``TRIBUTARY_CLUSTER_HOSTNAME`` and task instances record which one ran them.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.support.process_group import log_tails, stop_groups

__all__ = ["ClusterStack", "RssSampler", "cluster_env", "cpu_seconds", "start_cluster", "worker_hostname"]

ROOT = Path(__file__).resolve().parent.parent
WORKERS = ("bench-worker-a", "bench-worker-b")


def worker_hostname() -> str:
    return os.environ.get("TRIBUTARY_CLUSTER_HOSTNAME") or socket.getfqdn()


def worker_settings() -> dict[str, str]:
    """The deployment's task start-up settings (docker-compose.yaml's; README, "Distributed deployment")."""
    from plugins.tributary_airflow.workers.preload import CELERY_EXTRA_CONFIG

    return {"AIRFLOW__CELERY__EXTRA_CELERY_CONFIG": json.dumps(CELERY_EXTRA_CONFIG)}


def cluster_env(*, home: Path, meta_url: str, state_url: str, port: int, sources: Path, broker_db: int, budget_db: int,
                concurrency: int) -> dict[str, str]:  # fmt: skip
    """Settings every component shares: Airflow's (fresh API secrets) and Tributary's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TRIBUTARY_"))}
    return {
        **env,
        "AIRFLOW_HOME": str(home / "airflow"),
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": meta_url,
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": "benchmarks._cluster_stack.worker_hostname",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
        "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "airflow" / "logs"),
        "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:6379/{broker_db}",
        "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{meta_url}",
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(concurrency),
        **worker_settings(),
        # no more task instances of one DAG queued than the workers have slots (README, "Distributed
        # deployment"): the scheduler's priorities, not the broker's queue order, pick what runs next
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(len(WORKERS) * concurrency),
        "PYTHONPATH": str(ROOT),
        "TRIBUTARY_HOME": str(home / "tributary"),
        "TRIBUTARY_STATE_URL": state_url,
        "TRIBUTARY_INDEX_PATH": str(home / "tributary" / "index.db"),  # one file both workers see
        "TRIBUTARY_STAGING_DIR": str(home / "tributary" / "staging"),
        "TRIBUTARY_SOURCES": str(sources),
        "TRIBUTARY_REDIS_URL": f"redis://127.0.0.1:6379/{budget_db}",
        "TRIBUTARY_TASK_RETRIES": "0",  # a failure shows as a failure, not as a slower run
    }


@dataclass
class ClusterStack:
    base_url: str
    env: dict[str, str]
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    http: httpx.Client | None = None

    def start(self, name: str, *args: str, extra_env: dict[str, str] | None = None) -> None:
        log = (self.logs / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "airflow", *args],
            env={**self.env, **(extra_env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,  # own process group: stopping it reaches its children
        )

    def worker_pids(self) -> dict[str, int]:
        return {name: self.procs[name].pid for name in WORKERS}

    def all_pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]

    def tails(self, lines: int = 30) -> str:
        return log_tails(self.logs, lines)

    def wait(self, what: str, fn: Callable[[], Any], timeout: float, every: float = 1.0) -> Any:
        """Poll ``fn`` until truthy; fail fast with the logs' tails when a component died."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
            if dead:
                raise RuntimeError(f"cluster processes exited: {dead}\n{self.tails()}")
            try:
                result = fn()
                if result:
                    return result
            except (httpx.HTTPError, KeyError) as exc:
                last = exc
            time.sleep(every)
        raise RuntimeError(f"timed out waiting for {what} ({last})\n{self.tails()}")

    def api(self) -> httpx.Client:
        assert self.http is not None, "the API client is made by start_cluster"
        return self.http

    def stop(self) -> None:
        stop_groups(self.procs, grace=15)
        if self.http is not None:
            self.http.close()


def _launch(stack: ClusterStack, port: int) -> None:
    migrate = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env=stack.env, capture_output=True, text=True, timeout=400
    )
    if migrate.returncode != 0:
        raise RuntimeError("airflow db migrate failed:\n" + migrate.stdout[-3000:] + migrate.stderr[-3000:])
    stack.start("api-server", "api-server", "-H", "127.0.0.1", "-p", str(port))
    stack.start("scheduler", "scheduler")
    stack.start("dag-processor", "dag-processor")
    # --skip-serve-logs: no log server (it binds every interface and the workers would share its port)
    stack.start("triggerer", "triggerer", "--skip-serve-logs")
    for name in WORKERS:
        stack.start(name, "celery", "worker", "--celery-hostname", f"{name}@%h", "--skip-serve-logs",
                    extra_env={"TRIBUTARY_CLUSTER_HOSTNAME": name})  # fmt: skip


@contextlib.contextmanager
def start_cluster(env: dict[str, str], port: int, logs: Path, dag_ids: list[str]) -> Iterator[ClusterStack]:
    """The cluster up, its API authenticated and ``dag_ids`` parsed; stopped on exit."""
    logs.mkdir(parents=True, exist_ok=True)
    stack = ClusterStack(f"http://127.0.0.1:{port}", env, logs)
    try:
        _launch(stack, port)
        http = stack.http = httpx.Client(base_url=stack.base_url, timeout=60)
        stack.wait("the API server", lambda: http.get("/api/v2/version").status_code == 200, 180)
        http.headers["Authorization"] = f"Bearer {http.get('/auth/token').json()['access_token']}"
        parsed = lambda: all(http.get(f"/api/v2/dags/{d}").status_code == 200 for d in dag_ids)  # noqa: E731
        stack.wait(f"{', '.join(dag_ids)} parsed", parsed, 180)
        yield stack
    finally:
        stack.stop()


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of the process trees rooted at ``pids``: each live process's own,
    plus what its exited children (task processes, reaped) used. Sampled before and after a run,
    the difference is what the run cost these processes, whatever else loads the machine."""
    total = 0.0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                t = proc.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
    return total


@dataclass
class _Peak:
    tree_rss: int = 0  # largest sum of RSS over the worker and its children at one sample
    process_hwm: int = 0  # largest VmHWM (peak RSS) of any one process of the tree
    processes: int = 0  # most processes seen in the tree at one sample


class RssSampler:
    """Samples each worker's process tree every ``every`` s in a thread while in a ``with`` block.

    RSS sums count pages shared between the pool's forked children once per process, so the
    tree figure is an upper bound of what the worker holds; VmHWM is each process's own peak,
    read while it lives (a task process that grows in its last ``every`` s is seen short).
    """

    def __init__(self, pids: dict[str, int], every: float = 0.25) -> None:
        self.pids, self.every = pids, every
        self.peaks = {name: _Peak() for name in pids}
        self.max_load = 0.0  # highest 1-minute load average seen: the machine is shared
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            for name, pid in self.pids.items():
                self._sample(self.peaks[name], pid)
            self.max_load = max(self.max_load, os.getloadavg()[0])
            self._stop.wait(self.every)

    @staticmethod
    def _sample(peak: _Peak, pid: int) -> None:
        try:
            root = psutil.Process(pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        total = 0
        for proc in tree:
            with contextlib.suppress(psutil.Error, OSError, ValueError):
                total += proc.memory_info().rss
                peak.process_hwm = max(peak.process_hwm, _vm_hwm(proc.pid))
        peak.tree_rss = max(peak.tree_rss, total)
        peak.processes = max(peak.processes, len(tree))


def _vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0
