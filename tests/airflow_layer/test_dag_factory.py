"""The DAG factory's one table of fetch operators, and the Airflow callbacks the DAGs carry."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from include.config import SourceConfig
from plugins.engine import run_pipeline
from plugins.engine.alerts import build_failure_summary
from plugins.tributary_airflow.callbacks import airflow_base_url, on_task_failure, sdk_dag_run_state
from plugins.tributary_airflow.dag_factory import FETCH_OPERATORS, build_dag, fetch_operator
from plugins.tributary_airflow.hooks import StateStoreHook
from plugins.tributary_airflow.operators.feishu import FeishuExportFetchOperator
from plugins.tributary_airflow.operators.sync import FetchOperator
from tests.support.airflow import write_sources

WEB = {"seeds": ["https://example.org/"]}
FEISHU = {"folders": ["fldcnX"]}


def test_the_table_names_the_feishu_fetch_operator_and_nothing_else() -> None:
    assert FETCH_OPERATORS == {"feishu": "plugins.tributary_airflow.operators.feishu.FeishuExportFetchOperator"}
    feishu = build_dag(SourceConfig(kind="feishu", name="drive", options=FEISHU))
    assert feishu.get_task("fetch").operator_class is FeishuExportFetchOperator
    web = build_dag(SourceConfig(kind="web", name="site", options=WEB))
    assert web.get_task("fetch").operator_class is FetchOperator


def test_a_source_option_overrides_the_table() -> None:
    plain = "plugins.tributary_airflow.operators.sync.FetchOperator"
    feishu = SourceConfig(kind="feishu", name="drive", options={**FEISHU, "fetch_operator": plain})
    assert fetch_operator(feishu) is FetchOperator
    deferring = "plugins.tributary_airflow.operators.feishu.FeishuExportFetchOperator"
    assert fetch_operator(SourceConfig(kind="web", name="site", options={**WEB, "fetch_operator": deferring})) is (
        FeishuExportFetchOperator
    )


def test_a_fetch_operator_that_is_no_operator_is_refused_naming_the_source() -> None:
    source = SourceConfig(kind="web", name="site", options={**WEB, "fetch_operator": "include.config.SourceConfig"})
    with pytest.raises(TypeError, match=r"web:site: fetch_operator include\.config\.SourceConfig is not an Airflow"):
        build_dag(source)


@dataclass
class _FailedTask:
    """What the callback reads of Airflow's task instance."""

    task_id: str
    map_index: int = -1


def test_a_failed_task_writes_its_error_into_the_open_run(
    tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha\n", encoding="utf-8")
    entry = {"kind": "files", "name": "cb", "options": {"root": str(root)}}
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "s.yaml", [entry])))
    source = SourceConfig(**entry)
    dag = build_dag(source)
    run_pipeline(source, run_id="done")
    with StateStoreHook() as store:
        store.start_run("open", source.source_id, dag_id=dag.dag_id, run_type="manual")
    for run_id, index in (("open", 2), ("open", 2), ("done", 0), ("never-opened", 0)):
        on_task_failure({"dag": dag, "run_id": run_id, "ti": _FailedTask("fetch", index), "exception": OSError("gone")})
    with StateStoreHook() as store:
        opened = store.get_run("open", source.source_id)
        assert opened["status"] == "failed"
        assert opened["error"] == "fetch[2]: OSError: gone"  # a retried callback adds no second line
        assert store.get_run("done", source.source_id)["status"] == "success"  # a finished run stays one
        assert store.get_run("never-opened", source.source_id) is None


def test_alert_links_use_airflows_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://127.0.0.1:8081/")
    assert airflow_base_url() == "http://127.0.0.1:8081"
    fields = {"source": "web:x", "dag_id": "sync_web_x", "run_id": "manual__1", "failed_stage": "fetch", "run": None}
    passed = build_failure_summary(**fields, items=[], base_url="http://airflow.internal:8080/")
    assert passed["run_url"] == "http://airflow.internal:8080/dags/sync_web_x/runs/manual__1"
    default = build_failure_summary(**fields, items=[])  # the engine's own default: the same setting
    assert default["audit_url"] == "http://127.0.0.1:8081/tributary/runs/manual__1"


def test_outside_a_task_there_is_no_task_sdk_to_ask() -> None:
    assert sdk_dag_run_state() is None


@pytest.mark.parametrize("kind, options", [("web", WEB), ("feishu", FEISHU)])
def test_every_task_has_a_time_limit(kind: str, options: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    """A task that hangs where no deadline of ours reaches (issue 33, point 1: a sniffer that never
    returned kept its run "running") is failed by Airflow, and its run closed by the callback."""
    import datetime as dt

    dag = build_dag(SourceConfig(kind=kind, name="limits", options=options))
    assert dag.tasks and all(t.execution_timeout == dt.timedelta(minutes=120) for t in dag.tasks)
    monkeypatch.setenv("TRIBUTARY_TASK_TIMEOUT_MINUTES", "7")
    dag = build_dag(SourceConfig(kind=kind, name="limits", options=options))
    assert all(t.execution_timeout == dt.timedelta(minutes=7) for t in dag.tasks)
