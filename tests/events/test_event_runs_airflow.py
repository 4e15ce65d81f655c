"""The real thing (issue 37, point 3): api-server, scheduler, dag-processor and triggerer on a
fresh PostgreSQL metadata DB. Events recorded in the event store (as the receiver records them)
-> the source's AssetWatcher trigger claims them in the triggerer -> an asset event -> Airflow
schedules the sync DAG -> the run re-reads only the named items (no folder listed) -> the run
log marks its trigger and the batch is consumed by that run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from include.config import SourceConfig
from include.contract import document_id
from include.index import open_index
from include.stores import open_state_store
from include.stores.events import EventHint, EventStore
from plugins.engine import run_pipeline
from tests.conftest import ROOT
from tests.simulators.feishu import FeishuSimulator, demo_drive
from tests.support.airflow_stack import AirflowProcesses, component_env
from tests.support.postgres import scratch_database
from tests.support.server import free_port, serve_asgi

pytestmark = [pytest.mark.airflow, pytest.mark.postgres, pytest.mark.slow]

DAG_ID = "sync_feishu_drive"
SOURCE_ID = "feishu:drive"


def _entry(root: str) -> dict[str, Any]:
    return {
        "kind": "feishu",
        "name": "drive",
        "conn_id": "feishu_default",
        # the first interval ends 2027-01-01: no scheduled run starts during the test, so every
        # run it sees was started by events
        "schedule": "0 0 1 1 *",
        "batch_size": 4,
        "events": {"mode": "callback", "debounce_seconds": 1},
        "options": {
            "folders": [root],
            "types": ["doc", "docx", "sheet", "bitable", "file"],
            "deferrable": False,
            "export_poll_interval": 0.05,
            "export_poll_max_interval": 0.2,
        },
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("events_stack")
    sim = FeishuSimulator(app_id="cli_eventsstack", app_secret="s3cret-events-stack", export_pending_polls=1)
    with serve_asgi(sim.app) as sim_url:
        drive = demo_drive(sim)
        dags = root / "dags"
        dags.mkdir()
        (dags / "tributary_sources.py").write_text((ROOT / "dags" / "tributary_sources.py").read_text())
        entry = _entry(drive["root"])
        (root / "sources.yaml").write_text(json.dumps({"sources": [entry]}))
        conn = {"conn_type": "http", "login": sim.app_id, "password": sim.app_secret, "host": sim_url}
        tributary = {
            "TRIBUTARY_HOME": str(root / "tributary"),
            "TRIBUTARY_STATE_URL": f"sqlite:///{root / 'tributary' / 'state.db'}",
            "TRIBUTARY_INDEX_PATH": str(root / "tributary" / "index.db"),
            "TRIBUTARY_STAGING_DIR": str(root / "tributary" / "staging"),
            "TRIBUTARY_SOURCES": str(root / "sources.yaml"),
            "AIRFLOW_CONN_FEISHU_DEFAULT": json.dumps(conn),
        }
        (root / "tributary").mkdir()
        with pytest.MonkeyPatch.context() as mp:
            for name, value in tributary.items():
                mp.setenv(name, value)
            mp.delenv("TRIBUTARY_REDIS_URL", raising=False)
            assert run_pipeline(SourceConfig(**entry), run_id="first").counts["new"] == 6  # indexed before
            with scratch_database("tributary_events") as meta_url:
                port = free_port()
                env = {
                    **os.environ,
                    **component_env(
                        airflow_home=root / "airflow",
                        meta_url=meta_url,
                        port=port,
                        executor="LocalExecutor",
                        dags_folder=dags,
                    ),
                    **tributary,
                }
                env.pop("TRIBUTARY_REDIS_URL", None)
                procs = AirflowProcesses(env=env, logs=root / "logs")
                http = None
                try:
                    procs.start_local_stack(port, triggerer=True)
                    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
                    http.headers["Authorization"] = "Bearer " + http.get("/auth/token").json()["access_token"]
                    procs.wait("the DAG parsed", lambda: http.get(f"/api/v2/dags/{DAG_ID}").status_code == 200)
                    yield {"http": http, "procs": procs, "sim": sim, "drive": drive, "entry": entry}
                finally:
                    if http is not None:
                        http.close()
                    procs.stop()


def _finished_event_run(http: httpx.Client) -> dict[str, Any] | None:
    runs = http.get(f"/api/v2/dags/{DAG_ID}/dagRuns").json()["dag_runs"]
    done = [r for r in runs if r["run_type"] == "asset_triggered" and r["state"] in ("success", "failed")]
    return done[0] if done else None


def test_recorded_events_schedule_the_sync_through_an_asset_watcher(stack: dict[str, Any]) -> None:
    http, procs, sim, drive = stack["http"], stack["procs"], stack["sim"], stack["drive"]
    source = SourceConfig(**stack["entry"])
    sim.edit(drive["docx"], "# 产品介绍\nstreamedgamma")
    sim.trash(drive["doc"])
    before = dict(sim.counters)
    state = open_state_store()
    try:
        EventStore(state).record(
            SOURCE_ID,
            [
                EventHint("ev-edit-1", drive["docx"], "changed", "drive.file.edit_v1"),
                EventHint("ev-trash-1", drive["doc"], "deleted", "drive.file.trashed_v1"),
            ],
        )
    finally:
        state.close()

    run = procs.wait("an asset-triggered run to finish", lambda: _finished_event_run(http), timeout=420)
    assert run["state"] == "success", procs.tails()
    # Airflow's own record: the asset event our trigger made, with its small payload
    events = http.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run['dag_run_id']}/upstreamAssetEvents").json()
    (event,) = events["asset_events"]
    assert event["uri"] == "tributary://events/feishu/drive"
    assert event["extra"]["from_trigger"] is True
    payload = event["extra"]["payload"]
    assert (payload["source"], payload["purpose"], payload["events"], payload["keys"]) == (SOURCE_ID, "sync", 2, 2)

    state = open_state_store()
    try:
        logged = state.get_run(run["dag_run_id"], SOURCE_ID)
        assert logged is not None
        trigger = logged["params"]["trigger"]
        assert trigger["batch_ids"] == [payload["batch_id"]]
        assert sorted(trigger["event_ids"]) == ["ev-edit-1", "ev-trash-1"]
        assert (logged["counts"]["changed"], logged["counts"]["deleted"]) == (1, 1)
        (batch,) = EventStore(state).batches([payload["batch_id"]])
        assert batch.run_id == run["dag_run_id"]
    finally:
        state.close()
    assert sim.counters["list_requests"] == before.get("list_requests", 0)  # no folder listed
    index = open_index(source.index)
    try:
        hits = {h.doc_id for h in index.search("streamedgamma", k=5, source=SOURCE_ID)}
        assert hits == {document_id(SOURCE_ID, drive["docx"])}
        assert index.count(source=SOURCE_ID, doc_id=document_id(SOURCE_ID, drive["doc"])) == 0
    finally:
        index.close()
