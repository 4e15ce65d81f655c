"""Processes started in their own process groups (an Airflow component and the task processes it
forks), their logs' tails, and stopping them all: for the cluster test and the cluster benchmark."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = ["log_tails", "stop_groups"]


def log_tails(logs: Path, lines: int = 25) -> str:
    """The last ``lines`` of every ``*.log`` under ``logs``, each under its name."""
    out = []
    for log in sorted(logs.glob("*.log")):
        text = log.read_text(errors="replace").splitlines()[-lines:]
        out.append(f"----- {log.name}\n" + "\n".join(text))
    return "\n".join(out)


def stop_groups(procs: Mapping[str, subprocess.Popen[bytes]], grace: float = 10.0) -> None:
    """SIGTERM every group, SIGKILL what is still there after ``grace`` seconds in all, then
    SIGKILL the groups again: task processes may outlive a killed parent in its group."""
    for p in procs.values():
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs.values():
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
    for p in procs.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
