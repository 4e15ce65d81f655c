"""Failpoints: named places where a crash test can SIGKILL the running process.

``TRIBUTARY_FAILPOINT`` names where to die, comma-separated: ``name`` (the first time the
process reaches it) or ``name@count`` (the count-th time; all tasks of ``airflow dags test``
share one process). ``TRIBUTARY_FAILPOINT_ONCE=<path>`` makes the kill happen once across
processes: the first process to fire creates that file, later ones run through (so an Airflow
retry of the killed task can succeed); if ``<path>`` is a directory, once per failpoint name
(a marker file ``<path>/<name>`` each).

SIGKILL, not an exception: nothing is flushed, no ``finally`` runs, no callback fires; that is
what a lost worker looks like. Unset, a failpoint costs one environment lookup.
"""

from __future__ import annotations

import os
import signal

__all__ = ["failpoint"]

_ENV = "TRIBUTARY_FAILPOINT"
_hits: dict[str, int] = {}


def failpoint(name: str) -> None:
    """Die here (SIGKILL) if ``TRIBUTARY_FAILPOINT`` says so; otherwise return at once."""
    spec = os.environ.get(_ENV)
    if not spec:
        return
    wanted = [
        int(count or 1) for target, _, count in (e.strip().partition("@") for e in spec.split(",")) if target == name
    ]
    if not wanted:
        return
    hits = _hits[name] = _hits.get(name, 0) + 1
    if hits not in wanted or not _first_anywhere(name):
        return
    os.kill(os.getpid(), signal.SIGKILL)


def _first_anywhere(name: str) -> bool:
    """True unless a once-marker is configured and another process already fired."""
    marker = os.environ.get(f"{_ENV}_ONCE")
    if not marker:
        return True
    if os.path.isdir(marker):
        marker = os.path.join(marker, name.replace(os.sep, "_"))
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True
