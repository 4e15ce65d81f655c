"""Build one sync DAG per configured source: ``sync_<kind>_<name>``.

    discover -> [fetch -> parse -> chunk -> upsert] (one lane per batch) -> commit -> summary

and one permissions DAG, ``perms_<kind>_<name>`` (``sync_groups -> sync_permissions`` every
``permission_sync_minutes``), per source that has permissions to keep current (``permissions.py``).

Everything the DAG does lives in ``plugins/tributary_airflow/operators`` (the tasks),
``plugins/tributary_airflow/callbacks.py`` (the failure callbacks) and ``plugins/engine``; this
package only wires tasks together (``build.py``) and declares the trigger form (``params.py``),
so a DAG file stays two lines. Building a DAG touches no network, and imports a connector's own
operator only for a kind that is configured (``FETCH_OPERATORS``). Loading the sources file
validates each source's options against its kind's model (``plugins/connectors/<kind>/options.py``,
which imports only pydantic), so a typo fails here, at DAG parse. An invalid source gets no DAG
and is reported as the import error of ``dags/tributary_sources_check.py`` (:func:`check_sources`);
the other sources keep theirs.
"""

from plugins.tributary_airflow.dag_factory.build import (
    FETCH_OPERATORS,
    InvalidSourcesError,
    build_dag,
    build_dags,
    check_sources,
    fetch_operator,
    index_asset,
    schedule_for,
)
from plugins.tributary_airflow.dag_factory.params import trigger_params
from plugins.tributary_airflow.dag_factory.permissions import build_permissions_dag, permissions_dag_id

__all__ = [
    "FETCH_OPERATORS",
    "InvalidSourcesError",
    "build_dag",
    "build_dags",
    "build_permissions_dag",
    "check_sources",
    "fetch_operator",
    "index_asset",
    "permissions_dag_id",
    "schedule_for",
    "trigger_params",
]
