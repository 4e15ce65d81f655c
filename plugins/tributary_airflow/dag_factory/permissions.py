"""One permissions DAG per source that has permissions to keep current: ``perms_<kind>_<name>``.

    sync_groups -> sync_permissions

every ``permission_sync_minutes`` (default 30): the source's group memberships first (what a
search expands a user through), then each indexed document's permissions, re-read and written to
the index only where they changed (no parsing, chunking or embedding). Apart from the sync DAG so
that a slow or failing content sync never delays a revocation, and a permission sync never holds
the content sync's ``max_active_runs`` slot. Which sources get one:
:func:`plugins.connectors.base.syncs_permissions` (Feishu, Yuque, or a declared ``acl`` block).
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow.sdk import DAG
from airflow.timetables.trigger import DeltaTriggerTimetable

from include.config import SourceConfig
from plugins.tributary_airflow.dag_factory.events import with_events
from plugins.tributary_airflow.operators.permissions import SyncGroupsOperator, SyncPermissionsOperator

__all__ = ["PERMISSIONS_DAG_DOC", "build_permissions_dag", "permissions_dag_id", "task_limits"]

PERMISSIONS_DAG_DOC = """\
### Permissions of `{source_id}`

Every {minutes} minutes: `sync_groups` (the source's groups and members, for searches to expand)
→ `sync_permissions` (each indexed document's permissions re-read; only changed ones are written
to the index `{index}` on `{backend}`, nothing re-embedded). A document whose permissions cannot
be read becomes private (`acl_unknown`), never public. A revocation in the source reaches searches
at the next run of this DAG: at most {minutes} minutes, plus the run's own time.
"""


def permissions_dag_id(source: SourceConfig) -> str:
    return f"perms_{source.kind}_{source.name}"


def task_limits() -> dict[str, Any]:
    """Every task's retries (backoff capped at 10 min) and time limit, for the sync DAG and this
    one. This DAG adds no failure callback: the sync DAG's closes a content run and drops a
    half-written rebuild, and a permission sync closes its own run (``plugins.engine.permissions``:
    failed, with the error, when it raises)."""
    return {
        "execution_timeout": dt.timedelta(minutes=float(os.environ.get("TRIBUTARY_TASK_TIMEOUT_MINUTES", "120"))),
        "retries": int(os.environ.get("TRIBUTARY_TASK_RETRIES", "2")),
        "retry_delay": dt.timedelta(seconds=float(os.environ.get("TRIBUTARY_RETRY_DELAY_SECONDS", "30"))),
        "retry_exponential_backoff": True,
        "max_retry_delay": dt.timedelta(minutes=10),
    }


def build_permissions_dag(source: SourceConfig) -> DAG:
    """``sync_groups >> sync_permissions`` every ``permission_sync_minutes`` (a trigger
    timetable: a run stands for "now", it covers no data interval, and missed runs are not
    caught up: only the latest permissions matter)."""
    minutes = source.permission_sync_minutes
    sid = source.source_id
    with DAG(
        dag_id=permissions_dag_id(source),
        # with events on, a permission event also starts it, for the documents it names only
        schedule=with_events(source, DeltaTriggerTimetable(dt.timedelta(minutes=minutes)), "permissions"),
        start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        catchup=False,
        max_active_runs=1,  # two permission syncs of one source would race on its stored digests
        tags=["tributary", "permissions", source.kind, *source.tags],
        description=f"Re-read the permissions of {sid} every {minutes} min",
        doc_md=PERMISSIONS_DAG_DOC.format(
            source_id=sid, minutes=minutes, index=source.index.name, backend=source.index.backend
        ),
        default_args=task_limits(),
    ) as dag:
        SyncGroupsOperator(task_id="sync_groups", source=sid) >> SyncPermissionsOperator(
            task_id="sync_permissions", source=sid
        )
    return dag
