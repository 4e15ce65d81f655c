"""The reaper: close runs that died without closing themselves, and remove their staging.

A run that is SIGKILLed (a lost worker, an OOM kill, a ``kill -9`` of ``tributary sync``) runs
no ``finally`` and no callback, so the run log keeps it ``running`` and its staging directory
(raw bytes included) stays. The reaper decides from outside whether such a run is still alive:

- **Airflow runs** (any run type but ``inline``): dead when their DAG run is gone or has ended
  (``failed``, or ``success`` without the summary task closing the run, e.g. marked by hand).
  The reaper does not ask Airflow itself: the caller passes a :data:`DagRunState`, the Airflow
  layer's (``plugins.tributary_airflow.callbacks``: the Task SDK in task code, the metadata DB
  for the ``reap`` command). Without one these runs are left alone: a guess must never close a
  live run.
- **In-process runs** (``inline``, ``run_pipeline``): the run records its host, pid and the
  pid's start time (``owner``). On the same host the run is dead when that process is gone, or
  when the pid now belongs to another process (a different start time: the pid was reused). On
  another host (whose processes we cannot see) it is dead when it has not beaten its heartbeat
  (after every batch) for ``TRIBUTARY_REAP_AFTER_HOURS`` (default 12).

A dead run is marked ``failed`` with the reason, and its staging area is removed; its raw bytes
stay only when the source keeps raw bytes of every run (``retain_raw``), the same rule as for a
finished run, so the choice a source made for audit does not depend on how the run ended.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from include.config import SourceConfig
from include.staging import StagingArea
from plugins.connectors.base import get_connector_class
from plugins.engine.context import get_source, log

__all__ = [
    "DagRunState",
    "Reaped",
    "process_owner",
    "reap_stale_runs",
    "retains_raw",
]

# (dag_id, run_id) -> the DAG run's state, "gone" when there is no such run, None when unknown
DagRunState = Callable[[str, str], "str | None"]

_ENDED = ("failed", "success")
_DEFAULT_REAP_AFTER_HOURS = 12.0


@dataclass(frozen=True, slots=True)
class Reaped:
    run_id: str
    source: str
    reason: str
    staging_removed: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "source": self.source,
            "reason": self.reason,
            "staging_removed": self.staging_removed,
        }


# ----------------------------------------------------------------------------- process identity


def _pid_started(pid: int) -> str | None:
    """The process's start time since boot (``/proc/<pid>/stat`` field 22), with the boot id:
    together with the pid they name one process, even after the pid is reused (proc(5)).
    None where there is no /proc, or no such process; "zombie" for a dead, unwaited child."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may contain spaces: split after it
    fields = stat.rsplit(")", 1)[1].split()
    return "zombie" if fields[0] in ("Z", "X") else f"{boot}:{fields[19]}"


def _alive(pid: int) -> bool:
    """Signal 0 checks that a process exists without touching it (kill(2))."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def process_owner() -> dict[str, Any]:
    """Who runs an in-process run: recorded when it starts, read by the reaper."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "pid_started": _pid_started(pid)}


def _inline_verdict(run: dict[str, Any], now: dt.datetime) -> str | None:
    """Why an in-process run is dead, or None while it may be alive."""
    owner = run.get("owner") or {}
    if owner.get("host") == socket.gethostname() and owner.get("pid"):
        pid = int(owner["pid"])
        started = _pid_started(pid)
        if not _alive(pid) or started == "zombie":
            return f"its process (pid {pid} on {owner['host']}) is gone"
        if started is not None and owner.get("pid_started") and started != owner["pid_started"]:
            return f"its process (pid {pid} on {owner['host']}) is gone (the pid now names another process)"
        return None
    beat = run.get("heartbeat_at") or run.get("started_at")
    if beat is None:
        return None
    beat = beat if beat.tzinfo else beat.replace(tzinfo=dt.UTC)  # SQLite returns naive UTC
    hours = float(os.environ.get("TRIBUTARY_REAP_AFTER_HOURS", _DEFAULT_REAP_AFTER_HOURS))
    if now - beat > dt.timedelta(hours=hours):
        where = f"on {owner['host']}" if owner.get("host") else "with no recorded process"
        return f"no heartbeat for more than {hours:g} h from its process {where}"
    return None


# ----------------------------------------------------------------------------- Airflow runs


def _airflow_verdict(run: dict[str, Any], dag_run_state: DagRunState | None) -> str | None:
    if dag_run_state is None or not run.get("dag_id"):
        return None
    state = dag_run_state(run["dag_id"], run["run_id"])
    if state == "gone":
        return f"its DAG run ({run['dag_id']}, {run['run_id']}) no longer exists"
    if state in _ENDED:
        return f"its DAG run ended ({state}) without closing the run"
    return None


# ----------------------------------------------------------------------------- reaping


def retains_raw(source: SourceConfig) -> bool:
    """The source's ``retain_raw``, or its connector's default when unset."""
    return source.retain_raw if source.retain_raw is not None else get_connector_class(source.kind).retain_raw


def _keep_raw(source_id: str) -> bool:
    """``retains_raw`` of a configured source; True for one no longer configured (audit bytes
    are not removed on a guess)."""
    try:
        return retains_raw(get_source(source_id))
    except (KeyError, OSError, ValueError):
        return True


def reap_stale_runs(
    store: Any,
    *,
    source: str | None = None,
    exclude: tuple[str, str] | None = None,
    dag_run_state: DagRunState | None = None,
    keep_raw: Callable[[str], bool] = _keep_raw,
    now: dt.datetime | None = None,
) -> list[Reaped]:
    """Mark dead ``running`` runs (of ``source``, or all) failed and remove their staging.

    ``exclude`` is the (source, run id) of the caller's own run, never judged.
    """
    now = now or dt.datetime.now(dt.UTC)
    reaped = []
    for run in store.running_runs(source):
        if exclude == (run["source"], run["run_id"]):
            continue
        # a permission sync records its owner and heartbeat like an in-process run; its id is not a DAG run's
        inline = run.get("run_type") in ("inline", "permissions")
        why = _inline_verdict(run, now) if inline else _airflow_verdict(run, dag_run_state)
        if why is None:
            continue
        message = f"reaped: {why}"
        if not store.mark_failed_if_running(run["run_id"], run["source"], message):
            continue
        staging = StagingArea(run.get("dag_id") or "", run["run_id"])
        removed = staging.exists()
        staging.cleanup(keep_raw=keep_raw(run["source"]))
        log.warning("%s: run %s marked failed, %s", run["source"], run["run_id"], message)
        reaped.append(Reaped(run["run_id"], run["source"], message, removed))
    return reaped
