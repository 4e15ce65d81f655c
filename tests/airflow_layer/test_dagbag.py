"""Every DAG file imports without errors and without touching the network."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.support import leakscan
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
    from plugins.tributary_airflow.dag_factory import build_dags

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
    # one mapped task group per batch: batch i's parse waits for batch i's fetch only
    lane = {t: dag.get_task(t).get_closest_mapped_task_group() for t in ("fetch", "parse", "chunk", "upsert")}
    assert {g.group_id for g in lane.values() if g is not None} == {"batch"} and None not in lane.values()
    assert dag.get_task("parse").upstream_task_ids == {"fetch"}
    # later stages first: a ready parse is queued before another batch's ready fetch
    assert {dag.get_task(t).weight_rule for t in lane} == {"upstream"}
    assert dag.get_task("commit").get_closest_mapped_task_group() is None
    assert "tributary" in dag.tags and dag.doc_md
    assert dag.default_args["retries"] >= 0 and dag.default_args["retry_exponential_backoff"]
    summary = dag.get_task("summary")
    assert [o.uri for o in summary.outlets] == ["tributary://index/sqlite/tributary"]


def test_dagbag_reports_a_typo_option_and_keeps_the_other_sources(
    no_network: list, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A typo (``max_page``) fails when the DAG files are parsed, not when a run starts: an import
    error names the source and the key; the valid sources keep their DAGs."""
    from airflow.dag_processing.dagbag import DagBag

    sources = write_sources(
        tmp_path / "s.yaml",
        [
            {"kind": "web", "name": "good", "options": {"seeds": ["https://example.org/"], "quarantine_after": 3}},
            {"kind": "web", "name": "typo", "options": {"seeds": ["https://example.org/"], "max_page": 10}},
            {"kind": "files", "name": "share", "options": {"root": str(tmp_path)}},
        ],
    )
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(sources))
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert set(bag.dags) == {"sync_web_good", "sync_files_share"}
    [(path, error)] = bag.import_errors.items()
    # reported by the check file, so that Airflow does not mark the valid DAGs' file stale
    assert path.endswith("tributary_sources_check.py")
    assert "sync_web_typo" in error and "web:typo" in error
    assert "options.max_page: unknown option (did you mean max_pages?)" in error
    assert no_network == []


def test_dagbag_refuses_a_seed_carrying_an_access_token(
    no_network: list, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token in a seed URL would become an item key (lineage, UI, logs): refused at parse,
    pointing at the Airflow Connection, without the token in the error."""
    from airflow.dag_processing.dagbag import DagBag

    token = "tok-3f9a1c77e2"
    leakscan.register_secret("seed access_token", token)  # the session scan checks every log
    monkeypatch.setenv("LEAKY_SEED_TOKEN", token)  # the sources file holds ${LEAKY_SEED_TOKEN}, not the token
    seed = "https://example.org/docs/?page=1&access_token=${LEAKY_SEED_TOKEN}"
    sources = write_sources(tmp_path / "s.yaml", [{"kind": "web", "name": "leaky", "options": {"seeds": [seed]}}])
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(sources))
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.dags == {}
    [error] = bag.import_errors.values()
    assert "web:leaky" in error and "access_token" in error and "Airflow Connection" in error
    assert token not in error


@pytest.mark.airflow
def test_a_typo_leaves_the_other_sources_scheduled_in_the_metadata_db(tmp_path: Path) -> None:
    """What the dag-processor stores (``airflow dags reserialize``: parse and sync to the DB):
    the import error names the bad source, and the valid source's DAG is not stale (Airflow marks
    every DAG of a file with an import error stale, and stale DAGs are not scheduled)."""
    import sqlite3
    import subprocess
    import sys

    sources = write_sources(
        tmp_path / "s.yaml",
        [
            {"kind": "web", "name": "good", "options": {"seeds": ["https://example.org/"]}},
            {"kind": "web", "name": "typo", "options": {"seeds": ["https://example.org/"], "max_page": 3}},
        ],
    )
    home = tmp_path / "airflow"
    env = {**os.environ, "AIRFLOW_HOME": str(home), "TRIBUTARY_SOURCES": str(sources)}
    env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", None)  # this AIRFLOW_HOME's own SQLite DB
    for command in (["db", "migrate"], ["dags", "reserialize"]):
        subprocess.run(
            [sys.executable, "-m", "airflow", *command], env=env, check=True, capture_output=True, timeout=300
        )
    db = sqlite3.connect(home / "airflow.db")
    try:
        dags = dict(db.execute("SELECT dag_id, is_stale FROM dag").fetchall())
        errors = dict(db.execute("SELECT filename, stacktrace FROM import_error").fetchall())
    finally:
        db.close()
    assert dags == {"sync_web_good": 0}
    [(filename, error)] = errors.items()
    assert filename == "tributary_sources_check.py"
    assert "web:typo" in error and "options.max_page: unknown option (did you mean max_pages?)" in error
