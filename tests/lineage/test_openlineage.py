"""OpenLineage events and Airflow asset events from a real sync run (dag.test() in a subprocess,
because the OpenLineage provider reads its transport once per process).

With the file transport configured, every sync task emits START/COMPLETE events naming the
source folder as input dataset and the SQLite index as output dataset, with a ``tributary`` run
facet holding the counts; the summary task's asset event carries the run's counts in its extra.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.airflow import ensure_airflow_db, write_sources

pytestmark = pytest.mark.airflow

_SCRIPT = """
import json, sys
from tests.support.airflow import run_dag
from airflow.models.asset import AssetEvent, AssetModel
from airflow.utils.session import create_session
from sqlalchemy import select

dr = run_dag("sync_files_ol")
with create_session() as session:
    rows = session.execute(
        select(AssetEvent.extra, AssetModel.uri, AssetEvent.source_run_id, AssetEvent.source_task_id)
        .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
        .where(AssetEvent.source_dag_id == "sync_files_ol")
    ).all()
print("RESULT" + json.dumps({"state": str(dr.state), "run_id": dr.run_id,
      "events": [{"extra": r[0], "uri": r[1], "run_id": r[2], "task_id": r[3]} for r in rows]}))
"""


def test_sync_emits_openlineage_events_and_an_asset_event_with_counts(tributary_home: Path, tmp_path: Path) -> None:
    ensure_airflow_db()
    root = tmp_path / "notes"
    root.mkdir()
    for i in range(3):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nRiver note number {i}.\n", encoding="utf-8")
    sources = write_sources(
        tmp_path / "sources.yaml",
        [{"kind": "files", "name": "ol", "schedule": "@daily", "options": {"root": str(root)}, "batch_size": 2}],
    )
    events_file = tmp_path / "openlineage.jsonl"
    env = {
        **os.environ,
        "TRIBUTARY_HOME": str(tributary_home),
        "TRIBUTARY_SOURCES": str(sources),
        "TRIBUTARY_TASK_RETRIES": "0",
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events_file), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "tributary-test",
        # emit inline-ish: a thread instead of a fork per event (same events, less overhead)
        "AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD": "True",
    }
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=400
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    result = json.loads(proc.stdout.split("RESULT", 1)[1].splitlines()[0])
    assert result["state"].endswith("success")

    # --- the asset event: one, from the summary task, with the run's counts
    [event] = result["events"]
    assert event["uri"] == "tributary://index/sqlite/tributary" and event["task_id"] == "summary"
    extra = event["extra"]
    assert extra["source"] == "files:ol" and extra["run_id"] == result["run_id"]
    assert (extra["new"], extra["changed"], extra["deleted"], extra["failed"]) == (3, 0, 0, 0)
    assert extra["chunks_written"] >= 3

    # --- OpenLineage: events for every task, naming our datasets, counts in the run facet
    assert events_file.exists(), proc.stderr[-3000:]
    events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]
    tasks = [e for e in events if e.get("job", {}).get("name", "").startswith("sync_files_ol.")]
    complete = {e["job"]["name"].split(".", 1)[1]: e for e in tasks if e["eventType"] == "COMPLETE"}
    assert {"discover", "fetch", "parse", "chunk", "upsert", "commit", "summary"} <= set(complete), sorted(complete)
    index_ns = f"sqlite://{(tributary_home / 'index.db').resolve()}"
    for name, e in complete.items():
        assert e["job"]["namespace"] == "tributary-test"
        assert [(d["namespace"], d["name"]) for d in e["inputs"]] == [("file", str(root.resolve()))], name
        assert [(d["namespace"], d["name"]) for d in e["outputs"]] == [(index_ns, "tributary")], name
        facet = e["run"]["facets"]["tributary"]
        assert facet["source"] == "files:ol" and facet["tributaryRunId"] == result["run_id"]
    assert complete["discover"]["run"]["facets"]["tributary"]["counts"] == {"batches": 2}
    summary_counts = complete["summary"]["run"]["facets"]["tributary"]["counts"]
    assert summary_counts["new"] == 3 and summary_counts["chunks_written"] == extra["chunks_written"]
    assert complete["commit"]["run"]["facets"]["tributary"]["counts"]["new"] == 3
    fetch_counts = [
        e["run"]["facets"]["tributary"]["counts"]
        for e in tasks
        if e["eventType"] == "COMPLETE" and e["job"]["name"] == "sync_files_ol.fetch"
    ]
    assert sum(c["items"] for c in fetch_counts) == 3
    # the DAG run itself is reported too (the provider's own DAG-level COMPLETE event)
    assert "COMPLETE" in {e["eventType"] for e in events if e.get("job", {}).get("name") == "sync_files_ol"}
