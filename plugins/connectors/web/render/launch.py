"""Starting and ending one Chromium process tree: launched here, driven over CDP, killed by group.

Playwright's ``chromium.launch()`` hides the browser process behind its Node driver (1.65 exposes
no pid), so a hung page could not be killed. Here Chromium is started with ``subprocess.Popen``
in a session of its own (``start_new_session``: the browser, zygote, renderers, GPU and utility
processes share one process group), on a fresh ``--user-data-dir`` and with
``--remote-debugging-port=0``; Playwright attaches with ``connect_over_cdp`` to the port Chromium
writes into ``DevToolsActivePort``. Ending it is ``killpg(SIGKILL)`` plus any descendant that
left the group, reaping the child and removing the profile. ``PR_SET_PDEATHSIG`` makes the
kernel kill the browser when the thread that launched it dies (a worker killed by Airflow),
see prctl(2).

Every process of the tree carries ``TRIBUTARY_BROWSER=<tag>`` in its environment (Chromium's
children inherit it), so an operator or a test can find what one launch left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

__all__ = ["TAG_VARIABLE", "ChromiumProcess", "LaunchFailed", "launch_chromium", "tagged_processes"]

log = logging.getLogger("tributary.web.render")

TAG_VARIABLE = "TRIBUTARY_BROWSER"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_STARTUP_POLL_S = 0.02
_REAP_TIMEOUT_S = 5.0
_STDERR_TAIL = 2000

# Looked up before any fork: the pre-exec hook then only makes the system call itself.
_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class LaunchFailed(Exception):
    """Chromium exited or did not open its DevTools port in time."""


@dataclass(slots=True)
class ChromiumProcess:
    """One launched browser: its process (the leader of its own process group) and profile."""

    popen: subprocess.Popen[bytes]
    profile: Path
    tag: str
    cdp_url: str = ""
    _stderr: Path = field(default_factory=Path)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def processes(self) -> list[psutil.Process]:
        """The browser and every process under it that is still running."""
        try:
            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def kill(self) -> None:
        """SIGKILL the whole tree, reap the browser, remove its profile. Safe to call twice."""
        stragglers = self.processes()  # before the group goes: a child could have left it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        for proc in stragglers:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(_REAP_TIMEOUT_S)
        _wait_gone(stragglers, _REAP_TIMEOUT_S)
        shutil.rmtree(self.profile, ignore_errors=True)

    def stderr_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.profile.joinpath("stderr.log").read_text(errors="replace")[-_STDERR_TAIL:]
        return ""


async def launch_chromium(executable: str, args: Sequence[str], startup_timeout_s: float) -> ChromiumProcess:
    """Start Chromium and wait (at most ``startup_timeout_s``) for its DevTools endpoint."""
    profile = Path(tempfile.mkdtemp(prefix="tributary-chromium-"))
    tag = uuid.uuid4().hex
    # an environment of its own: the worker's (Airflow Connections as AIRFLOW_CONN_*, keys) never
    # reaches a process that runs a page's script
    env = {"PATH": "/usr/bin:/bin", "HOME": str(profile), "LANG": "C.UTF-8", TAG_VARIABLE: tag}
    argv = [executable, *args, "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"]
    stderr = (profile / "stderr.log").open("wb")
    try:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # one system call, no Python state touched
        )
    except OSError as exc:
        shutil.rmtree(profile, ignore_errors=True)
        raise LaunchFailed(f"{executable} did not start: {exc}") from exc
    finally:
        stderr.close()
    browser = ChromiumProcess(popen, profile, tag)
    try:
        browser.cdp_url = await _wait_for_endpoint(browser, startup_timeout_s)
    except LaunchFailed:
        tail = browser.stderr_tail()
        browser.kill()
        raise LaunchFailed(f"Chromium did not open its DevTools port: {tail.strip()[-500:]}") from None
    return browser


async def _wait_for_endpoint(browser: ChromiumProcess, timeout_s: float) -> str:
    """``DevToolsActivePort`` holds the port and the browser target's path, one per line."""
    port_file = browser.profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if browser.popen.poll() is not None:
            raise LaunchFailed(f"exit status {browser.popen.returncode}")
        with contextlib.suppress(OSError):
            lines = port_file.read_text().splitlines()
            if len(lines) >= 2 and lines[0].isdigit():
                return f"http://127.0.0.1:{lines[0]}"
        await asyncio.sleep(_STARTUP_POLL_S)
    raise LaunchFailed(f"no DevTools port after {timeout_s} s")


def _running(proc: psutil.Process) -> bool:
    try:
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> None:
    """Until every process is gone or a zombie (psutil.wait_procs waits on zombies that are not
    our children, which only their reaper ends: the whole timeout)."""
    deadline = time.monotonic() + timeout_s
    while any(_running(proc) for proc in procs) and time.monotonic() < deadline:
        time.sleep(_STARTUP_POLL_S)


def tagged_processes(tag: str) -> list[psutil.Process]:
    """Running processes launched under ``tag`` (zombies excluded: they hold no memory or CPU)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if _running(proc) and proc.environ().get(TAG_VARIABLE) == tag:
                found.append(proc)
    return found
