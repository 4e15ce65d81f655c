"""The Airflow path at scale: a 10,000-page web sync on scheduler + CeleryExecutor vs the CLI.

One generated site (``benchmarks/_cluster_site.py``: pages of PostgreSQL's manual, 3-20 KB,
linked as a tree) served by real nginx; for each batch size tried, one web source
``bench_b<N>`` crawls all of it:

- **A, in-process** (the peer): ``python -m plugins.engine.cli sync web:bench_b<N>`` in a child
  process with a fresh ``TRIBUTARY_HOME`` (SQLite state and index); the whole process timed.
- **B, cluster**: the same source as its DAG on a real cluster (``benchmarks/_cluster_stack.py``:
  PostgreSQL metadata and Tributary state, Redis broker and budgets, two Celery workers),
  triggered through ``POST /api/v2/dags/{id}/dagRuns`` and timed from that request to the DAG
  run's ``end_date``; cluster start-up is not in it. The index is one SQLite file both
  workers write (``TRIBUTARY_INDEX_PATH``).

Per-document overhead = (B - A) / pages. B's index must hold the same chunk ids as A's.
Every A runs before the cluster starts, so no idle Airflow component takes CPU from it.
The goal (issue 24): overhead <= 5 ms per document at the smallest batch size that meets it.

    .venv-bench/bin/python -m benchmarks cluster [--quick] --no-readme
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from benchmarks._cluster_site import SiteInfo, build_site
from benchmarks._cluster_stack import ROOT, WORKERS, ClusterStack, RssSampler, cluster_env, cpu_seconds, start_cluster

PAGES, QUICK_PAGES = 10_000, 1_000
BATCHES: tuple[int, ...] = (250, 1000)
QUICK_BATCHES: tuple[int, ...] = (100, 250)
GOAL_SPEEDUP = 1.2  # issue 36, point 6: the cluster's rate over the in-process serial rate, at GOAL_BATCH
GOAL_BATCH = 1000
WARMUP, WARMUP_PAGES = "bench_warmup", 30  # one untimed small run first: a deployed cluster is warm
BROKER_DB, BUDGET_DB = 10, 11  # Redis databases given to this benchmark
CONCURRENCY = 2  # Celery pool size per worker
CRAWL_CONCURRENCY = 8
RUN_TIMEOUT = 1500.0
MB = 1024 * 1024


def _source_name(batch: int) -> str:
    return f"bench_b{batch}"


def _sources_yaml(base: str, pages: int, batches: tuple[int, ...]) -> str:
    entries = []
    runs = [(_source_name(b), pages + 100, b) for b in batches] + [(WARMUP, WARMUP_PAGES, 10)]
    for name, max_pages, batch in runs:
        entries.append(f"""\
  - kind: web
    name: {name}
    schedule: null
    options:
      seeds: ["{base}/"]
      scope: host
      max_pages: {max_pages}
      delay_seconds: 0
      concurrency: {CRAWL_CONCURRENCY}
      use_sitemaps: false
      retries: 1
      log_every: 1000
      allowlist: ["127.0.0.1"]
    chunker:
      name: token
      options: {{chunk_token_num: 256}}
    index: {{backend: sqlite, name: {name}}}
    batch_size: {batch}
""")
    return "sources:\n" + "".join(entries)


@dataclass(frozen=True, slots=True)
class IndexTally:
    docs: int
    chunks: int
    chunk_ids: frozenset[str]
    content: frozenset[tuple[str, int, str]]  # (page, sequence, text hash): comparable across sources


def _tally(index_path: Path, name: str) -> IndexTally:
    db = sqlite3.connect(f"file:{index_path}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT chunk_id, doc_id, item_key, seq, text_hash FROM chunks WHERE index_name = ?",
            (name,),
        ).fetchall()
    finally:
        db.close()
    return IndexTally(
        docs=len({r[1] for r in rows}),
        chunks=len(rows),
        chunk_ids=frozenset(r[0] for r in rows),
        content=frozenset((r[2], r[3], r[4]) for r in rows),
    )


# ------------------------------------------------------------------------------------ run A
@dataclass(frozen=True, slots=True)
class InProcess:
    batch: int
    wall: float
    counts: dict[str, Any]
    peak_rss: int
    tally: IndexTally
    max_load: float
    cpu_s: float  # user + system of the CLI process (and any child it reaped)


def _plain_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TRIBUTARY_"))}


def run_in_process(work: Path, sources: Path, batch: int, tag: str = "") -> InProcess:
    """``plugins.engine.cli sync`` in a fresh TRIBUTARY_HOME; the whole child process timed."""
    home = work / f"a{tag}-{batch}"
    env = {**_plain_env(), "TRIBUTARY_HOME": str(home), "TRIBUTARY_SOURCES": str(sources), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "plugins.engine.cli", "sync", f"web:{_source_name(batch)}", "--json"]
    log = (work / f"a{tag}-{batch}.log").open("wb")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=log)
    with RssSampler({"cli": proc.pid}) as sampler:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(
            f"in-process sync failed ({proc.returncode}):\n{(work / f'a{tag}-{batch}.log').read_text()[-3000:]}"
        )
    summary = json.loads(out)
    tally = _tally(home / "index.db", _source_name(batch))
    return InProcess(batch, wall, summary["counts"], sampler.peaks["cli"].tree_rss, tally, sampler.max_load, cpu)


# ------------------------------------------------------------------------------------ run B
@dataclass(frozen=True, slots=True)
class ClusterRun:
    batch: int
    run_id: str
    state: str
    wall: float
    tasks: list[dict[str, Any]]
    peaks: dict[str, Any]
    tally: IndexTally
    max_load: float
    cpu_s: float  # user + system of every cluster process (task processes included) during the run


def _when(stamp: str | None) -> float | None:
    return dt.datetime.fromisoformat(stamp).timestamp() if stamp else None


def _task_instances(stack: ClusterStack, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    """Every task instance of the run (mapped ones included), page by page (the API caps a page)."""
    http, out, offset = stack.api(), [], 0
    while True:
        page = http.get(
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 100, "offset": offset}
        ).json()
        out.extend(page["task_instances"])
        offset += len(page["task_instances"])
        if not page["task_instances"] or offset >= page["total_entries"]:
            return out


def run_on_cluster(stack: ClusterStack, batch: int, name: str | None = None) -> ClusterRun:
    """Trigger the source's DAG over REST; wall = trigger request -> the run's end_date."""
    http, dag_id = stack.api(), f"sync_web_{name or _source_name(batch)}"
    cpu_before = cpu_seconds(stack.all_pids())
    with RssSampler(stack.worker_pids()) as sampler:
        start = time.time()
        resp = http.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": {}})
        if resp.status_code != 200:
            raise RuntimeError(f"trigger refused: {resp.status_code} {resp.text}")
        run_id = resp.json()["dag_run_id"]

        def ended() -> dict[str, Any] | None:
            run = http.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").json()
            return run if run["state"] in ("success", "failed") else None

        run = stack.wait(f"run {run_id}", ended, RUN_TIMEOUT, every=0.5)
    end = _when(run.get("end_date")) or time.time()
    cpu = cpu_seconds(stack.all_pids()) - cpu_before
    tasks = _task_instances(stack, dag_id, run_id)
    peaks = {name: sampler.peaks[name] for name in WORKERS}
    tally = _tally(Path(stack.env["TRIBUTARY_INDEX_PATH"]), name or _source_name(batch))
    return ClusterRun(batch, run_id, run["state"], end - start, tasks, peaks, tally, sampler.max_load, cpu)


def _task_stats(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """Task count, states, per-worker count, summed run time, mean wait from queued to running."""
    states: dict[str, int] = {}
    hosts: dict[str, int] = {}
    busy, waits = 0.0, []
    for t in tasks:
        states[t["state"]] = states.get(t["state"], 0) + 1
        hosts[t.get("hostname") or "?"] = hosts.get(t.get("hostname") or "?", 0) + 1
        busy += t.get("duration") or 0.0
        queued, started = _when(t.get("queued_when")), _when(t.get("start_date"))
        if queued and started:
            waits.append(started - queued)
    return {
        "count": len(tasks),
        "states": states,
        "hosts": hosts,
        "busy_s": busy,
        "mean_wait_s": sum(waits) / len(waits) if waits else 0.0,
    }


# ----------------------------------------------------------------------------------- report
def _row_b(a: list[InProcess], b: ClusterRun, pages: int) -> dict[str, Any]:
    """B against the mean of the A runs of its batch size (one before the cluster, one after)."""
    stats = _task_stats(b.tasks)
    a_wall = sum(x.wall for x in a) / len(a)
    a_cpu = sum(x.cpu_s for x in a) / len(a)
    overhead_ms = 1000 * (b.wall - a_wall) / pages
    same = all(x.tally.chunk_ids == b.tally.chunk_ids for x in a)
    workers = " · ".join(
        f"{name.rsplit('-', 1)[-1]}: {b.peaks[name].tree_rss / MB:.0f} (max proc {b.peaks[name].process_hwm / MB:.0f})"
        for name in WORKERS
    )
    return {"batch_size": b.batch, "pages": pages, "batches": -(-pages // b.batch), "run": "B: Celery cluster",
         "wall_s": round(b.wall, 1), "speedup_vs_A": round(a_wall / b.wall, 3), "cpu_s": round(b.cpu_s, 1),
         "cpu_vs_A": round(b.cpu_s / a_cpu, 2) if a_cpu else "", "task_instances": stats["count"],
         "docs": b.tally.docs, "chunks": b.tally.chunks, "same_chunks_as_A": "yes" if same else "NO",
         "overhead_ms_per_doc": round(overhead_ms, 2), "task_busy_s": round(stats["busy_s"], 1),
         "extra_busy_per_task_s": round((stats["busy_s"] - a_wall) / max(1, stats["count"]), 2),
         "mean_queue_wait_s": round(stats["mean_wait_s"], 2), "tasks_per_worker": json.dumps(stats["hosts"]),
         "peak_rss_mb": f"tree/worker {workers}", "max_load_1m": round(b.max_load, 1)}  # fmt: skip


def _row_a(a: InProcess, pages: int, when: str) -> dict[str, Any]:
    return {"batch_size": a.batch, "pages": pages, "batches": -(-pages // a.batch), "run": f"A: CLI in-process, {when}",
            "wall_s": round(a.wall, 1), "cpu_s": round(a.cpu_s, 1), "task_instances": "", "docs": a.tally.docs,
            "chunks": a.tally.chunks, "same_chunks_as_A": "", "overhead_ms_per_doc": "",
            "peak_rss_mb": f"{a.peak_rss / MB:.0f}", "max_load_1m": round(a.max_load, 1)}  # fmt: skip


def _verdict(rows: list[dict[str, Any]]) -> str:
    cluster = [r for r in rows if r["run"].startswith("B")]
    tried = ", ".join(f"{r['batch_size']}: {r['speedup_vs_A']}x, {r['overhead_ms_per_doc']} ms/doc" for r in cluster)
    at_goal = [r for r in cluster if r["batch_size"] == GOAL_BATCH]
    if not at_goal:
        return f"Batch size {GOAL_BATCH} not tried ({tried}): the speed-up goal is not judged."
    r = at_goal[0]
    met = r["speedup_vs_A"] >= GOAL_SPEEDUP and r["same_chunks_as_A"] == "yes"
    return (
        f"Goal (cluster >= {GOAL_SPEEDUP}x the in-process rate at batch size {GOAL_BATCH}) "
        f"{'met' if met else 'NOT met'}: {r['speedup_vs_A']}x ({tried})."
    )


def _summary(site: SiteInfo, rows: list[dict[str, Any]], startup: float, warmup: float, quick: bool) -> str:
    return (
        f"{'Quick run. ' if quick else ''}{site.pages} generated pages ({site.total_bytes / MB:.0f} MB, "
        f"{site.min_bytes / 1000:.1f}-{site.max_bytes / 1000:.1f} kB each, PostgreSQL manual paragraphs) on nginx "
        f"127.0.0.1; crawl concurrency {CRAWL_CONCURRENCY}, delay 0, token chunker 256. A = whole "
        "`python -m plugins.engine.cli sync` process (SQLite state and index, one process, parse workers off: "
        "the serial rate), for each batch size, once before the cluster starts and once after it stopped (no "
        "Airflow component running either time); B is set against their mean and its chunk ids compared with "
        "both. B = REST trigger to the DAG run's end_date on api-server + scheduler + dag-processor + triggerer + "
        f"2 Celery workers (pool {CONCURRENCY} each), PostgreSQL metadata and state, Redis broker and budgets, "
        f'SQLite index both workers write, the deployment\'s worker settings (README, "Distributed deployment"); cluster '
        f"start-up ({startup:.0f} s, migrate included) and one untimed warm-up run of {WARMUP_PAGES} pages "
        f"({warmup:.0f} s) not counted. speedup_vs_A = A's mean wall / B's wall. cpu_s: A = the CLI process's "
        "user + system seconds; B = every cluster process's (task processes included) over the run. "
        f"Overhead = (B - A) / pages. {_verdict(rows)} Peak RSS per worker: largest sum of RSS over the worker's "
        "process tree (Celery main, pool and task processes; shared pages counted per process), and the largest "
        "single process's VmHWM, sampled every 0.25 s. task_busy_s sums the task instances' durations; "
        "extra_busy_per_task_s = (task_busy_s - A's wall) / task instances; mean_queue_wait_s is queued to "
        "running. One 2-core machine for every component, shared with other work: max_load_1m is the highest "
        "1-minute load average seen during the run."
    )


@contextlib.contextmanager
def _redis_dbs() -> Any:
    dbs = [redis.Redis(host="127.0.0.1", port=6379, db=n) for n in (BROKER_DB, BUDGET_DB)]
    for db in dbs:
        db.flushdb()
    try:
        yield
    finally:
        for db in dbs:
            db.flushdb()
            db.close()


def _measure(work: Path, base: str, site: SiteInfo, batches: tuple[int, ...], quick: bool) -> dict[str, Any]:
    sources = work / "sources.yaml"
    sources.write_text(_sources_yaml(base, site.pages, batches))
    # One A per batch size: the in-process pipeline's speed depends on it too (batches it overlaps,
    # index transactions), so each B is set against the CLI with the very same source entry.
    in_process = {b: [run_in_process(work, sources, b)] for b in batches}
    rows = [_row_a(a[0], site.pages, "before the cluster") for a in in_process.values()]
    for row in rows:
        print(f"cluster benchmark: {row}", file=sys.stderr, flush=True)
    cluster_rows, startup, warmup = _cluster_runs(work, sources, batches)
    # A again once the cluster is down: the machine is shared, so B is set against A on both sides
    for b in batches:
        in_process[b].append(run_in_process(work, sources, b, tag="2"))
        rows.append(_row_a(in_process[b][1], site.pages, "after the cluster"))
        print(f"cluster benchmark: {rows[-1]}", file=sys.stderr, flush=True)
    for b, run_b in cluster_rows.items():
        rows.append(_row_b(in_process[b], run_b, site.pages))
        print(f"cluster benchmark: {rows[-1]}", file=sys.stderr, flush=True)
    return {"rows": rows, "summary": _summary(site, rows, startup, warmup, quick)}


def _cluster_runs(work: Path, sources: Path, batches: tuple[int, ...]) -> tuple[dict[int, ClusterRun], float, float]:
    """Start the cluster, run the untimed warm-up, then each batch size's DAG once; the runs,
    the start-up and the warm-up's seconds."""
    from tests.support.postgres import scratch_database
    from tests.support.server import free_port

    runs: dict[int, ClusterRun] = {}
    with _redis_dbs(), scratch_database("bench_airflow") as meta, scratch_database("bench_state") as state:
        port = free_port()
        env = cluster_env(home=work / "b", meta_url=meta, state_url=state, port=port, sources=sources,
                          broker_db=BROKER_DB, budget_db=BUDGET_DB, concurrency=CONCURRENCY)  # fmt: skip
        started = time.perf_counter()
        dag_ids = [f"sync_web_{_source_name(b)}" for b in batches] + [f"sync_web_{WARMUP}"]
        with start_cluster(env, port, work / "b" / "logs", dag_ids) as stack:
            startup = time.perf_counter() - started
            warm = run_on_cluster(stack, 10, WARMUP)
            if warm.state != "success":
                raise RuntimeError(f"warm-up run {warm.run_id} {warm.state}\n{stack.tails()}")
            for batch in batches:
                b = run_on_cluster(stack, batch)
                if b.state != "success":
                    raise RuntimeError(f"cluster run {b.run_id} {b.state}: {_task_stats(b.tasks)}\n{stack.tails()}")
                runs[batch] = b
    return runs, startup, warm.wall


def run(quick: bool = False) -> dict[str, Any]:
    from tests.web.nginx import nginx_binary, serve_nginx

    if nginx_binary() is None:
        raise RuntimeError("nginx is required: apt-get install nginx-light")
    pages, batches = (QUICK_PAGES, QUICK_BATCHES) if quick else (PAGES, BATCHES)
    if os.environ.get("BENCH_CLUSTER_BATCHES"):  # e.g. "250,1000,2500": other batch sizes to try
        batches = tuple(int(b) for b in os.environ["BENCH_CLUSTER_BATCHES"].split(","))
    work = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    keep = os.environ.get("BENCH_KEEP_WORK") == "1"  # keep logs and indexes to look at afterwards
    try:
        site = build_site(work / "site", pages)
        with serve_nginx(work / "site", work / "nginx") as server:
            result = _measure(work, server.base, site, batches, quick)
    except BaseException:
        keep = True
        print(f"cluster benchmark failed; its files are kept in {work}", file=sys.stderr)
        raise
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return {
        "title": f"Airflow cluster path: {pages:,}-page web sync, CeleryExecutor vs in-process CLI",
        "peer": "the in-process CLI sync (python -m plugins.engine.cli sync) of the same site",
        **result,
    }


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2, default=str))
