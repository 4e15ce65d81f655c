"""The two tasks of a source's permissions DAG (``perms_<kind>_<name>``), one engine call each::

    SyncGroupsOperator(task_id="sync_groups", source="feishu:handbook")
        >> SyncPermissionsOperator(task_id="sync_permissions", source="feishu:handbook")

``sync_groups`` stores the source's group memberships (what a search expands a user through);
``sync_permissions`` re-reads each indexed document's permissions and writes the changed ones to
the index without touching a chunk. What they do lives in ``plugins.engine.permission_tasks``;
each returns its result's ``to_dict()`` (XCom, and the task log's line).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator, Context

from plugins.engine import get_source
from plugins.engine.permission_tasks import run_group_sync, run_permission_sync
from plugins.tributary_airflow.hooks import IndexHook, StateStoreHook
from plugins.tributary_airflow.operators.base import triggering_batches

__all__ = ["SyncGroupsOperator", "SyncPermissionsOperator"]


class _PermissionsOperator(BaseOperator):
    """``source``: a source id (``kind:name``), DAG id or name from the sources file."""

    template_fields: Sequence[str] = ("source",)
    ui_color = "#e8f6f3"

    def __init__(self, *, source: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source = source

    @cached_property
    def state_hook(self) -> StateStoreHook:
        return StateStoreHook()


class SyncGroupsOperator(_PermissionsOperator):
    """Store the source's groups and members (a source with none of its own stores nothing)."""

    def execute(self, context: Context) -> dict[str, Any]:
        if triggering_batches(get_source(self.source).source_id, context, "permissions"):
            # a permission event names documents, not groups: the scheduled runs re-read groups
            self.log.info("permissions of %s started by events: groups left to the scheduled runs", self.source)
            return {"skipped": "started by permission events"}
        with self.state_hook as state:
            result = run_group_sync(get_source(self.source), state, run_id=context["run_id"]).to_dict()
        self.log.info("groups of %s: %s", self.source, result)
        return result


class SyncPermissionsOperator(_PermissionsOperator):
    """Re-read every indexed document's permissions; write the changed ones to the index."""

    @cached_property
    def index_hook(self) -> IndexHook:
        return IndexHook.for_source(self.source)

    def execute(self, context: Context) -> dict[str, Any]:
        source = get_source(self.source)
        with self.state_hook as state:
            found = run_permission_sync(
                source,
                state,
                self.index_hook.get_conn,
                run_id=context["run_id"],
                event_batches=triggering_batches(source.source_id, context, "permissions"),
            )
        result = found.to_dict()
        self.log.info("permissions of %s: %s", self.source, {k: v for k, v in result.items() if k != "changes"})
        return result
