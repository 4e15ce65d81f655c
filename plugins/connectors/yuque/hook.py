"""Airflow hook for Yuque: the Connection (``yuque_default``) -> a configured :class:`YuqueClient`.

Connection fields:

- ``host``: ``www.yuque.com`` or a team space's own host (``<space>.yuque.com``: team tokens only
  work there); a scheme and ``/api/v2`` may be included. ``schema`` may name the scheme
  (``http``/``https``) when ``host`` has none, as with the HTTP provider; ``port`` is honoured.
- ``password``: the token (sent as ``X-Auth-Token``; never logged).
- ``extra`` (all optional): ``user_agent``, ``hourly_budget`` (default 4500, per Yuque account:
  every Connection whose token belongs to the same account shares it), ``max_per_second``
  (default 8: requests of all workers of the account together are spaced at most this dense),
  ``timeout``, ``max_attempts``, ``backoff_initial``, ``backoff_max``, ``max_retry_after``,
  ``max_response_bytes`` (largest response body read, after its content-coding; default 64 MiB).

The Connection is read when the client is first needed, not at import or construction, so DAG
parsing never touches the secrets backend.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook

from plugins.connectors.yuque.budget import RequestBudget
from plugins.connectors.yuque.client import DEFAULT_USER_AGENT, YuqueClient

__all__ = ["YuqueHook"]

_FLOAT_EXTRAS = ("timeout", "backoff_initial", "backoff_max", "max_retry_after")
# Yuque publishes no burst limit; ~200 parallel fetches are known to trip it, a few a second never
DEFAULT_PER_SECOND = 8.0


class YuqueHook(BaseHook):
    conn_name_attr = "yuque_conn_id"
    default_conn_name = "yuque_default"
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

    def _base_url(self, conn: Any) -> str:
        host = (conn.host or "www.yuque.com").strip()
        if "://" not in host:
            scheme = conn.schema if conn.schema in ("http", "https") else "https"
            host = f"{scheme}://{host}"
        if conn.port and host.count(":") < 2:
            # add the port to "scheme://host[/path]" only when none is given
            scheme, rest = host.split("://", 1)
            name, _, path = rest.partition("/")
            host = f"{scheme}://{name}:{conn.port}" + (f"/{path}" if path else "")
        return host

    def get_conn(self) -> YuqueClient:
        if self._client is None:
            conn = self.get_connection(self.yuque_conn_id)
            extra = conn.extra_dejson or {}
            token = conn.password or extra.get("token")
            if not token:
                raise ValueError(f"connection {self.yuque_conn_id!r} has no token (put it in the password field)")
            kwargs: dict[str, Any] = {k: float(extra[k]) for k in _FLOAT_EXTRAS if extra.get(k) is not None}
            for name in ("max_attempts", "max_response_bytes"):
                if extra.get(name) is not None:
                    kwargs[name] = int(extra[name])
            budget = RequestBudget(
                token,
                limit=int(extra.get("hourly_budget") or 4500),
                per_second=float(extra.get("max_per_second") or DEFAULT_PER_SECOND),
                redis_url=self.redis_url,
            )
            self._client = YuqueClient(
                self._base_url(conn),
                token,
                user_agent=str(extra.get("user_agent") or DEFAULT_USER_AGENT),
                budget=budget,
                bind_account=True,
                **kwargs,
            )
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
