"""The sync engine: the stages every document travels, independent of Airflow.

discover -> fetch (per batch) -> parse -> chunk -> upsert -> commit -> finish.
Each stage is a step class (``plugins.engine.steps``) calling one stage function; Airflow's
operators (``plugins/tributary_airflow/operators``) hold one step each, and :func:`run_pipeline`
runs the same steps in-process.
"""

from plugins.engine.commit import abort_run, commit_stage, finish_stage
from plugins.engine.context import MassDeleteError, RunContext, RunParams, closed_run, get_source
from plugins.engine.discover import discover_stage, open_connector
from plugins.engine.manifests import ItemFailure, read_batch, read_stage_manifest, write_fetched_manifest
from plugins.engine.process import chunk_stage, fetch_stage, parse_stage, upsert_stage
from plugins.engine.runner import RunSummary, run_pipeline
from plugins.engine.steps import start_run

__all__ = [
    "ItemFailure",
    "MassDeleteError",
    "RunContext",
    "RunParams",
    "RunSummary",
    "abort_run",
    "chunk_stage",
    "closed_run",
    "commit_stage",
    "discover_stage",
    "fetch_stage",
    "finish_stage",
    "get_source",
    "open_connector",
    "parse_stage",
    "read_batch",
    "read_stage_manifest",
    "run_pipeline",
    "start_run",
    "upsert_stage",
    "write_fetched_manifest",
]
