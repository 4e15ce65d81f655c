"""OpenLineage for the sync operators: the source as input dataset, the index as output dataset,
and a run facet with the task's counts.

``apache-airflow-providers-openlineage`` calls each operator's
``get_openlineage_facets_on_complete(task_instance)`` (see ``plugins/tributary_airflow/operators/sync.py``) and
emits the events through whatever transport Airflow is configured with (``[openlineage]
transport``: file / console by default in our docs, HTTP for Marquez). Everything here is
offline: datasets are named from configuration, never by calling the source.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs
from openlineage.client.facet_v2 import RunFacet

from include.config import IndexConfig, SourceConfig

__all__ = ["TributaryRunFacet", "index_dataset", "operator_lineage", "source_dataset"]

log = logging.getLogger("tributary.openlineage")


@attrs.define
class TributaryRunFacet(RunFacet):
    """What one sync task did: source, stage, Tributary run id and its counts."""

    source: str
    stage: str
    tributaryRunId: str | None = None  # OpenLineage facet fields are camelCase
    counts: dict[str, Any] = attrs.field(factory=dict)


def source_dataset(source: SourceConfig) -> tuple[str, str]:
    """(namespace, name) of the source, as its connector names it (site URL, folder, repo ...)."""
    try:
        from plugins.connectors.base import get_connector_class

        connector = get_connector_class(source.kind)(source)
        try:
            namespace, name = connector.input_dataset()
        finally:
            connector.close()
        return str(namespace), str(name or "/")
    except Exception as exc:  # lineage must never fail a task: fall back to the configured name
        log.warning("input dataset of %s not resolved (%s); using its source id", source.source_id, exc)
        return f"tributary-{source.kind}", source.name


def index_dataset(index: IndexConfig) -> tuple[str, str]:
    """(namespace, name) of an index: the SQLite file or the Elasticsearch cluster, and the index name."""
    if index.backend == "sqlite":
        from pathlib import Path

        from include.settings import get_settings

        path = Path(index.options.get("path") or get_settings().index_path).resolve()
        return f"sqlite://{path}", index.name
    if index.backend == "elasticsearch":
        import os
        from urllib.parse import urlsplit

        # same resolution order as include/index/_es_client.py: url option, env, connection
        url = index.options.get("url") or (
            None if index.options.get("conn_id") else os.environ.get("ELASTICSEARCH_URL")
        )
        if not url:
            url = _connection_url(index.options.get("conn_id") or "elasticsearch_default")
        parts = urlsplit(url if "://" in url else f"http://{url}")
        return f"elasticsearch://{parts.hostname}:{parts.port or 9200}", index.name
    return f"tributary-{index.backend}", index.name


def _connection_url(conn_id: str) -> str:
    try:
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(conn_id)
        return f"{conn.host or 'localhost'}:{conn.port or 9200}"
    except Exception:  # no connection: name the default address rather than fail the task
        return "localhost:9200"


def operator_lineage(
    source_ref: str, stage: str, run_id: str | None, counts: Mapping[str, Any] | None
) -> Any:  # OperatorLineage (imported lazily: the provider is optional at DAG-parse time)
    """OperatorLineage for one sync task: source -> index, with a ``tributary`` run facet."""
    from airflow.providers.common.compat.openlineage.facet import Dataset
    from airflow.providers.openlineage.extractors import OperatorLineage

    from plugins.engine import get_source

    source = get_source(source_ref)
    in_ns, in_name = source_dataset(source)
    out_ns, out_name = index_dataset(source.index)
    facet = TributaryRunFacet(
        source=source.source_id,
        stage=stage,
        tributaryRunId=run_id,
        counts={k: v for k, v in (counts or {}).items() if isinstance(v, int | float | bool | str)},
    )
    return OperatorLineage(
        inputs=[Dataset(namespace=in_ns, name=in_name)],
        outputs=[Dataset(namespace=out_ns, name=out_name)],
        run_facets={"tributary": facet},
    )


def manifest_counts(path: str | None) -> dict[str, int]:
    """Items / unchanged / failures in a stage manifest (what a mapped stage task handled)."""
    if not path:
        return {}
    try:
        from plugins.engine import read_manifest

        manifest = read_manifest(path)
    except Exception:  # the manifest may already be cleaned up: counts are best effort
        return {}
    return {
        "items": len(manifest.get("items") or []),
        "unchanged": len(manifest.get("unchanged") or []),
        "failed": len(manifest.get("failures") or []),
    }
