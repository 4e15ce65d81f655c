"""Every DAG file imports without errors and without touching the network."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support.airflow import write_sources

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list:
    attempts: list = []

    def refuse(self, address, *a, **kw):
        attempts.append(address)
        raise OSError(f"network access during DAG import: {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


def test_dagbag_imports_cleanly_offline(no_network: list, tmp_path: Path, monkeypatch) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    assert "sync_web_demo" in bag.dags
    assert no_network == []


def test_factory_builds_one_dag_per_source_with_the_pipeline(tmp_path: Path, monkeypatch) -> None:
    from include.dag_factory import build_dags

    sources = write_sources(
        tmp_path / "s.yaml",
        [
            {"kind": "web", "name": "docs", "options": {"seeds": ["https://example.org/"]}},
            {"kind": "files", "name": "share", "schedule": "@hourly", "options": {"root": "/srv/share"}},
        ],
    )
    dags = build_dags(sources)
    assert set(dags) == {"sync_web_docs", "sync_files_share"}
    dag = dags["sync_web_docs"]
    assert {t.task_id for t in dag.tasks} == {"discover", "fetch", "parse", "chunk", "upsert", "commit", "summary"}
    assert set(dag.params) >= {"full_resync", "dry_run", "max_items", "window_start", "window_end", "only_keys"}
    assert dag.get_task("fetch").is_mapped if hasattr(dag.get_task("fetch"), "is_mapped") else True
    assert "tributary" in dag.tags and dag.doc_md
    assert dag.default_args["retries"] >= 0 and dag.default_args["retry_exponential_backoff"]
    summary = dag.get_task("summary")
    assert [o.uri for o in summary.outlets] == ["tributary://index/sqlite/tributary"]
