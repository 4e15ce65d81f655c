"""The one base of every sync operator: it holds a step, its hooks and a short ``execute``.

An operator builds its step (``plugins.engine.steps``) from the task context and runs it with
the state store of its :class:`~plugins.tributary_airflow.hooks.StateStoreHook`. Everything a
task must do alike lives in the step's base (a finished run's task does nothing, failpoints,
timing, lineage), and ``get_openlineage_facets_on_complete`` here reports it for every step.
"""

from __future__ import annotations

import datetime as dt
from abc import abstractmethod
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator, Context

from plugins.engine import RunContext, RunParams, get_source
from plugins.engine.event_runs import trigger_batch_ids
from plugins.engine.steps import Step, StepResult
from plugins.tributary_airflow.hooks import IndexHook, StateStoreHook
from plugins.tributary_airflow.operators.lineage_ol import connection_address, operator_lineage

__all__ = ["StepOperator", "run_context", "triggering_batches"]


def run_context(source: str, context: Context) -> RunContext:
    """Build the engine's RunContext from an Airflow task context."""
    src = get_source(source)
    dag_run = context.get("dag_run")
    params = RunParams.from_mapping(dict(context.get("params") or {}))
    run_type = str(getattr(dag_run, "run_type", "") or "").split(".")[-1].lower() or None
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if params.window_start is None and params.window_end is None and start and end:
        overlap = src.options.get("window_overlap_minutes")
        if run_type == "backfill":
            # A backfill re-syncs what was modified inside each interval.
            params.window_start, params.window_end = start, end
        elif run_type == "scheduled" and overlap is not None:
            # Scheduled windows overlap the previous one: clock skew and late edits are not missed.
            params.window_start, params.window_end = start - dt.timedelta(minutes=float(overlap)), end
    dag = context.get("dag")
    return RunContext(
        source=src,
        run_id=context["run_id"],
        params=params,
        dag_id=dag.dag_id if dag else src.dag_id,
        run_type=run_type,
        event_batches=triggering_batches(src.source_id, context),
    )


def triggering_batches(source_id: str, context: Context, purpose: str = "sync") -> list[str]:
    """The event batches named by the run's triggering asset events (``triggering_asset_events``:
    asset -> the asset events that scheduled this run; ours carry ``{"from_trigger": True,
    "payload": {"source", "purpose", "batch_id", ...}}``). None for a scheduled or manual run."""
    by_asset = context.get("triggering_asset_events") or {}
    extras = [dict(event.extra or {}) for events in by_asset.values() for event in events]
    return trigger_batch_ids(extras, source_id, purpose)


class StepOperator(BaseOperator):
    """Runs one step of one sync. ``source`` is a source id (``kind:name``), DAG id or name."""

    template_fields: Sequence[str] = ("source",)
    ui_color = "#d6eaf8"

    def __init__(self, *, source: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source = source
        self._step: Step[Any] | None = None  # the step execute ran, for the OpenLineage facets

    @cached_property
    def state_hook(self) -> StateStoreHook:
        return StateStoreHook()

    @cached_property
    def index_hook(self) -> IndexHook:
        return IndexHook.for_source(self.source)

    @abstractmethod
    def make_step(self, ctx: RunContext) -> Step[Any]:
        """This task's step for the run ``ctx``."""

    @abstractmethod
    def xcom_value(self, result: Any, context: Context) -> Any:
        """What the task returns (XCom) for the step's ``result``."""

    def execute(self, context: Context) -> Any:
        step = self._step = self.make_step(run_context(self.source, context))
        with self.state_hook as store:
            result: StepResult = step.run(store)
        return self.xcom_value(result, context)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: source -> index datasets, with the step's counts as a ``tributary`` run facet."""
        step = self._step
        if step is None:  # not run by this instance: the datasets, without counts
            run_id = str(getattr(task_instance, "run_id", None) or "")
            step = self.make_step(RunContext(source=get_source(self.source), run_id=run_id))
        return operator_lineage(step.lineage(connection_address), self.task_id)
