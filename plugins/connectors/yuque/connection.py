"""A configured :class:`YuqueClient` from a Connection record (``include.connections``).

Connection (``yuque_default`` or the source's ``conn_id``) fields:

- ``host``: ``www.yuque.com`` or a team space's own host (``<space>.yuque.com``: team tokens only
  work there); a scheme and ``/api/v2`` may be included. ``schema`` may name the scheme
  (``http``/``https``) when ``host`` has none, as with the HTTP provider; ``port`` is honoured.
- ``password``: the token (sent as ``X-Auth-Token``; never logged).
- ``extra`` (all optional): ``user_agent``, ``hourly_budget`` (default 4500, per Yuque account:
  every Connection whose token belongs to the same account shares it), ``max_per_second``
  (default 8: requests of all workers of the account together are spaced at most this dense),
  ``timeout``, ``max_attempts``, ``backoff_initial``, ``backoff_max``, ``max_retry_after``,
  ``max_response_bytes`` (largest response body read, after its content-coding; default 64 MiB).

The connector reads the record when the client is first needed, not at import or construction,
so DAG parsing never touches the secrets backend; the Airflow hook
(``plugins.tributary_airflow.hooks.yuque``) builds its client with the same function.
"""

from __future__ import annotations

from typing import Any

from include.connections import ConnectionRecord
from plugins.connectors.yuque.budget import RequestBudget
from plugins.connectors.yuque.client import DEFAULT_USER_AGENT, YuqueClient

__all__ = ["DEFAULT_CONN_ID", "DEFAULT_PER_SECOND", "base_url_of", "client_from_conn"]

DEFAULT_CONN_ID = "yuque_default"
_FLOAT_EXTRAS = ("timeout", "backoff_initial", "backoff_max", "max_retry_after")
# Yuque publishes no burst limit; ~200 parallel fetches are known to trip it, a few a second never
DEFAULT_PER_SECOND = 8.0


def base_url_of(conn: ConnectionRecord) -> str:
    """``scheme://host[:port][/path]`` of the Connection (``https://www.yuque.com`` by default)."""
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


def client_from_conn(conn: ConnectionRecord, *, redis_url: str | None = None) -> YuqueClient:
    """A client bound to the Connection's account; ``ValueError`` when it holds no token."""
    extra = conn.extra
    token = conn.password or extra.get("token")
    if not token:
        raise ValueError(f"connection {conn.conn_id!r} has no token (put it in the password field)")
    kwargs: dict[str, Any] = {k: float(extra[k]) for k in _FLOAT_EXTRAS if extra.get(k) is not None}
    for name in ("max_attempts", "max_response_bytes"):
        if extra.get(name) is not None:
            kwargs[name] = int(extra[name])
    budget = RequestBudget(
        str(token),
        limit=int(extra.get("hourly_budget") or 4500),
        per_second=float(extra.get("max_per_second") or DEFAULT_PER_SECOND),
        redis_url=redis_url,
    )
    return YuqueClient(
        base_url_of(conn),
        str(token),
        user_agent=str(extra.get("user_agent") or DEFAULT_USER_AGENT),
        budget=budget,
        bind_account=True,
        **kwargs,
    )
