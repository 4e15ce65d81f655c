"""Airflow hook for Yuque: the Connection (``yuque_default``) -> a configured :class:`YuqueClient`.

The Connection's fields are described in ``plugins.connectors.yuque.connection``, where the
client is built from the ground's :class:`~include.connections.ConnectionRecord` (the connector
does the same). The Connection is read when the client is first needed, not at import or
construction, so DAG parsing never touches the secrets backend.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from include.connections import get_connection
from plugins.connectors.yuque.client import YuqueClient
from plugins.connectors.yuque.connection import DEFAULT_CONN_ID, client_from_conn

__all__ = ["YuqueHook"]


class YuqueHook(BaseHook):
    conn_name_attr = "yuque_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "yuque"
    hook_name = "Yuque"

    def __init__(self, yuque_conn_id: str = default_conn_name, *, redis_url: str | None = None) -> None:
        super().__init__()
        self.yuque_conn_id = yuque_conn_id
        self.redis_url = redis_url
        self._client: YuqueClient | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["login"],
            "relabeling": {"host": "Yuque host (www.yuque.com or <space>.yuque.com)", "password": "Token"},
        }

    def get_conn(self) -> YuqueClient:
        if self._client is None:
            self._client = client_from_conn(get_connection(self.yuque_conn_id), redis_url=self.redis_url)
        return self._client

    def test_connection(self) -> tuple[bool, str]:
        try:
            user = self.get_conn().get_user()
        except Exception as exc:
            return False, str(exc)
        return True, f"authenticated as {user.get('login')!r} ({user.get('type', 'User')})"

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
