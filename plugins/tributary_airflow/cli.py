"""``python -m plugins.tributary_airflow.cli <command>``: the engine's command line
(``plugins.engine.cli``: sources, sync, search, runs, run, item, chunk, diff, reap) where Airflow
is configured. The one difference is ``reap``: it also closes Airflow runs whose DAG run is gone
or has ended, reading DAG runs from Airflow's metadata DB as Airflow's own CLI does
(``--no-airflow``: in-process runs only, like the engine's command).
"""

from __future__ import annotations

import sys

from plugins.engine import cli

# Airflow's logging, set up when Airflow is first imported, writes to the sys.stdout of that
# moment (a later redirect does not move it): import Airflow while stdout points at stderr, so
# that stdout carries only the command's output (``--json`` is read by scripts).
_stdout, sys.stdout = sys.stdout, sys.stderr
try:
    from plugins.tributary_airflow.callbacks import metadata_dag_run_state
finally:
    sys.stdout = _stdout

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    return cli.main(argv, dag_run_state=metadata_dag_run_state, prog="python -m plugins.tributary_airflow.cli")


if __name__ == "__main__":
    sys.exit(main())
