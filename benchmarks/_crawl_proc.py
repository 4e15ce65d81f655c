"""One child process timed from outside: wall time and the CPU seconds it used."""

from __future__ import annotations

import resource
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Timed", "timed_run"]


@dataclass(frozen=True, slots=True)
class Timed:
    wall: float  # perf_counter around subprocess.run: start-up and shutdown included
    cpu: float  # user + system seconds of the child (and the children it waited for)
    proc: subprocess.CompletedProcess[str]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 3600) -> Timed:
    """Run ``cmd`` to the end. The CPU seconds tell a slow process from a starved one: on a
    shared machine wall time grows with the load, CPU time much less."""
    cpu_before = _children_cpu()
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    wall = time.perf_counter() - start
    return Timed(wall=wall, cpu=_children_cpu() - cpu_before, proc=proc)
