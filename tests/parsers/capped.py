"""Run a hostile-input case in a forked child under an address-space cap.

A regression then fails fast inside the child (MemoryError, a failed allocation) instead of
eating the shared machine's memory. The child sends back ``fn()``'s result and its peak RSS.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import resource
import select
import signal
from collections.abc import Callable
from typing import Any

MiB = 1 << 20


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _address_space() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def run_capped(fn: Callable[[], Any], extra_bytes: int, timeout_s: float = 300.0) -> tuple[Any, int]:
    """``(fn's result or the exception it raised, peak RSS growth in bytes)`` from a capped child."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            resource.setrlimit(resource.RLIMIT_AS, (_address_space() + extra_bytes, resource.RLIM_INFINITY))
            base = rss_bytes()
            try:
                result: Any = fn()
            except Exception as exc:  # sent back: the test asserts on it
                result = exc
            growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
            payload = pickle.dumps((result, growth))
            view = memoryview(payload)
            while view:
                view = view[os.write(write_fd, view) :]
        finally:
            os._exit(0)
    os.close(write_fd)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([read_fd], [], [], timeout_s)
            if not ready:
                raise TimeoutError(f"capped child gave no answer within {timeout_s}s")
            chunk = os.read(read_fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_fd)
        with contextlib.suppress(ProcessLookupError):  # already gone after its answer
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if not chunks:
        raise AssertionError(f"capped child died without an answer (wait status {status})")
    return pickle.loads(b"".join(chunks))
