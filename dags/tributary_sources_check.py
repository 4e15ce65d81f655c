"""Invalid entries of include/sources.yaml, reported as this file's Airflow DAG import error.

It defines no DAG: the valid sources' DAGs come from tributary_sources.py, which an import error
here leaves scheduled (Airflow marks only the DAGs of the failing file stale).
"""

from plugins.tributary_airflow.dag_factory import check_sources

check_sources()
