"""Airflow's own REST API (v2), called with the signed-in user's token: Airflow's auth manager,
not this app, decides whether that user may trigger or pause a DAG.

The API server is this process's own server: requests go to the socket the page's request came
in on (``scope["server"]``), so no proxy or public URL stands in between.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
from fastapi import Request

from plugins.tributary_airflow.ui.auth import presented_token

__all__ = ["AirflowAnswer", "dag_info", "pause_dag", "trigger_dag_run"]

_TIMEOUT = httpx.Timeout(10.0)


@dataclass(frozen=True, slots=True)
class AirflowAnswer:
    """What Airflow said: its status and JSON body (``error``: why there is none)."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and 200 <= self.status < 300

    @property
    def detail(self) -> str:
        if self.error:
            return self.error
        detail = self.body.get("detail")
        return f"Airflow answered {self.status}" + (f": {detail}" if detail else "")


def _base_url(request: Request) -> str:
    host, port = request.scope.get("server") or ("127.0.0.1", 8080)
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{host}:{port}"


async def _call(request: Request, method: str, path: str, json: dict[str, Any] | None = None) -> AirflowAnswer:
    token = presented_token(request)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with httpx.AsyncClient(base_url=_base_url(request), timeout=_TIMEOUT, trust_env=False) as client:
            resp = await client.request(method, path, json=json, headers=headers)
    except httpx.HTTPError as exc:
        return AirflowAnswer(0, error=f"Airflow's API did not answer ({type(exc).__name__})")
    try:
        body = resp.json()
    except ValueError:
        body = {}
    return AirflowAnswer(resp.status_code, body if isinstance(body, dict) else {"detail": body})


async def dag_info(request: Request, dag_id: str) -> AirflowAnswer:
    """``GET /api/v2/dags/{dag_id}``: its pause flag, schedule and next run."""
    return await _call(request, "GET", f"/api/v2/dags/{quote(dag_id, safe='')}")


async def trigger_dag_run(request: Request, dag_id: str, conf: dict[str, Any]) -> AirflowAnswer:
    """``POST /api/v2/dags/{dag_id}/dagRuns``: a manual run now (no logical date) with ``conf``."""
    payload = {"logical_date": None, "conf": conf}
    return await _call(request, "POST", f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns", payload)


async def pause_dag(request: Request, dag_id: str, paused: bool) -> AirflowAnswer:
    """``PATCH /api/v2/dags/{dag_id}`` with ``is_paused``."""
    return await _call(request, "PATCH", f"/api/v2/dags/{quote(dag_id, safe='')}", {"is_paused": paused})


async def dag_run(request: Request, dag_id: str, run_id: str) -> AirflowAnswer:
    path = f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}"
    return await _call(request, "GET", path)
