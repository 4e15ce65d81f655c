"""FeishuExportFetchOperator on a real batch manifest: the deferred path (execute -> trigger ->
execute_complete) and the in-task fallback write the same fetched manifest; whether it defers
follows Airflow's ``[operators] default_deferrable``, the source's ``deferrable`` option overriding it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from airflow.triggers.base import BaseTrigger

from include.stores import open_state_store
from plugins.engine import RunContext, discover_stage, get_source, read_stage_manifest, start_run
from plugins.engine.records import ItemRecord
from plugins.tributary_airflow.hooks.feishu import FeishuHook
from plugins.tributary_airflow.operators.feishu import FeishuExportFetchOperator
from tests.simulators.feishu import FeishuSimulator
from tests.support.airflow import write_sources
from tests.support.finished_run import task_context


@pytest.fixture
def batch(
    sim: FeishuSimulator, feishu_conn: str, tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    folder = sim.add_folder("批次")
    sim.add("docx", "文档一", folder, "# 一\n第一篇")
    sim.add("sheet", "表格二", folder, [["列"], ["值"]])
    sim.add("file", "附件三.txt", folder, "附件内容".encode(), media_type="text/plain")
    denied = sim.add("docx", "文档四", folder, "x")
    sim.set_export(denied, 110, pending_polls=1)
    options = {"folders": [folder], "export_poll_interval": 0.05, "export_poll_max_interval": 0.1}
    return _plan_one_batch(tmp_path, monkeypatch, "ops", options, "manual__op_test")


def _plan_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, options: dict[str, Any], run_id: str
) -> str:
    """Configure the Feishu source ``name``, start run ``run_id`` and plan it: its one batch."""
    sources = write_sources(
        tmp_path / "sources.yaml", [{"kind": "feishu", "name": name, "schedule": None, "options": options}]
    )
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(sources))
    ctx = RunContext(source=get_source(f"feishu:{name}"), run_id=run_id)
    store = open_state_store()
    try:
        start_run(ctx, store)
        (path,) = discover_stage(ctx, store)["batches"]
        assert isinstance(path, str)
    finally:
        store.close()
    return path


CONTEXT = task_context("manual__op_test")


def _first_event(trigger: BaseTrigger) -> dict[str, Any]:
    """The trigger's first event, run as the triggerer runs it (on an event loop)."""

    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(first())


def _file_name(item: ItemRecord) -> str:
    assert item.raw is not None, item.item_key
    return item.raw.file_name


def _check(manifest_path: str) -> None:
    manifest = read_stage_manifest(manifest_path)
    assert sorted(_file_name(e) for e in manifest.items) == ["文档一.docx", "表格二.xlsx", "附件三.txt"]
    [failure] = manifest.failures
    assert failure.reason == "export_status_110" and failure.retryable is False


def test_deferred_path(batch: str, sim: FeishuSimulator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")  # Airflow's default decides
    op = FeishuExportFetchOperator(task_id="fetch", source="feishu:ops", batch=batch)
    with pytest.raises(TaskDeferred) as info:
        op.execute(CONTEXT)
    deferred = info.value
    assert deferred.method_name == "execute_complete"
    assert sim.counters["export_creations"] == 3 and sim.counters["export_polls"] == 0  # nothing waited in the task

    event = _first_event(deferred.trigger)
    _check(op.execute_complete(CONTEXT, event, **(deferred.kwargs or {})))


def test_openlineage_facets_of_the_export_fetch(batch: str, sim: FeishuSimulator, tributary_home: Path) -> None:
    """Deferred, the task resumes in a fresh operator (as Airflow does); that one reports the
    fetch step's lineage: the drive folder in, the index out, the batch's counts and timing."""
    first = FeishuExportFetchOperator(task_id="fetch", source="feishu:ops", batch=batch, deferrable=True)
    with pytest.raises(TaskDeferred) as info:
        first.execute(CONTEXT)

    resumed = FeishuExportFetchOperator(task_id="fetch", source="feishu:ops", batch=batch, deferrable=True)
    resumed.execute_complete(CONTEXT, _first_event(info.value.trigger), **(info.value.kwargs or {}))
    lineage = resumed.get_openlineage_facets_on_complete(None)

    [folder] = get_source("feishu:ops").options["folders"]
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("feishu", folder)]
    index_ns = f"sqlite://{(tributary_home / 'index.db').resolve()}"
    assert [(d.namespace, d.name) for d in lineage.outputs] == [(index_ns, "tributary")]
    facet = lineage.run_facets["tributary"]
    assert (facet.source, facet.stage, facet.tributaryRunId) == ("feishu:ops", "fetch", "manual__op_test")
    assert facet.counts == {"items": 3, "unchanged": 0, "failed": 1}
    assert facet.durationMs is not None and facet.durationMs >= 0


def test_in_task_fallback(batch: str, sim: FeishuSimulator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    op = FeishuExportFetchOperator(task_id="fetch", source="feishu:ops", batch=batch, deferrable=False)
    _check(op.execute(CONTEXT))
    assert sim.counters["export_polls"] >= 3


def test_not_deferrable_by_default(batch: str, sim: FeishuSimulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """Airflow's own default (``default_deferrable`` False): the exports are polled in the task."""
    monkeypatch.delenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", raising=False)
    op = FeishuExportFetchOperator(task_id="fetch", source="feishu:ops", batch=batch)
    _check(op.execute(CONTEXT))
    assert sim.counters["export_polls"] >= 3


@pytest.mark.parametrize(("default", "option"), [("False", True), ("True", False)])
def test_source_option_overrides_the_airflow_default(
    sim: FeishuSimulator,
    feishu_conn: str,
    tributary_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    default: str,
    option: bool,
) -> None:
    folder = sim.add_folder("选项")
    sim.add("docx", "文档", folder, "# 文档\n正文")
    options = {"folders": [folder], "export_poll_interval": 0.05, "deferrable": option}
    batch = _plan_one_batch(tmp_path, monkeypatch, "opt", options, "manual__op_test")
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", default)
    op = FeishuExportFetchOperator(task_id="fetch", source="feishu:opt", batch=batch)
    if option:
        with pytest.raises(TaskDeferred):
            op.execute(CONTEXT)
        assert sim.counters["export_polls"] == 0
    else:
        [entry] = read_stage_manifest(op.execute(CONTEXT)).items
        assert _file_name(entry) == "文档.docx"


def test_polling_error_is_recorded_not_raised(batch: str, sim: FeishuSimulator) -> None:
    op = FeishuExportFetchOperator(task_id="fetch", source="feishu:ops", batch=batch, deferrable=True)
    with pytest.raises(TaskDeferred) as info:
        op.execute(CONTEXT)
    tickets = info.value.trigger.tickets
    event = {"status": "error", "error": "TimeoutError: triggerer restarted", "tickets": tickets}
    manifest = read_stage_manifest(op.execute_complete(CONTEXT, event, **(info.value.kwargs or {})))
    assert [_file_name(e) for e in manifest.items] == ["附件三.txt"]
    assert {f.reason for f in manifest.failures} == {"export_poll_error"}


def test_hook_reads_the_connection_lazily(sim: FeishuSimulator, feishu_conn: str) -> None:
    folder = sim.add_folder("f")
    sim.add("docx", "d", folder, "x")
    hook = FeishuHook()
    assert sim.counters["token_requests"] == 0
    try:
        assert [f["name"] for f in hook.get_conn().list_folder(folder)] == ["d"]
        assert hook.get_settings().base_url.endswith("/open-apis")
    finally:
        hook.close()


@pytest.fixture
def slow_batch(
    sim: FeishuSimulator, feishu_conn: str, tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    folder = sim.add_folder("慢批次")
    sim.add("docx", "快", folder, "# 快\n很快导出")
    slow = sim.add("docx", "慢", folder, "# 慢\n导出很慢")
    sim.set_export(slow, 0, pending_polls=8)
    sim.add("file", "附件.txt", folder, "附件内容".encode(), media_type="text/plain")
    options = {
        "folders": [folder],
        "export_poll_interval": 0.05,
        "export_poll_max_interval": 0.1,
        "export_resume_after_done_seconds": 0.2,
    }
    return _plan_one_batch(tmp_path, monkeypatch, "slow", options, "manual__op_slow")


def test_deferred_path_downloads_finished_exports_before_the_rest(slow_batch: str, sim: FeishuSimulator) -> None:
    """Issue 20.13 on the deferred path: a finished export is not left to expire while the
    trigger waits for a slow one; the task resumes, downloads and stages it, and defers again."""
    context = task_context("manual__op_slow")
    op = FeishuExportFetchOperator(task_id="fetch", source="feishu:slow", batch=slow_batch, deferrable=True)
    with pytest.raises(TaskDeferred) as info:
        op.execute(context)
    event = _first_event(info.value.trigger)
    assert event["status"] == "partial"
    with pytest.raises(TaskDeferred) as again:
        op.execute_complete(context, event, **(info.value.kwargs or {}))
    assert sim.counters["export_downloads"] == 1  # the fast one, while the slow one renders
    assert [t["state"] for t in again.value.trigger.tickets] == ["pending"]
    final = _first_event(again.value.trigger)
    manifest = read_stage_manifest(op.execute_complete(context, final, **(again.value.kwargs or {})))
    assert sorted(_file_name(e) for e in manifest.items) == ["快.docx", "慢.docx", "附件.txt"]
    assert manifest.failures == [] and sim.counters["export_creations"] == 2
