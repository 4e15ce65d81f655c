"""The demo sync on a real Airflow cluster: CeleryExecutor, two workers, PostgreSQL, Redis.

Everything runs on this machine as separate processes, as docker-compose.yaml runs them in
containers: ``airflow db migrate`` into a fresh PostgreSQL database, then api-server,
scheduler, dag-processor, triggerer and two ``airflow celery worker`` processes (each with its
own hostname) on a dedicated Redis database as broker; Tributary's state and run log go to a
second fresh PostgreSQL database. The test triggers ``sync_web_demo`` through the REST API,
waits for it, and checks that mapped tasks ran on both workers and that the index holds
exactly the chunks an in-process run of the same pipeline produces.

The components share no staging directory, as on separate hosts: each has its own
``TRIBUTARY_HOME`` (so its own default ``staging/``), and the staging area is a URL, in one
variant an S3 endpoint (moto's server on loopback, reached through an Airflow Connection given
as ``AIRFLOW_CONN_CLUSTER_S3``), in the other the PostgreSQL state database (``db:///``). A fetch
task on one worker writes what a parse task on the other reads; the test checks that nothing was
written under any component's local staging directory and that the run's staging is gone at the
end. The SQLite index is one file all components share (``TRIBUTARY_INDEX_PATH``): a real
multi-host deployment indexes into Elasticsearch, which the test does not need to prove the
staging path.

Deselect with ``-m "not cluster"``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import sqlalchemy as sa

from plugins.tributary_airflow.workers.preload import CELERY_EXTRA_CONFIG
from tests.conftest import ROOT
from tests.support.airflow_stack import component_env, trigger_and_wait
from tests.support.postgres import scratch_database
from tests.support.process_group import log_tails, stop_groups
from tests.support.s3 import S3Server, s3_server
from tests.support.server import free_port

pytestmark = [pytest.mark.cluster, pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

DAG_ID = "sync_web_demo"
WORKERS = ("tributary-worker-a", "tributary-worker-b")
BROKER_DB = 12  # Celery broker
BUDGET_DB = 13  # Tributary's shared budgets (TRIBUTARY_REDIS_URL)
RUN_TIMEOUT = 420.0  # a hang detector: the shared 2-core machine may run other stacks meanwhile
S3_CONN_ID = "cluster_s3"
# where the variants stage (the PostgreSQL one in the state database TRIBUTARY_STATE_URL names)
STAGING = {"s3": f"s3://{S3_CONN_ID}@tributary-staging/cluster", "postgres": "db:///cluster-staging"}


def _sources_yaml(site_url: str) -> str:
    # The demo source, unscheduled (runs only when triggered) and cut into small batches so
    # that the mapped tasks outnumber the workers.
    return f"""\
sources:
  - kind: web
    name: demo
    schedule: null
    options:
      seeds: ["{site_url}"]
      scope: host
      max_pages: 50
      delay_seconds: 0
      allowlist: ["127.0.0.1"]
    chunker:
      name: token
      options: {{chunk_token_num: 64}}
    index: {{backend: sqlite, name: tributary}}
    batch_size: 2
"""


@dataclass
class Cluster:
    base_url: str
    env: dict[str, str]
    logs: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # set: every component gets its own TRIBUTARY_HOME, homes/<name> (no shared local staging)
    homes: Path | None = None
    staging_url: str = ""
    s3: S3Server | None = None

    def home(self, name: str) -> Path | None:
        return self.homes / name if self.homes else None

    def start(self, name: str, *args: str, extra_env: dict[str, str] | None = None) -> None:
        log = (self.logs / f"{name}.log").open("wb")
        home = self.home(name)
        own = {"TRIBUTARY_HOME": str(home)} if home else {}
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "airflow", *args],
            env={**self.env, **own, **(extra_env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,  # own process group: stopping it reaches its children
        )

    def check_alive(self) -> None:
        dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
        if dead:
            raise AssertionError(f"cluster processes exited: {dead}\n{self.tails()}")

    def tails(self, lines: int = 25) -> str:
        return log_tails(self.logs, lines)

    def stop(self) -> None:
        stop_groups(self.procs, grace=10)


_T0 = time.monotonic()


def _log(msg: str) -> None:
    """Progress with elapsed time (shown by pytest -s, or in the captured output on failure)."""
    print(f"[cluster +{time.monotonic() - _T0:6.1f}s] {msg}", flush=True)


def _wait(what: str, cluster: Cluster, fn: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        cluster.check_alive()
        try:
            result = fn()
            if result:
                return result
        except (httpx.HTTPError, KeyError) as exc:
            last = exc
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what} ({last})\n{cluster.tails()}")


@pytest.fixture(scope="module")
def demo_site() -> Iterator[str]:
    from plugins.tributary_airflow.demo.serve import SITE, serve_directory

    server, thread = serve_directory(SITE)
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    thread.join(timeout=10)


def _staging_env(variant: str, request: pytest.FixtureRequest) -> tuple[dict[str, str], S3Server | None]:
    """TRIBUTARY_STAGING_URL of a variant, and for S3 the Airflow Connection naming the server."""
    env = {"TRIBUTARY_STAGING_URL": STAGING[variant]}
    if variant != "s3":
        return env, None
    s3: S3Server = request.getfixturevalue("s3")
    return {**env, **s3.connection_env(S3_CONN_ID)}, s3


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest.fixture(scope="module", params=["s3", "postgres"])
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, demo_site: str
) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp(f"cluster-{request.param}")
    exits = contextlib.ExitStack()
    meta_url = exits.enter_context(scratch_database("tributary_airflow"))
    state_url = exits.enter_context(scratch_database("tributary_state"))
    staging_env, s3 = _staging_env(request.param, request)
    broker = redis.Redis(host="127.0.0.1", port=6379, db=BROKER_DB)
    budgets = redis.Redis(host="127.0.0.1", port=6379, db=BUDGET_DB)
    broker.flushdb()
    budgets.flushdb()
    (root / "sources.yaml").write_text(_sources_yaml(demo_site))
    (root / "logs").mkdir()
    port = free_port()
    env = {
        **os.environ,
        **component_env(airflow_home=root / "airflow", meta_url=meta_url, port=port, executor="CeleryExecutor"),
        "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:6379/{BROKER_DB}",
        "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{meta_url}",
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
        # the deployment's worker preload (docker-compose.yaml): task processes fork from it
        "AIRFLOW__CELERY__EXTRA_CELERY_CONFIG": json.dumps(CELERY_EXTRA_CONFIG),
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        # seven Airflow processes on 2 cores: the api-server may take longer than the default 5 s
        # to answer a task's execution-API call (seen: discover killed on a ReadTimeout)
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": "tests.cluster.hostname.worker_hostname",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(root / "airflow" / "logs"),
        "TRIBUTARY_HOME": str(root / "homes" / "cli"),  # each component gets its own (Cluster.start)
        "TRIBUTARY_STATE_URL": state_url,
        # one SQLite index file for all (a multi-host deployment uses Elasticsearch)
        "TRIBUTARY_INDEX_PATH": str(root / "index.db"),
        "TRIBUTARY_SOURCES": str(root / "sources.yaml"),
        "TRIBUTARY_REDIS_URL": f"redis://127.0.0.1:6379/{BUDGET_DB}",
        "TRIBUTARY_TASK_RETRIES": "0",
        **staging_env,
    }
    env.pop("TRIBUTARY_CLUSTER_HOSTNAME", None)
    env.pop("TRIBUTARY_STAGING_DIR", None)  # each home's staging/ (which must stay empty)
    cluster = Cluster(
        f"http://127.0.0.1:{port}", env, root / "logs", homes=root / "homes", staging_url=STAGING[request.param], s3=s3
    )
    started = time.monotonic()
    try:
        _start_components(cluster, port)
        yield cluster
    finally:
        cluster.stop()
        exits.close()
        broker.flushdb()
        budgets.flushdb()
        broker.close()
        budgets.close()
        _log(f"{request.param} variant: {time.monotonic() - started:.1f} s from migrate to stopped")


def _start_components(cluster: Cluster, port: int) -> None:
    migrate = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
    _log("metadata DB migrated")
    cluster.start("api-server", "api-server", "-H", "127.0.0.1", "-p", str(port))
    cluster.start("scheduler", "scheduler")
    cluster.start("dag-processor", "dag-processor")
    # --skip-serve-logs: no log server (it would bind every interface, and the two workers
    # would fight over its port); task logs are files under AIRFLOW_HOME on this machine
    cluster.start("triggerer", "triggerer", "--skip-serve-logs")
    for name in WORKERS:
        cluster.start(
            name,
            "celery",
            "worker",
            "--celery-hostname",
            f"{name}@%h",
            "--skip-serve-logs",
            extra_env={"TRIBUTARY_CLUSTER_HOSTNAME": name},
        )
    _log("components started")


def _reference_chunks(demo_site: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The same source synced in-process (embedded defaults): the chunks the cluster must hold."""
    from include.config import load_sources
    from include.index.sqlite_fts import SqliteFtsIndex
    from plugins.connectors.base import validate_source_options
    from plugins.engine.runner import run_pipeline

    sources = tmp_path / "sources.yaml"
    sources.write_text(_sources_yaml(demo_site))
    monkeypatch.setenv("TRIBUTARY_HOME", str(tmp_path / "ref"))
    for var in (
        "TRIBUTARY_STATE_URL",
        "TRIBUTARY_INDEX_PATH",
        "TRIBUTARY_STAGING_DIR",
        "TRIBUTARY_STAGING_URL",
        "TRIBUTARY_REDIS_URL",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(sources))
    [source] = load_sources(sources, validate_source_options)
    summary = run_pipeline(source)
    assert summary.status == "success", summary
    index = SqliteFtsIndex(tmp_path / "ref" / "index.db", index_name="tributary")
    try:
        return {cid: index.get_chunk(cid)["text_hash"] for cid in index.chunk_ids()}  # type: ignore[index]
    finally:
        index.close()


def test_demo_sync_runs_on_both_celery_workers(
    cluster: Cluster, demo_site: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _reference_chunks(demo_site, tmp_path, monkeypatch)
    assert len(expected) > 5
    _log(f"reference run: {len(expected)} chunks")

    http = httpx.Client(base_url=cluster.base_url, timeout=30)
    _wait("the API server", cluster, lambda: http.get("/api/v2/version").status_code == 200, 120)
    token = http.get("/auth/token").json()["access_token"]
    http.headers["Authorization"] = f"Bearer {token}"
    _log("API server up")
    _wait(f"{DAG_ID} to be parsed", cluster, lambda: http.get(f"/api/v2/dags/{DAG_ID}").status_code == 200, 120)
    _log("DAG parsed")

    run_id, state = trigger_and_wait(http, DAG_ID, lambda what, fn, t: _wait(what, cluster, fn, t), RUN_TIMEOUT)
    _log(f"run {run_id}: {state}")
    tis = http.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances", params={"limit": 200}).json()
    table = sorted((t["task_id"], t["map_index"], t["state"], t["hostname"]) for t in tis["task_instances"])
    assert state == "success", f"{table}\n{cluster.tails()}"

    # every task succeeded; the mapped ones were spread over both workers
    assert {t[2] for t in table} == {"success"}, table
    mapped = [t for t in table if t[1] >= 0]
    assert {t[0] for t in mapped} == {"fetch", "parse", "chunk", "upsert"}
    assert len(mapped) >= 8, table
    assert {t[3] for t in mapped} == set(WORKERS), table
    assert {t[3] for t in table} <= set(WORKERS), table
    # so tasks on one worker read what the other wrote: discover ran on one of them, and mapped
    # tasks on both read its plan and batch manifests

    # the index holds exactly the chunks of the in-process reference run
    from include.index.sqlite_fts import SqliteFtsIndex
    from include.stores import open_state_store

    index = SqliteFtsIndex(cluster.env["TRIBUTARY_INDEX_PATH"], index_name="tributary")
    try:
        got = {cid: index.get_chunk(cid)["text_hash"] for cid in index.chunk_ids()}  # type: ignore[index]
    finally:
        index.close()
    assert got == expected

    # staging was shared through the URL only: no component wrote to its local staging/, and
    # the run's staging is gone (the web source keeps no raw bytes)
    for name in cluster.procs:
        home = cluster.home(name)
        assert home is not None
        local = [p for p in (home / "staging").rglob("*") if p.is_file()] if (home / "staging").exists() else []
        assert local == [], (name, local)
    assert _staging_left(cluster) == []

    # the run log on PostgreSQL recorded the run as a success
    store = open_state_store(cluster.env["TRIBUTARY_STATE_URL"])
    try:
        run = store.get_run(run_id)
        items = store.run_items(run_id)
    finally:
        store.close()
    assert run is not None and run["status"] == "success", run
    # the documents' bytes went through the shared staging area
    staged = {item["staged_path"] for item in items if item["staged_path"]}
    assert staged and all(path.startswith(cluster.staging_url + "/") for path in staged), staged


def _staging_left(cluster: Cluster) -> list[str]:
    """What is left in the cluster's staging area (read around the code under test)."""
    if cluster.s3 is not None:
        return cluster.s3.keys(cluster.staging_url.split("/", 3)[3] + "/")
    engine = sa.create_engine(cluster.env["TRIBUTARY_STATE_URL"])
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT location FROM tributary_staging")).scalars().all()
    finally:
        engine.dispose()
    return sorted(rows)
