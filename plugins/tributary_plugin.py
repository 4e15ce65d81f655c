"""Tributary's Airflow plugin: the lineage audit pages inside Airflow's API server and UI, and
the receiver of pushed change events (the only routes without an Airflow login).

This is the only file in ``plugins/`` that Airflow's plugin scan sees (``plugins/.airflowignore``
hides the packages); the pages themselves live in ``plugins/tributary_airflow/ui``. Keep imports here light:
every Airflow process loads plugins, only the API server serves the app.
"""

from __future__ import annotations

from typing import Any, ClassVar

from airflow.plugins_manager import AirflowPlugin

from plugins.tributary_airflow.events import create_events_app
from plugins.tributary_airflow.ui import create_app


class TributaryPlugin(AirflowPlugin):
    name = "tributary"
    # Order matters: Airflow mounts these in list order (airflow/api_fastapi/app.py,
    # init_plugins: app.mount per entry) and Starlette routes a request to the first mount whose
    # prefix matches, so the receiver's more specific prefix comes first; behind /tributary it
    # would be the audit app's (login-protected) 404.
    fastapi_apps: ClassVar[list[dict[str, Any]]] = [
        {"app": create_events_app(), "url_prefix": "/tributary/events", "name": "Tributary events"},
        {"app": create_app(), "url_prefix": "/tributary", "name": "Tributary audit"},
    ]
    external_views: ClassVar[list[dict[str, Any]]] = [
        {
            # navigation entry: runs per source, items per run, item history
            "name": "Tributary audit",
            "href": "/tributary/",
            "destination": "nav",
            "category": "browse",
            "url_route": "tributary",
        },
        {
            # a tab on every DAG run: that run's item-level lineage
            "name": "Item lineage",
            "href": "/tributary/runs/{RUN_ID}?dag_id={DAG_ID}",
            "destination": "dag_run",
            "url_route": "tributary-run",
        },
    ]
