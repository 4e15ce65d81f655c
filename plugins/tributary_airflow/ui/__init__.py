"""The audit pages served inside Airflow's API server (see ``plugins/tributary_plugin.py``)."""

from plugins.tributary_airflow.ui.app import create_app

__all__ = ["create_app"]
