"""One Airflow sync DAG per source declared in include/sources.yaml (see plugins/tributary_airflow/dag_factory/).

A task process builds only its own DAG (the parsing context names it); the DAG processor, every one.
"""

from airflow.sdk import get_parsing_context

from plugins.tributary_airflow.dag_factory import build_dags

globals().update(build_dags(only=get_parsing_context().dag_id))
