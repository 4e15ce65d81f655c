"""Tributary the way a user runs it: ``python -m plugins.engine.cli sync SOURCE`` in a fresh process.

The source is a ``kind: web`` entry in a sources file of its own (``TRIBUTARY_SOURCES``) and every
file the run keeps (state, index, staging, link cache) lives under a temporary
``TRIBUTARY_HOME``. ``--dry-run`` is the crawl alone: discovery downloads every page to find its
links and plans the run, then nothing is fetched again, parsed, chunked or indexed
(``plugins/engine/discover.py`` cuts no batches on a dry run; ``commit.py`` records only the
lineage of what would change). The parent times the whole process from outside.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._crawl_proc import Timed, timed_run

__all__ = ["SOURCE_NAME", "SyncRun", "list_sources", "run_items", "run_sync", "source_options", "sources_yaml"]

SOURCE_NAME = "bench"
SOURCE_ID = f"web:{SOURCE_NAME}"
_REPO = Path(__file__).resolve().parent.parent


def source_options(base: str, concurrency: int, include: str) -> dict[str, Any]:
    """The web source's options: the same politeness and concurrency as the Scrapy spider."""
    options: dict[str, Any] = {
        "seeds": [base + "/"],
        "concurrency": concurrency,
        "delay_seconds": 0,
        "respect_robots": True,
        "allowlist": ["127.0.0.1"],
        "use_sitemaps": False,
        "max_pages": 100_000,
        "redis_url": "",  # in-process politeness: one process, one host, nothing to share
        "retries": 1,
    }
    if include:
        options["include"] = [include]
    return options


def sources_yaml(options: dict[str, Any]) -> str:
    """A sources file with the one web source (JSON is YAML; BM25 only, the default)."""
    entry = {"kind": "web", "name": SOURCE_NAME, "options": options, "index": {"backend": "sqlite", "name": "bench"}}
    return json.dumps({"sources": [entry]}, indent=2)


def _env(home: Path, sources: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIBUTARY_")}
    env.update({"TRIBUTARY_HOME": str(home), "TRIBUTARY_SOURCES": str(sources), "PYTHONPATH": str(_REPO)})
    return env


@dataclass(frozen=True, slots=True)
class SyncRun:
    wall: float  # whole process, interpreter start-up included
    cpu: float  # CPU seconds the process used
    run_id: str
    status: str
    counts: dict[str, Any]


def _cli(home: Path, sources: Path, *args: str) -> Timed:
    timed = timed_run([sys.executable, "-m", "plugins.engine.cli", *args], cwd=_REPO, env=_env(home, sources))
    if timed.proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({timed.proc.returncode}): {timed.proc.stderr[-3000:]}")
    return timed


def run_sync(home: Path, sources: Path, *, dry_run: bool) -> SyncRun:
    """One ``cli sync`` process; its stderr (the run's log) is kept under ``home``."""
    home.mkdir(parents=True, exist_ok=True)
    args = ["sync", SOURCE_ID, "--json", *(["--dry-run"] if dry_run else [])]
    timed = _cli(home, sources, *args)
    proc = timed.proc
    runs = len(list(home.glob("sync-*.log")))
    (home / f"sync-{runs + 1}.log").write_text(proc.stderr, encoding="utf-8")
    summary = json.loads(proc.stdout)
    return SyncRun(
        wall=timed.wall, cpu=timed.cpu, run_id=summary["run_id"], status=summary["status"], counts=summary["counts"]
    )


def run_items(home: Path, sources: Path, run_id: str) -> dict[str, str]:
    """item key -> action of one run, from ``cli run RUN_ID --json`` (after the timed run)."""
    out = _cli(home, sources, "run", run_id, "--json", "--source", SOURCE_ID).proc.stdout
    return {item["item_key"]: item["action"] for item in json.loads(out)["items"]}


def list_sources(home: Path, sources: Path) -> str:
    """``cli sources`` (also the benchmark's untimed warm-up of the CLI's start-up)."""
    return _cli(home, sources, "sources").proc.stdout
