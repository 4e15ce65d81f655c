"""A permission sync as its callers run it: the permissions DAG's two tasks and the CLI's
``permissions SOURCE``. Each opens what :mod:`plugins.engine.permissions` needs the way a content
sync does (the source's connector, the access tables of the state store, the source's index),
runs it and closes what it opened; the work itself is there, not here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from include.config import SourceConfig
from include.index import IndexBackend
from include.stores import StateStore
from include.stores.access import AccessStore
from include.stores.events import EventStore
from plugins.engine.context import RunContext
from plugins.engine.discover import open_connector
from plugins.engine.event_runs import event_trigger_of
from plugins.engine.permissions import GroupSyncResult, PermissionSyncResult, sync_groups, sync_permissions

__all__ = ["run_group_sync", "run_permission_sync"]


def run_group_sync(source: SourceConfig, state: StateStore, *, run_id: str | None = None) -> GroupSyncResult:
    """Read the source's groups and members into the access tables (:func:`sync_groups`)."""
    access = AccessStore(state)
    with open_connector(RunContext(source, run_id or "groups")) as connector:
        return sync_groups(source, store=access, connector=connector)


def run_permission_sync(
    source: SourceConfig,
    state: StateStore,
    index_factory: Callable[[], IndexBackend],
    *,
    run_id: str | None = None,
    dag_id: str | None = None,
    event_batches: Sequence[str] = (),
) -> PermissionSyncResult:
    """Re-read each indexed document's permissions; the changed ones reach the index
    (:func:`sync_permissions`, a run of the run log: ``permissions__<run_id>``, an ``inline``
    id when None). ``index_factory`` opens the source's index (an IndexHook's ``get_conn``);
    it is closed here. ``event_batches``: the permission events that started the run (a
    permissions DAG run scheduled by its events asset): only the documents they name are re-read,
    and the batches are consumed once the run's result is recorded."""
    access = AccessStore(state)
    trigger, keys = event_trigger_of(state, event_batches) if event_batches else (None, None)
    index = index_factory()
    try:
        with open_connector(RunContext(source, run_id or "permissions")) as connector:
            result = sync_permissions(
                source,
                store=access,
                index=index,
                connector=connector,
                run_id=run_id,
                dag_id=dag_id,
                only_keys=keys or None,  # batches all pruned: every document, as a scheduled run
                trigger=trigger,
            )
    finally:
        index.close()
    if event_batches:
        EventStore(state).consume(event_batches, result.run_id)
    return result
