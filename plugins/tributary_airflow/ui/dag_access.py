"""Which sources' audit pages a signed-in user may read: Airflow's DAG-level access control for
each source's sync DAG (issue 35).

Lineage names documents, and the chunk, search and diff pages show their text: a user who may
not read a source's DAG in Airflow may not read them here either. The question goes to the
API server's own auth manager (``filter_authorized_dag_ids`` with ``GET``: the per-DAG
``can_read`` of FAB, Keycloak's policies, the roles of the simple auth manager), so this app
keeps no permissions of its own. A source that is no longer configured keeps its DAG id
(``sync_<kind>_<name>``), so its retired history stays behind the same rule.

Refused: a page answers 403 with a page saying which DAG it needs, ``/api`` a JSON 403; lists
(the sources, the runs, search) leave out what the user may not read. Without a signed-in user
(``create_app(require_auth=False)``, tests only) nothing is filtered.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from fastapi import HTTPException, Request

if TYPE_CHECKING:
    from include.config import SourceConfig

__all__ = ["SourceForbidden", "dag_id_of", "readable", "readable_configs", "require_source"]

log = logging.getLogger("tributary.ui")


class SourceForbidden(Exception):
    """The signed-in user may not read the DAG of ``source_id``."""

    def __init__(self, source_id: str) -> None:
        super().__init__(source_id)
        self.source_id = source_id
        self.dag_id = dag_id_of(source_id)


def dag_id_of(source_id: str) -> str:
    """``kind:name`` -> its sync DAG's id (``SourceConfig.dag_id``; a retired source too)."""
    kind, _, name = source_id.partition(":")
    return f"sync_{kind}_{name}"


def _user(request: Request) -> Any:
    return getattr(request.state, "airflow_user", None)


def readable(request: Request, source_ids: Iterable[str]) -> set[str]:
    """The ids among ``source_ids`` whose DAG the signed-in user may read (all without a user)."""
    wanted = {s for s in source_ids if s}
    user = _user(request)
    if user is None or not wanted:
        return wanted
    # deferred: the API server's auth manager, for requests only (every Airflow process imports the plugin)
    from airflow.api_fastapi.app import get_auth_manager

    by_dag = {dag_id_of(s): s for s in wanted}
    try:
        allowed = get_auth_manager().filter_authorized_dag_ids(dag_ids=set(by_dag), user=user, method="GET")
    except Exception as exc:  # no answer about access is no access: fail closed
        log.warning("DAG access check failed: %s", type(exc).__name__)
        raise HTTPException(status_code=503, detail="Airflow's access control did not answer") from None
    return {by_dag[d] for d in allowed if d in by_dag}


def readable_configs(request: Request, configs: Sequence[SourceConfig]) -> list[SourceConfig]:
    """The configured sources whose DAG the user may read, in their order (one question to Airflow)."""
    allowed = readable(request, [c.source_id for c in configs])
    return [c for c in configs if c.source_id in allowed]


def require_source(request: Request, source_id: str | None) -> None:
    """Raise :class:`SourceForbidden` unless the user may read ``source_id``'s DAG."""
    if source_id and source_id not in readable(request, [source_id]):
        raise SourceForbidden(source_id)
