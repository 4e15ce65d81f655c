"""Connections: where a source's credentials come from, as a typed record.

This is the one module of the ground that imports Airflow: Airflow's secrets backends (the
metadata DB, ``AIRFLOW_CONN_<ID>`` environment variables, Vault, AWS Secrets Manager...) are
where credentials live, and ``BaseHook.get_connection`` is the way to read all of them. Every
other module receives a :class:`ConnectionRecord` and never sees Airflow. Airflow is imported
when a connection is first read, never at import: DAG parsing must not reach the backends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["ConnectionRecord", "aget_connection", "get_connection"]


class _AirflowConnection(Protocol):
    """The attributes of ``airflow.sdk.Connection`` a record is built from."""

    conn_id: str
    conn_type: str | None
    host: str | None
    schema: str | None
    login: str | None
    password: str | None
    port: int | None

    @property
    def extra_dejson(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class ConnectionRecord:
    """One connection's fields. ``password`` and ``extra`` (which may hold tokens, headers,
    cookies) stay out of ``repr``: a record that reaches a log or a traceback shows no secret."""

    conn_id: str
    conn_type: str = ""
    host: str | None = None
    schema: str | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    port: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_airflow(cls, conn: _AirflowConnection) -> ConnectionRecord:
        """The record of an Airflow ``Connection``. ``extra_dejson`` decodes the extra JSON and
        registers its sensitive values (``token``, ``password``...) with Airflow's log masker."""
        return cls(
            conn_id=conn.conn_id,
            conn_type=conn.conn_type or "",
            host=conn.host or None,
            schema=conn.schema or None,
            login=conn.login or None,
            password=conn.password or None,
            port=conn.port or None,
            extra=dict(conn.extra_dejson or {}),
        )


def get_connection(conn_id: str) -> ConnectionRecord:
    """The connection ``conn_id`` from Airflow's secrets backends (``AirflowNotFoundException``
    when none has it)."""
    # deferred: Airflow (and its secrets backends) load only when a credential is needed, not
    # when a DAG file is parsed or a component is imported
    from airflow.sdk import BaseHook

    return ConnectionRecord.from_airflow(BaseHook.get_connection(conn_id))


async def aget_connection(conn_id: str) -> ConnectionRecord:
    """The same without blocking the event loop (triggers run on the triggerer's loop)."""
    # deferred: as in get_connection
    from airflow.sdk import BaseHook

    return ConnectionRecord.from_airflow(await BaseHook.aget_connection(conn_id))
