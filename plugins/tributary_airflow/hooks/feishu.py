"""Airflow hook for Feishu / Lark: the Connection (``feishu_default``) -> a :class:`FeishuClient`.

The Connection's fields are described in ``plugins.connectors.feishu.connection``; the settings
are built there, from the ground's :class:`~include.connections.ConnectionRecord`, so the
connector and this hook read a Connection the same way. The Connection is read when the client
is first needed, never at import or DAG parse time.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from include.connections import aget_connection, get_connection
from plugins.connectors.feishu.client import FeishuClient, FeishuSettings
from plugins.connectors.feishu.connection import DEFAULT_CONN_ID, settings_from_conn

__all__ = ["FeishuHook", "asettings_from_connection", "settings_from_connection"]


def settings_from_connection(conn_id: str, *, redis_url: str | None = None, **overrides: Any) -> FeishuSettings:
    """The client settings of the Connection ``conn_id``."""
    return settings_from_conn(get_connection(conn_id), redis_url=redis_url, **overrides)


async def asettings_from_connection(conn_id: str, *, redis_url: str | None = None, **overrides: Any) -> FeishuSettings:
    """The same for triggers, which must not make blocking calls on the triggerer's loop."""
    return settings_from_conn(await aget_connection(conn_id), redis_url=redis_url, **overrides)


class FeishuHook(BaseHook):
    conn_name_attr = "feishu_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "http"
    hook_name = "Feishu / Lark"

    def __init__(
        self, feishu_conn_id: str = default_conn_name, *, redis_url: str | None = None, **overrides: Any
    ) -> None:
        super().__init__()
        self.feishu_conn_id = feishu_conn_id
        self._redis_url = redis_url
        self._overrides = overrides
        self._client: FeishuClient | None = None

    def get_settings(self) -> FeishuSettings:
        return settings_from_connection(self.feishu_conn_id, redis_url=self._redis_url, **self._overrides)

    def get_conn(self) -> FeishuClient:
        if self._client is None:
            self._client = FeishuClient(self.get_settings())
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
