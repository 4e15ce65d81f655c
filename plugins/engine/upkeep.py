"""A connector's upkeep at its service once a run's commit stands (issue 37: Feishu's event
subscriptions follow the index).

Runs at the end of the commit stage, after the index write and the state commit, so it sees
exactly what is indexed; only for sources with ``events`` on (with them off nothing changes and
no connector is opened). Whatever it does is counted in the run's counts and never fails the
run: a subscription that could not be made costs freshness (polling still finds the change),
not the sync.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from include.stores import StateStore
from plugins.connectors.base import Committed
from plugins.engine.context import RunContext, log
from plugins.engine.discover import open_connector
from plugins.engine.records import ItemRecord

__all__ = ["after_commit"]


def after_commit(ctx: RunContext, store: StateStore, seen: Iterable[ItemRecord]) -> dict[str, Any]:
    """The connector's :meth:`~plugins.connectors.base.Connector.after_commit` counts; ``seen``:
    the run's items whose discovery metadata it may use (written and unchanged ones)."""
    if not ctx.source.events.enabled:
        return {}
    sid = ctx.source.source_id
    try:
        indexed = frozenset(key for key, state in store.items(sid).items() if state.indexed)
        metadata = {r.change.item_key: r.change.metadata for r in seen}
        with open_connector(ctx) as connector:
            return connector.after_commit(Committed(indexed=indexed, metadata=metadata))
    except Exception as exc:  # never fails the run: counted, logged, retried by the next run
        log.warning("%s: upkeep after commit failed: %s: %s", sid, type(exc).__name__, exc)
        return {"upkeep_error": type(exc).__name__}
