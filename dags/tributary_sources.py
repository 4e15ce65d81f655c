"""One Airflow sync DAG per source declared in include/sources.yaml (see include/dag_factory.py)."""

from include.dag_factory import build_dags

globals().update(build_dags())
