"""Tributary's Airflow plugin: the lineage audit pages inside Airflow's API server and UI.

This is the only file in ``plugins/`` that Airflow's plugin scan sees (``plugins/.airflowignore``
hides the packages); the pages themselves live in ``plugins/tributary_airflow/ui``. Keep imports here light:
every Airflow process loads plugins, only the API server serves the app.
"""

from __future__ import annotations

from typing import Any, ClassVar

from airflow.plugins_manager import AirflowPlugin

from plugins.tributary_airflow.ui import create_app


class TributaryPlugin(AirflowPlugin):
    name = "tributary"
    fastapi_apps: ClassVar[list[dict[str, Any]]] = [
        {"app": create_app(), "url_prefix": "/tributary", "name": "Tributary audit"}
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
