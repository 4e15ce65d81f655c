"""What a Celery task process costs before its step runs, with and without the worker preload.

A Celery worker's pool process forks one task process per task instance (Airflow's supervisor);
the child then does what this benchmark's child does: import the task runner, load Airflow's
plugins and listeners, parse the DAG file (``BundleDagBag``, as ``task_runner.parse``) and load
what the step needs (the tokenizer, for chunk). Measured here without Airflow's scheduler or API
server, in CPU seconds of the forked child (``RUSAGE_SELF`` read in it), so the figure holds on
a loaded machine:

- **cold**: the parent has only what Airflow's ``celery worker`` imports itself;
- **preloaded**: the parent ran :func:`plugins.tributary_airflow.workers.preload.preload` first
  (what ``AIRFLOW__CELERY__EXTRA_CELERY_CONFIG`` makes each worker do), as the deployment runs.

Each variant runs in its own fresh interpreter (one parent per variant, ``ROUNDS`` forks each).

    python -m benchmarks cluster_startup --no-readme
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ROUNDS = 5

_SOURCES = """\
sources:
  - kind: web
    name: startup
    schedule: null
    options: {seeds: ["http://127.0.0.1:9/"], allowlist: ["127.0.0.1"]}
    chunker: {name: token, options: {chunk_token_num: 256}}
    index: {backend: sqlite, name: startup}
    batch_size: 1000
"""

# The parent imports what Airflow's celery worker has imported when it forks (its app module),
# optionally preloads, then forks ROUNDS children that each do a task's start-up and report it.
_PARENT = r"""
import json, os, resource, sys, time
import airflow.providers.celery.executors.celery_executor_utils  # the worker's own imports
import airflow.sdk.execution_time.supervisor
if sys.argv[1] == "preloaded":
    from plugins.tributary_airflow.workers.preload import preload
    preload()

def task_start():
    from airflow.sdk.definitions._internal.dag_parsing_context import _airflow_parsing_context_manager
    from airflow.sdk.execution_time import task_runner  # noqa: F401
    from airflow.sdk.listener import get_listener_manager
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag
    from plugins.chunkers.tokenizer import get_encoding
    get_listener_manager()
    bundle = DagBundlesManager().get_bundle(name="dags-folder", version=None)
    bundle.initialize()
    with _airflow_parsing_context_manager(dag_id="sync_web_startup", task_id="chunk"):
        bag = BundleDagBag(dag_folder=os.path.join(bundle.path, "tributary_sources.py"), safe_mode=False,
                           load_op_links=False, bundle_path=bundle.path, bundle_name="dags-folder")
    assert "sync_web_startup" in bag.dags, bag.import_errors
    get_encoding()

out = []
for _ in range(int(sys.argv[2])):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        task_start()
        c1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
        os.write(w, json.dumps({"cpu_s": cpu, "wall_s": time.perf_counter() - t0,
                                "modules": len(sys.modules)}).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    out.append(json.loads(data))
print(json.dumps({"parent_modules": len(sys.modules), "children": out}))
"""


def _variant(name: str, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", _PARENT, name, str(ROUNDS)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{proc.stderr[-3000:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    kids = data["children"]
    cpu = sorted(k["cpu_s"] for k in kids)
    wall = sorted(k["wall_s"] for k in kids)
    return {
        "variant": name,
        "forks": len(kids),
        "child_cpu_s_median": round(cpu[len(cpu) // 2], 3),
        "child_cpu_s_min": round(cpu[0], 3),
        "child_wall_s_median": round(wall[len(wall) // 2], 3),
        "modules_in_parent": data["parent_modules"],
        "modules_loaded_by_child": kids[0]["modules"] - data["parent_modules"],
        "max_load_1m": round(os.getloadavg()[0], 1),
    }


def run(quick: bool = False) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    (work / "sources.yaml").write_text(_SOURCES)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TRIBUTARY_"))}
    env = {
        **base,
        "PYTHONPATH": str(ROOT),
        "AIRFLOW_HOME": str(work / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "TRIBUTARY_HOME": str(work / "tributary"),
        "TRIBUTARY_SOURCES": str(work / "sources.yaml"),
    }
    rows = [_variant(name, env) for name in ("cold", "preloaded", "cold", "preloaded")]
    by = {n: [r["child_cpu_s_median"] for r in rows if r["variant"] == n] for n in ("cold", "preloaded")}
    cold, pre = min(by["cold"]), min(by["preloaded"])
    return {
        "title": "Celery task process start-up: cold fork vs a preloaded worker",
        "peer": "the same fork from a parent with only the Celery worker's own imports (cold)",
        "rows": rows,
        "summary": (
            f"{ROUNDS} forks per variant, variants interleaved (cold, preloaded, cold, preloaded), each in a fresh "
            "parent interpreter. The child does a task process's start-up: task runner import, Airflow's plugin "
            "scan and listeners, the DAG file parsed for its own DAG (BundleDagBag), the tokenizer. CPU seconds "
            f"of the child: cold {cold:.3f} s, preloaded {pre:.3f} s (best medians), "
            f"{cold - pre:.3f} s saved per task process."
        ),
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
