"""OpenLineage for the sync operators: what a step reports (``plugins.engine.steps.StepLineage``:
the source as input dataset, the index as output dataset, its counts) as OpenLineage objects.

``apache-airflow-providers-openlineage`` calls each operator's
``get_openlineage_facets_on_complete(task_instance)`` (``StepOperator`` in
``plugins/tributary_airflow/operators/base.py``, so every step's operator has it) and emits the
events through whatever transport Airflow is configured with (``[openlineage] transport``: file /
console by default in our docs, HTTP for Marquez). Everything here is offline: datasets are named
from configuration, never by calling the source. (This module sits in the operators package,
not beside it: operators import it, and the package above imports the operators.)
"""

from __future__ import annotations

from typing import Any

import attrs
from airflow.sdk import BaseHook
from openlineage.client.facet_v2 import RunFacet

from plugins.engine.steps import StepLineage

__all__ = ["TributaryRunFacet", "connection_address", "operator_lineage"]


@attrs.define
class TributaryRunFacet(RunFacet):
    """What one sync task did: source, stage, Tributary run id, its counts and its duration."""

    source: str
    stage: str
    tributaryRunId: str | None = None  # OpenLineage facet fields are camelCase
    counts: dict[str, Any] = attrs.field(factory=dict)
    durationMs: float | None = None


def connection_address(conn_id: str) -> str:
    """``host:port`` of an Elasticsearch Airflow connection (the index dataset's namespace)."""
    try:
        conn = BaseHook.get_connection(conn_id)
        return f"{conn.host or 'localhost'}:{conn.port or 9200}"
    except Exception:  # no connection: name the default address rather than fail the task
        return "localhost:9200"


def operator_lineage(lineage: StepLineage, stage: str) -> Any:  # OperatorLineage (imported lazily)
    """OperatorLineage for one sync task (``stage``: its task id), with a ``tributary`` run facet."""
    # the provider is optional: only a task that reports lineage needs it, never DAG parsing
    from airflow.providers.common.compat.openlineage.facet import Dataset
    from airflow.providers.openlineage.extractors import OperatorLineage  # (the same provider)

    facet = TributaryRunFacet(
        source=lineage.source,
        stage=stage,
        tributaryRunId=lineage.run_id,
        counts={k: v for k, v in lineage.counts.items() if isinstance(v, int | float | bool | str)},
        durationMs=lineage.elapsed_ms,
    )
    return OperatorLineage(
        inputs=[Dataset(namespace=d.namespace, name=d.name) for d in lineage.inputs],
        outputs=[Dataset(namespace=d.namespace, name=d.name) for d in lineage.outputs],
        run_facets={"tributary": facet},
    )
