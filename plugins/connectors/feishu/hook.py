"""Airflow hook: builds :class:`FeishuClient` settings from a Connection.

Connection ``feishu_default`` (or the source's ``conn_id``): ``login`` = app id, ``password`` =
app secret, ``host`` = site root (``https://open.feishu.cn``; Lark's
``https://open.larksuite.com`` works the same), or ``extra.host``/``extra.base_url``;
``extra.max_response_bytes``: the largest JSON answer read, after its content-coding (default
64 MiB; a file download is capped by the source's ``max_file_bytes``). The connection is read
lazily, when a client is first needed, never at import or DAG parse time.
"""

from __future__ import annotations

from typing import Any

from plugins.connectors.feishu.client import DEFAULT_BASE_URL, FeishuClient, FeishuSettings

__all__ = ["FeishuHook", "asettings_from_connection", "settings_from_conn", "settings_from_connection"]


def settings_from_connection(conn_id: str, *, redis_url: str | None = None, **overrides: Any) -> FeishuSettings:
    from airflow.sdk import BaseHook

    return settings_from_conn(BaseHook.get_connection(conn_id), redis_url=redis_url, **overrides)


async def asettings_from_connection(conn_id: str, *, redis_url: str | None = None, **overrides: Any) -> FeishuSettings:
    """The same for triggers, which must not make blocking calls on the triggerer's loop."""
    from airflow.sdk import BaseHook

    return settings_from_conn(await BaseHook.aget_connection(conn_id), redis_url=redis_url, **overrides)


def settings_from_conn(conn: Any, *, redis_url: str | None = None, **overrides: Any) -> FeishuSettings:
    conn_id = getattr(conn, "conn_id", "?")
    extra = conn.extra_dejson or {}
    host = extra.get("base_url") or extra.get("host") or conn.host or DEFAULT_BASE_URL
    if "://" not in host:
        host = f"{conn.schema or 'https'}://{host}" + (f":{conn.port}" if conn.port else "")
    if not conn.login or not conn.password:
        raise ValueError(f"connection {conn_id!r} needs the app id as login and the app secret as password")
    auth = str(extra.get("auth") or "tenant")
    if auth not in ("tenant", "user"):
        raise ValueError(f"connection {conn_id!r}: extra.auth must be 'tenant' or 'user'")
    refresh = extra.get("refresh_token")
    if auth == "user" and not refresh:
        raise ValueError(
            f"connection {conn_id!r}: extra.auth 'user' needs extra.refresh_token (the user's OAuth grant)"
        )
    if extra.get("max_response_bytes") is not None:
        overrides = {"max_response_bytes": int(extra["max_response_bytes"]), **overrides}
    return FeishuSettings(
        app_id=conn.login,
        app_secret=conn.password,
        host=host,
        redis_url=redis_url,
        auth=auth,
        refresh_token=refresh if auth == "user" else None,
        **overrides,
    )


try:  # the hook class is only for Airflow users; the client works without Airflow
    from airflow.sdk import BaseHook as _BaseHook
except ImportError:  # pragma: no cover - Airflow is a runtime dependency
    _BaseHook = object  # type: ignore[assignment,misc]


class FeishuHook(_BaseHook):  # type: ignore[misc,valid-type]
    conn_name_attr = "feishu_conn_id"
    default_conn_name = "feishu_default"
    conn_type = "http"
    hook_name = "Feishu / Lark"

    def __init__(self, feishu_conn_id: str = default_conn_name, *, redis_url: str | None = None, **overrides: Any):
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
