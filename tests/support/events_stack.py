"""A running Airflow (api-server, scheduler, dag-processor, triggerer; LocalExecutor on a fresh
PostgreSQL metadata DB) with Feishu and Yuque sources whose simulators push their callbacks to
the real receiver in the API server (issue 37): shared by the end-to-end test and the freshness
benchmark.

The sources are synced once in-process before the stack starts (their first index, and for a
Feishu source with events on, its subscriptions), so every run the stack then shows was started
by events, or by a test on purpose.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from include.config import SourceConfig
from include.index import open_index
from include.stores import StateStore, open_state_store
from plugins.engine import run_pipeline
from tests.conftest import ROOT
from tests.simulators.feishu import FeishuSimulator
from tests.simulators.yuque import YuqueSimulator
from tests.support.airflow_stack import AirflowProcesses, component_env
from tests.support.postgres import scratch_database
from tests.support.server import free_port, serve_asgi

__all__ = ["EventsStack", "events_stack"]


@dataclass(kw_only=True)
class EventsStack(AirflowProcesses):
    base_url: str
    root: Path
    sources: dict[str, SourceConfig] = field(default_factory=dict)  # source id -> config
    urls: dict[str, str] = field(default_factory=dict)  # simulator name -> its base URL
    http: httpx.Client | None = None

    def receiver(self, source_id: str) -> str:
        kind, name = source_id.split(":", 1)
        return f"{self.base_url}/tributary/events/{kind}/{name}"

    def store(self) -> StateStore:
        return open_state_store(self.env["TRIBUTARY_STATE_URL"])

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        assert self.http is not None
        resp = self.http.get(f"/api/v2/dags/{dag_id}/dagRuns", params={"limit": 100})
        resp.raise_for_status()
        return list(resp.json()["dag_runs"])

    def search(self, source_id: str, text: str) -> set[str]:
        index = open_index(self.sources[source_id].index)
        try:
            return {hit.doc_id for hit in index.search(text, k=20, source=source_id)}
        finally:
            index.close()


def _tributary_env(root: Path, sources: list[dict[str, Any]], conns: Mapping[str, Any]) -> dict[str, str]:
    (root / "sources.yaml").write_text(json.dumps({"sources": sources}))
    (root / "tributary").mkdir(exist_ok=True)
    return {
        "TRIBUTARY_HOME": str(root / "tributary"),
        "TRIBUTARY_STATE_URL": f"sqlite:///{root / 'tributary' / 'state.db'}",
        "TRIBUTARY_INDEX_PATH": str(root / "tributary" / "index.db"),
        "TRIBUTARY_STAGING_DIR": str(root / "tributary" / "staging"),
        "TRIBUTARY_SOURCES": str(root / "sources.yaml"),
        "TRIBUTARY_TASK_RETRIES": "0",
        **{name: json.dumps(value) for name, value in conns.items()},
    }


@contextlib.contextmanager
def events_stack(
    root: Path,
    sources: list[dict[str, Any]],
    conns: Mapping[str, Any],
    *,
    simulators: Mapping[str, FeishuSimulator | YuqueSimulator],
    sync_first: bool = True,
) -> Iterator[EventsStack]:
    """Serve ``simulators`` (name -> simulator; ``conns`` may name their URLs as ``{name}``),
    sync every source once in-process, then start Airflow. Yields the stack, logged in."""
    exits = contextlib.ExitStack()
    try:
        urls = {name: exits.enter_context(serve_asgi(sim.app)) for name, sim in simulators.items()}
        filled = _fill(conns, urls)
        tributary = _tributary_env(root, sources, filled)
        configs = {c.source_id: c for c in (SourceConfig(**s) for s in sources)}
        with pytest.MonkeyPatch.context() as mp:
            for name, value in tributary.items():
                mp.setenv(name, value)
            mp.delenv("TRIBUTARY_REDIS_URL", raising=False)
            if sync_first:
                for config in configs.values():
                    assert run_pipeline(config, run_id=f"first-{config.name}").status == "success"
            dags = root / "dags"
            dags.mkdir(exist_ok=True)
            (dags / "tributary_sources.py").write_text((ROOT / "dags" / "tributary_sources.py").read_text())
            meta_url = exits.enter_context(scratch_database("tributary_e2e"))
            port = free_port()
            env = {
                **os.environ,
                **component_env(
                    airflow_home=root / "airflow", meta_url=meta_url, port=port, executor="LocalExecutor",
                    dags_folder=dags,
                ),
                "AIRFLOW__CORE__PARALLELISM": "4",
                "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(root / "airflow" / "logs"),
                **tributary,
            }  # fmt: skip
            for var in ("TRIBUTARY_REDIS_URL", "AIRFLOW__OPENLINEAGE__TRANSPORT"):
                env.pop(var, None)
            stack = EventsStack(
                base_url=f"http://127.0.0.1:{port}", env=env, root=root, logs=root / "logs", sources=configs, urls=urls
            )
            try:
                stack.start_local_stack(port, triggerer=True)
                http = stack.http = httpx.Client(base_url=stack.base_url, timeout=30)
                http.headers["Authorization"] = "Bearer " + http.get("/auth/token").json()["access_token"]
                dag_ids = [c.dag_id for c in configs.values()]
                stack.wait("the DAGs parsed", lambda: all(http.get(f"/api/v2/dags/{d}").is_success for d in dag_ids))
                yield stack
            finally:
                if stack.http is not None:
                    stack.http.close()
                stack.stop()
    finally:
        for sim in simulators.values():
            hooks = sim.events if isinstance(sim, FeishuSimulator) else sim.webhooks
            hooks.close()
        exits.close()


def _fill(conns: Mapping[str, Any], urls: Mapping[str, str]) -> dict[str, Any]:
    """Connections with ``{name}`` in a host replaced by that simulator's URL."""
    out = {}
    for var, conn in conns.items():
        conn = dict(conn)
        host = conn.get("host")
        if isinstance(host, str) and host.startswith("{") and host.endswith("}"):
            conn["host"] = urls[host[1:-1]]
        out[var] = conn
    return out
