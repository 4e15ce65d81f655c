"""Airflow hooks of the Tributary layer: each owns a connection and its I/O.

``StateStoreHook`` (state store and run log) and ``IndexHook`` (a source's index backend) wrap
the ground's stores; the per-service hooks (Feishu, Yuque, web auth) sit beside them.
"""

from plugins.tributary_airflow.hooks.index import IndexHook
from plugins.tributary_airflow.hooks.state import StateStoreHook

__all__ = ["IndexHook", "StateStoreHook"]
