"""One Airflow sync DAG per source declared in include/sources.yaml (see plugins/tributary_airflow/dag_factory/)."""

from plugins.tributary_airflow.dag_factory import build_dags

globals().update(build_dags())
