"""Feishu client settings from a Connection record (``include.connections``).

Connection ``feishu_default`` (or the source's ``conn_id``): ``login`` = app id, ``password`` =
app secret, ``host`` = site root (``https://open.feishu.cn``; Lark's
``https://open.larksuite.com`` works the same), or ``extra.host``/``extra.base_url``;
``extra.auth`` = ``tenant`` (the app's identity, default) or ``user`` (with
``extra.refresh_token``, the user's OAuth grant, and ``extra.token_store_key``, the Fernet key
that encrypts its rotating successor in the state database: ``user_store.py``);
``extra.max_response_bytes``: the largest JSON
answer read, after its content-coding (default 64 MiB; a file download is capped by the source's
``max_file_bytes``). The connector reads the record when a client is first needed, never at
import or DAG parse time; the Airflow hook (``plugins.tributary_airflow.hooks.feishu``) uses the
same function.
"""

from __future__ import annotations

from typing import Any

from include.connections import ConnectionRecord
from plugins.connectors.feishu.client import DEFAULT_BASE_URL, FeishuSettings

__all__ = ["DEFAULT_CONN_ID", "settings_from_conn"]

DEFAULT_CONN_ID = "feishu_default"


def settings_from_conn(conn: ConnectionRecord, *, redis_url: str | None = None, **overrides: Any) -> FeishuSettings:
    """The client settings of ``conn``; ``ValueError`` (naming fields, never values) when the
    record lacks the app's credentials or names an unknown auth mode."""
    extra = conn.extra
    host = str(extra.get("base_url") or extra.get("host") or conn.host or DEFAULT_BASE_URL)
    if "://" not in host:
        host = f"{conn.schema or 'https'}://{host}" + (f":{conn.port}" if conn.port else "")
    if not conn.login or not conn.password:
        raise ValueError(f"connection {conn.conn_id!r} needs the app id as login and the app secret as password")
    auth = str(extra.get("auth") or "tenant")
    if auth not in ("tenant", "user"):
        raise ValueError(f"connection {conn.conn_id!r}: extra.auth must be 'tenant' or 'user'")
    refresh = extra.get("refresh_token")
    if auth == "user" and not refresh:
        raise ValueError(
            f"connection {conn.conn_id!r}: extra.auth 'user' needs extra.refresh_token (the user's OAuth grant)"
        )
    if extra.get("max_response_bytes") is not None:
        overrides = {"max_response_bytes": int(extra["max_response_bytes"]), **overrides}
    if auth == "user" and extra.get("token_store_key"):
        overrides = {"token_store_key": str(extra["token_store_key"]), **overrides}
    return FeishuSettings(
        app_id=conn.login,
        app_secret=conn.password,
        host=host,
        redis_url=redis_url,
        auth=auth,
        refresh_token=str(refresh) if auth == "user" else None,
        **overrides,
    )
