"""Run Airflow CLI commands one after another in one process, for tests/reliability/test_crash_airflow.py.

``python -m tests.reliability._airflow_driver`` reads a JSON list of jobs on stdin; each job is an
``airflow`` argv (``["dags", "test", ...]``, ``["tasks", "clear", ...]``, ``["tasks", "test", ...]``)
with the TRIBUTARY_HOME and sources file it runs against. The argv goes through Airflow's own CLI
parser and command function, exactly as ``airflow <argv>`` would run it; sharing one process only
saves the interpreter start-up and Airflow's in-process execution API set-up (~8 s a command).
After each job one line ``RESULT <json>`` reports the newest DAG run, its task instances, and a
snapshot of the index, item state and run log (computed here, so between two jobs).

A job with ``"fork": true`` (the runs a failpoint kills) runs in a child forked from this process
with the job's ``env`` added: the same CLI command in a process of its own, which the SIGKILL ends
as it ends ``airflow dags test``, without the 5-6 s that a fresh interpreter spends importing
Airflow and building the in-process execution API (the child builds only the API's transport,
whose event-loop thread did not survive the fork). Its exit is reported as a return code (minus
the signal number, as ``subprocess`` does) with its output.

The snapshot helpers are also what the test compares with.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

SOURCE = "files:crash"
DAG_ID = "sync_files_crash"
MARK = "RESULT "


def snapshot(home: Path) -> dict[str, Any]:
    """Index (chunk id -> text, raw row counts) and item state of the source, from the files on disk."""
    from include.index.sqlite_fts import SqliteFtsIndex
    from include.stores import open_state_store

    index = SqliteFtsIndex(home / "index.db")
    try:
        chunks = {cid: index.get_chunk(cid)["text"] for cid in sorted(index.chunk_ids(source=SOURCE))}
    finally:
        index.close()
    db = sqlite3.connect(home / "index.db")
    try:
        # chunk_ids() is a set: duplicate rows, and full-text rows orphaned by a killed write, show only here
        rows = db.execute("SELECT COUNT(*) FROM chunks WHERE source = ?", (SOURCE,)).fetchone()[0]
        fts_rows = db.execute("SELECT COUNT(*) FROM chunks_fts").fetchone()[0]
    finally:
        db.close()
    store = open_state_store(f"sqlite:///{home / 'state.db'}")
    try:
        state = {
            k: [s.version.content_hash if s.version else None, list(s.chunk_ids), s.failure_count]
            for k, s in sorted(store.items(SOURCE).items())
        }
    finally:
        store.close()
    return {"chunks": chunks, "state": state, "rows": rows, "fts_rows": fts_rows}


def run_log(home: Path, run_id: str) -> dict[str, Any]:
    """The run-log row of one run (status, counts, error) with its lineage rows."""
    from include.stores import open_state_store

    store = open_state_store(f"sqlite:///{home / 'state.db'}")
    try:
        run = store.get_run(run_id, SOURCE)
        if run is None:
            return {}
        items = store.run_items(run_id, source=SOURCE)
        return {
            "status": run["status"],
            "counts": run.get("counts") or {},
            "error": run.get("error"),
            "items": {i["item_key"]: i["action"] for i in items},
            "lineage_rows": len(items),
        }
    finally:
        store.close()


def dag_run(dag_id: str = DAG_ID, run_id: str | None = None) -> dict[str, Any]:
    """The newest (or the named) DAG run and its task instances, as the metadata DB has them."""
    import sqlalchemy as sa
    from airflow.configuration import conf

    engine = sa.create_engine(conf.get("database", "sql_alchemy_conn"))
    try:
        with engine.connect() as conn:
            where = "run_id = :r" if run_id else "1 = 1"
            run = conn.execute(
                sa.text(
                    f"SELECT run_id, state, logical_date FROM dag_run WHERE dag_id = :d AND {where} ORDER BY id DESC LIMIT 1"
                ),
                {"d": dag_id, "r": run_id},
            ).one_or_none()
            if run is None:
                return {}
            rows = conn.execute(
                sa.text(
                    "SELECT task_id, map_index, state, try_number FROM task_instance WHERE dag_id = :d AND run_id = :r"
                ),
                {"d": dag_id, "r": run[0]},
            ).all()
    finally:
        engine.dispose()
    return {
        "run_id": run[0],
        "state": run[1],
        "logical_date": str(run[2]),
        "tis": {(t if m < 0 else f"{t}[{m}]"): s for t, m, s, _ in rows},
    }


def _run_cli(argv: list[str]) -> int:
    from airflow.cli.cli_parser import get_parser

    args = get_parser().parse_args(argv)
    try:
        args.func(args)
    except SystemExit as exc:  # `dags test` exits 1 ("DagRun failed") when the run failed
        return 0 if exc.code in (None, 0) else 1
    return 0


_DEAD_TRANSPORTS: list[Any] = []  # kept, never collected: their finalizer would wait on a dead loop


def _after_fork() -> None:
    """In the forked child: no connection of the parent's pool is used, and the in-process API
    gets a new transport (the parent's loop thread is not in this process)."""
    from airflow import settings
    from airflow.sdk.execution_time.supervisor import in_process_api_server

    if settings.engine is not None:
        settings.engine.dispose(close=False)  # SQLAlchemy's rule for os.fork(): new connections here
    api = in_process_api_server()  # its transport was built by _warm_api before the fork
    # an attrs slotted class: the cached property lives in a slot of its name
    _DEAD_TRANSPORTS.append(object.__getattribute__(api, "transport"))
    object.__delattr__(api, "transport")


@functools.cache
def _warm_api() -> None:
    """Build the in-process execution API and have it answer one request here, before any fork:
    building the app takes ~1.2 s and its first request ~3 s (whatever the path), which every
    child of a driver that has run no command yet would otherwise pay again."""
    import httpx
    from airflow.sdk.execution_time.supervisor import in_process_api_server

    httpx.Client(transport=in_process_api_server().transport, base_url="http://in-process.invalid.").get("/")


def _run_forked(job: dict[str, Any]) -> tuple[int, str]:
    """The job's command in a forked child: (return code, or minus the signal; its output)."""
    _warm_api()
    with tempfile.TemporaryFile() as output:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: its output to the file, and never back into the parent's code
            code = 1
            try:
                os.dup2(output.fileno(), 1)
                os.dup2(output.fileno(), 2)
                os.environ.update(job.get("env", {}))
                _after_fork()
                code = _run_cli(job["argv"])
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        output.seek(0)
        text = output.read().decode(errors="replace")
    return (-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)), text


def main() -> None:
    jobs = json.load(sys.stdin)
    for job in jobs:
        os.environ["TRIBUTARY_HOME"] = job["home"]
        os.environ["TRIBUTARY_SOURCES"] = job["sources"]
        output, started = "", time.perf_counter()
        if job.get("fork"):
            code, output = _run_forked(job)
        else:
            code = _run_cli(job["argv"])
        run = dag_run(run_id=job.get("run_id"))
        home = Path(job["home"])
        result = {
            "argv": job["argv"],
            "exit": code,
            "output": output,
            "seconds": round(time.perf_counter() - started, 2),  # the command's, for a slow suite's diagnosis
            "dag_run": run,
            "snapshot": snapshot(home),
            "run_log": run_log(home, run["run_id"]) if run else {},
        }
        sys.stdout.write(MARK + json.dumps(result) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
