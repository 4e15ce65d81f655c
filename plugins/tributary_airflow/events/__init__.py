"""The receiver of pushed change events (Feishu callbacks, Yuque webhooks): see ``app.py``."""

from plugins.tributary_airflow.events.app import create_events_app
from plugins.tributary_airflow.events.intake import Intake

__all__ = ["Intake", "create_events_app"]
