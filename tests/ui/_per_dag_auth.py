"""An Airflow auth manager with per-DAG read grants, for the DAG-access tests.

Airflow's simple auth manager has roles but no per-DAG grants (FAB's ``can_read`` on
``DAG:<id>`` or Keycloak policies do that); this subclass adds them the way such a manager
answers ``is_authorized_dag``: an admin reads every DAG, anyone else only the DAG ids granted to
their username. It is installed as ``[core] auth_manager``, the extension point Airflow offers
for auth managers, so the audit app asks it exactly as it asks FAB or Keycloak.
"""

from __future__ import annotations

from typing import Any, ClassVar

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

__all__ = ["PerDagAuthManager"]


class PerDagAuthManager(SimpleAuthManager):
    GRANTS: ClassVar[dict[str, set[str]]] = {}  # username -> DAG ids it may read

    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        if self._is_admin(user):
            return True
        if details is None or details.id is None:
            return False
        return details.id in self.GRANTS.get(user.username, set())
