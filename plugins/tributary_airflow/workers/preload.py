"""What a Celery worker loads once, before it forks, so that no task process loads it again.

Airflow runs every task in a process forked from a Celery pool process; the fork re-parses the
DAG file, imports everything the task's step touches (connector, parsers, chunker, index
backend, state store) and loads the token encoding. Done in the worker's main process, before
its pool forks, each of those costs once per worker instead of once per task (the fork inherits
the modules, copy-on-write). :data:`CELERY_EXTRA_CONFIG` names this module in Celery's
``imports``, and importing it connects :func:`preload` to ``worker_init`` (sent once the worker has
imported its ``imports``, before its pool starts); :func:`preload` is also callable directly.

Nothing here connects to anything or starts a thread: a fork must not inherit either. The
module's own imports are part of the preload (Celery imports it in the worker's main process).
"""

from __future__ import annotations

import importlib
import logging
import time
from typing import Any

from airflow.sdk.listener import get_listener_manager
from airflow.sdk.plugins_manager import integrate_macros_plugins
from celery.signals import worker_init
from sqlalchemy.engine import make_url

from include.config import load_sources_report
from include.index import backend_class
from include.settings import get_settings
from plugins.chunkers.registry import get_chunker
from plugins.chunkers.tokenizer import get_encoding
from plugins.connectors.base import get_connector_class, validate_source_options
from plugins.parsers.registry import load_builtins
from plugins.tributary_airflow.dag_factory import build_dags

log = logging.getLogger(__name__)

__all__ = ["CELERY_EXTRA_CONFIG", "preload"]

# What a deployment sets as ``[celery] extra_celery_config`` (docker-compose.yaml:
# ``AIRFLOW__CELERY__EXTRA_CELERY_CONFIG``, as JSON): Celery's worker imports this module in its
# main process; importing it only connects the preload to the worker's ``worker_init`` signal.
CELERY_EXTRA_CONFIG = {"imports": [__name__]}

# Airflow's own per-task start-up: the task runner and the DAG bag it parses the DAG file with.
_AIRFLOW = (
    "airflow.sdk.execution_time.task_runner",
    "airflow.dag_processing.dagbag",
    "airflow.dag_processing.bundles.manager",
)
# What every sync step needs whatever the source: the DAG factory (the DAG file's imports), the
# operators and steps, the staging area, the state stores (SQLAlchemy and its drivers), parsers.
_TRIBUTARY = (
    "plugins.tributary_airflow.dag_factory",
    "plugins.tributary_airflow.operators.sync",
    "plugins.engine.steps",
    "plugins.engine.commit",
    "include.staging",
    "include.stores",
    "include.stores.state",
    "plugins.parsers.registry",
    "plugins.chunkers.registry",
)


def _load_airflow_plugins() -> None:
    """Airflow's plugin scan (the plugins folder's entry point, which builds the audit app, and the
    providers' plugins) and the listeners it registers (OpenLineage's): every task process
    otherwise runs both before its first log line. Both are cached for the process's life."""
    get_listener_manager()
    integrate_macros_plugins()


def _load_configured() -> None:
    """The connector, index backend and chunker of every configured source, and the tokenizer."""
    load_builtins()
    # building the DAGs loads what a task's DAG-file parse would: the operators of the configured
    # kinds, and the providers' asset URI handlers (the index asset), which import every installed
    # provider's asset module (amazon's included) on the first Asset a process makes
    build_dags()
    sources, _ = load_sources_report(get_settings().sources_file, validate_source_options)
    for source in sources:
        get_connector_class(source.kind)
        backend_class(source.index.backend)
        get_chunker(source.chunker.name)
    get_encoding()
    # the state store's database driver (psycopg2 for PostgreSQL): imported, not connected
    make_url(get_settings().state_url).get_dialect().import_dbapi()


def preload() -> float:
    """Import and load what tasks need; the seconds it took. A failure is logged, never raised:
    a worker without the preload still runs every task (each loads what it needs itself)."""
    start = time.perf_counter()
    for name in (*_AIRFLOW, *_TRIBUTARY):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            log.warning("worker preload: %s not imported (%s)", name, exc)
    for load in (_load_airflow_plugins, _load_configured):
        try:
            load()
        except Exception as exc:  # a bad sources file is the DAG processor's to report
            log.warning("worker preload: %s failed (%s: %s)", load.__name__, type(exc).__name__, exc)
    took = time.perf_counter() - start
    log.info("worker preload: %.2f s", took)
    return took


def _on_worker_init(**_: Any) -> None:
    """Celery's worker, after its ``imports`` and before it starts its pool (which it forks)."""
    preload()


worker_init.connect(_on_worker_init)
