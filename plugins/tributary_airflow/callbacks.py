"""What only Airflow knows, handed to the Airflow-free engine as plain callables and values.

- **DAG-run state for the reaper** (``plugins.engine.reaper.DagRunState``): in task code the
  API server answers through the Task SDK (:func:`sdk_dag_run_state`; Airflow 3 gives task code
  no metadata-DB access); outside task code, the ``reap`` command of
  ``python -m plugins.tributary_airflow.cli`` reads the metadata DB as Airflow's own CLI does
  (:func:`metadata_dag_run_state`).
- **Links in alerts**: Airflow's base URL (:func:`airflow_base_url`, ``[api] base_url``).
- **The DAG's failure callbacks** (:func:`on_task_failure`, :func:`on_dag_failure`): record the
  error in the run log, close the run, drop a half-written rebuild and post the alert.
"""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa
from airflow.configuration import conf
from airflow.sdk.execution_time import task_runner

from plugins.engine import RunContext, RunParams, get_source
from plugins.engine.alerts import build_failure_summary, post_failure_summary
from plugins.engine.commit import end_rebuild, with_error_reason
from plugins.engine.context import is_closed
from plugins.engine.reaper import DagRunState
from plugins.tributary_airflow.hooks import StateStoreHook

__all__ = ["airflow_base_url", "metadata_dag_run_state", "on_dag_failure", "on_task_failure", "sdk_dag_run_state"]

log = logging.getLogger("tributary")

_MAX_LINE = 2000  # one task's error line in the run log
_MAX_ERROR = 8000  # the run's whole error text


# ----------------------------------------------------------------------------- the reaper's oracles


def _state_name(state: Any) -> str:
    """``DagRunState.FAILED`` / ``"failed"`` -> ``"failed"``."""
    return str(state).split(".")[-1].lower()


def sdk_dag_run_state() -> DagRunState | None:
    """Inside an Airflow task: the API server's answer through the Task SDK; elsewhere None
    (no supervisor to ask: the caller leaves Airflow runs alone)."""
    if getattr(task_runner, "SUPERVISOR_COMMS", None) is None:
        return None
    ti = task_runner.RuntimeTaskInstance

    def state(dag_id: str, run_id: str) -> str | None:
        try:
            if not ti.get_dr_count(dag_id=dag_id, run_ids=[run_id]):
                return "gone"
            return _state_name(ti.get_dagrun_state(dag_id=dag_id, run_id=run_id))
        except Exception as exc:  # the API server's trouble must not fail this run's discover
            log.warning("reaper: cannot read the state of DAG run %s of %s: %s", run_id, dag_id, exc)
            return None

    return state


def metadata_dag_run_state() -> DagRunState | None:
    """Outside task code (the ``reap`` command on a machine with Airflow's configuration): read
    DAG runs from the metadata DB, as Airflow's own CLI does. None when that is not possible."""
    try:
        # deferred: the ORM and a metadata-DB session are for the reap command only; DAG parsing
        # and task code (no metadata-DB access in Airflow 3) import this module without them
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session  # deferred: as DagRun
    except Exception as exc:  # no configuration for Airflow's metadata DB here
        log.info("reaper: no Airflow metadata DB (%s); Airflow runs are left alone", exc)
        return None

    def state(dag_id: str, run_id: str) -> str | None:
        try:
            with create_session() as session:
                found = session.scalar(sa.select(DagRun.state).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
        except Exception as exc:
            log.warning("reaper: cannot read DAG run %s of %s: %s", run_id, dag_id, exc)
            return None
        return "gone" if found is None else _state_name(found)

    return state


# ----------------------------------------------------------------------------- alert links


def airflow_base_url() -> str:
    """Airflow's UI address for links in alerts (``[api] base_url``, else the local default)."""
    try:
        base = conf.get("api", "base_url", fallback="") or ""
    except Exception:  # a broken configuration must not stop the alert
        base = ""
    return (base or "http://localhost:8080").rstrip("/")


# ----------------------------------------------------------------------------- failure callbacks


def _stage_name(ti: Any) -> str:
    task_id = getattr(ti, "task_id", None) or "?"
    map_index = getattr(ti, "map_index", -1)
    return f"{task_id}[{map_index}]" if isinstance(map_index, int) and map_index >= 0 else task_id


def _source_id(context: Any) -> str:
    """The source a failing DAG syncs (run log rows are keyed by source and run id)."""
    dag_id = getattr(context.get("dag"), "dag_id", None) or "?"
    try:
        return get_source(dag_id).source_id
    except KeyError:  # no longer configured: the DAG id names it (sync_<kind>_<name>)
        return str(dag_id).removeprefix("sync_").replace("_", ":", 1)


def on_task_failure(context: Any) -> None:
    """A task failed: add its error to the run log (the DAG-level callback has no exception)."""
    sid, run_id, ti = _source_id(context), context["run_id"], context.get("ti")
    with StateStoreHook() as store:
        run = store.get_run(run_id, sid)
        if run is None:  # failed before discover opened the run: the DAG callback opens nothing
            return
        if is_closed(run):  # a cleared task of a finished run, or the summary of a failed one
            log.warning("task %s of finished run %s failed; the run stays %s", _stage_name(ti), run_id, run["status"])
            return
        exception = context.get("exception")
        line = f"{_stage_name(ti)}: {type(exception).__name__}: {exception}"
        previous = [e for e in (run.get("error") or "").split("\n") if e]
        counts = dict(run.get("counts") or {})
        if line not in previous:
            previous.append(line[:_MAX_LINE])
            counts = with_error_reason(counts, f"{type(exception).__name__}: {exception}")
        error = "\n".join(previous)[-_MAX_ERROR:]
        store.finish_run(run_id, "failed", counts, error=error, source=sid)


def _drop_rebuild(source_id: str, run: dict[str, Any]) -> None:
    """A failed full resync must not leave a half-written index generation behind (the engine's
    ``end_rebuild`` decides from the run's params whether there is one)."""
    try:
        source = get_source(source_id)
    except KeyError:  # no longer configured: its index cannot be named, let alone opened
        log.warning("%s: not configured any more; a rebuild of run %s is left as it is", source_id, run["run_id"])
        return
    end_rebuild(RunContext(source, run["run_id"], RunParams.from_mapping(run.get("params"))), success=False)


def on_dag_failure(context: Any) -> None:
    """A DAG run failed: close it as failed in the run log and post one summary to the webhook."""
    dag_id = getattr(context.get("dag"), "dag_id", None) or "?"
    run_id = context["run_id"]
    ti = context.get("ti") or context.get("task_instance")
    sid = _source_id(context)
    with StateStoreHook() as store:
        run = store.get_run(run_id, sid)
        if run is not None and not is_closed(run):  # a finished run stays as it ended
            error = run.get("error") or f"{_stage_name(ti)} failed ({context.get('reason') or 'task_failure'})"
            store.finish_run(run_id, "failed", run.get("counts") or {}, error=error[:_MAX_ERROR], source=sid)
            run = store.get_run(run_id, sid)
            if run is not None:
                _drop_rebuild(sid, run)
        items = store.run_items(run_id, source=sid)
    summary = build_failure_summary(
        source=sid,
        dag_id=dag_id,
        run_id=run_id,
        failed_stage=_stage_name(ti) if ti is not None else None,
        run=run,
        items=items,
        reason=context.get("reason"),
        base_url=airflow_base_url(),
    )
    post_failure_summary(summary)
