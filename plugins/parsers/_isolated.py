"""Isolated parses: a parser run in a forked child that is killed, whole, at its deadline.

Private to the parsers package; :func:`plugins.parsers.registry.parse_document` runs a parser
here when its spec (or the ``isolate`` option) asks for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any

from include.contract import ParsedDocument, ParseError, ParseErrorCode
from plugins.parsers._common import Limits, document_seconds_left

__all__ = ["memory_allowance", "run_isolated"]


def run_isolated(name: str, run: Callable[[], ParsedDocument], size: int, options: Mapping[str, Any]) -> ParsedDocument:
    """Run the parser in a forked child; kill it when the time budget (+ grace) runs out.

    Cooperative deadline checks cannot interrupt a C library stuck inside one call; a process
    can always be killed. A bare ``os.fork`` (not :mod:`multiprocessing`) keeps start-up cheap,
    needs no re-import, and also works inside daemonic worker processes, which multiprocessing
    refuses to let have children. The child reports through a pipe as JSON and leaves with
    ``os._exit`` so no inherited atexit handler or buffer runs twice.

    The child's address space is capped (``RLIMIT_AS``) at what it had at the fork plus
    :func:`memory_allowance`, so a decompression bomb inside C code fails an allocation in the
    child instead of growing until the machine's OOM killer picks a victim.

    One budget per top-level document: a nested isolated parse (an attachment of an isolated PDF)
    gets what is left of it, not a fresh one, and stays in the top-level child's process group;
    every child dies with its parent (parent-death signal), and a timeout kills the whole tree.
    """
    limits = Limits.from_options(options)
    left = document_seconds_left()
    budget = limits.time_budget_s if left is None else min(limits.time_budget_s, left)
    if budget <= 0:
        raise ParseError(ParseErrorCode.TIMEOUT, f"{name}: the document's time budget is spent")
    allowance = memory_allowance(limits, size)
    rss_at_fork = _rss_bytes()
    read_fd, write_fd = os.pipe()
    top_level = not _in_isolated_child
    pid = os.fork()
    if pid == 0:  # child
        status = 1
        try:
            os.close(read_fd)
            _become_isolated_child(top_level)
            _child_main(name, run, write_fd, allowance, _overrun_code(limits, size))
            status = 0
        finally:
            os._exit(status)
    os.close(write_fd)
    payload, wait_status, peak_rss = _collect(read_fd, pid, name, budget, top_level)
    if payload is None:  # the child died without a word: a crash in C code, or out of memory
        raise _death_error(name, wait_status, peak_rss - rss_at_fork, allowance, _overrun_code(limits, size))
    result = json.loads(payload)
    if "ok" in result:
        return ParsedDocument.from_dict(result["ok"])
    raise ParseError.from_dict(result["error"])  # its details (a scan's needs_ocr) included


def memory_allowance(limits: Limits, size: int) -> int:
    """Bytes of address space an isolated parse of ``size`` input bytes may add."""
    return max(int(limits.isolate_memory), int(limits.isolate_memory_ratio * size))


def _overrun_code(limits: Limits, size: int) -> ParseErrorCode:
    # A small file that needs more than the floor expands like a bomb; a big one is just big.
    return (
        ParseErrorCode.BOMB if size * limits.isolate_memory_ratio < limits.isolate_memory else ParseErrorCode.TOO_LARGE
    )


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * _page_size()
    except (OSError, ValueError, IndexError):
        return 0


def _page_size() -> int:
    return os.sysconf("SC_PAGE_SIZE")


def _cap_address_space(allowance: int) -> int:
    """Limit this process's address space to its current size plus ``allowance``; return the cap."""
    try:
        with open("/proc/self/statm") as fh:
            current = int(fh.read().split()[0]) * _page_size()
    except (OSError, ValueError, IndexError):  # no /proc: no cap rather than a wrong one
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = current + allowance
    if soft != resource.RLIM_INFINITY:
        cap = min(cap, soft)  # an outer, tighter cap stays in force
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    return cap


def _child_main(
    name: str, run: Callable[[], ParsedDocument], write_fd: int, allowance: int, overrun: ParseErrorCode
) -> None:
    _cap_address_space(allowance)
    over = ParseError(overrun, f"{name}: needs more than its memory limit of {allowance >> 20} MiB")
    too_big = {"error": over.to_dict()}
    try:
        result: dict[str, Any] = {"ok": run().to_dict()}
    except ParseError as exc:
        result = too_big if isinstance(exc.__cause__, MemoryError) else {"error": exc.to_dict()}
    except MemoryError:  # converting a huge result
        result = too_big
    try:
        payload = json.dumps(result).encode("utf-8")
    except MemoryError:
        del result  # free the document before the few bytes of the answer are encoded
        payload = json.dumps(too_big).encode("utf-8")
    view = memoryview(payload)
    while view:
        view = view[os.write(write_fd, view) :]


# True in a forked parser child: a nested isolated parse stays in the top-level child's process
# group (one killpg ends the whole tree) instead of starting a group of its own
_in_isolated_child = False
_PR_SET_PDEATHSIG = 1  # prctl(2)


def _become_isolated_child(top_level: bool) -> None:
    """Make this forked child die with its parent, and lead a process group if it is the first.

    The parent-death signal covers the parent being SIGKILLed on its own timeout (a nested
    parse would otherwise live on as an orphan with PID 1 as its parent); the group lets the
    top-level parent kill every process of the parse, converters included, with one signal."""
    global _in_isolated_child
    _in_isolated_child = True
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        import ctypes  # deferred: only a forked child needs it

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    if top_level:
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)


def _kill_parse_tree(pid: int, top_level: bool) -> None:
    """SIGKILL a timed-out parser child and everything it started (nested parses, LibreOffice,
    tesseract: a converter that leads its own session is reached through the process tree)."""
    descendants: list[Any] = []
    with contextlib.suppress(Exception):
        import psutil  # deferred: only a timeout gets here

        descendants = psutil.Process(pid).children(recursive=True)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL) if top_level else os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for proc in descendants:
        with contextlib.suppress(Exception):
            proc.kill()


def _collect(read_fd: int, pid: int, name: str, budget: float, top_level: bool) -> tuple[bytes | None, int, int]:
    """Read the child's answer until EOF or the deadline; reap it. -> (payload, wait status, peak RSS)."""
    chunks: list[bytes] = []
    # the top-level parent allows a grace for the answer to arrive; a nested one must answer its
    # container before the container's own deadline
    deadline = time.monotonic() + budget + (2.0 if top_level else 0.0)
    finished = False
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ParseError(ParseErrorCode.TIMEOUT, f"{name}: no result within the {budget:g}s time budget")
            ready, _, _ = select.select([read_fd], [], [], remaining)
            if ready:
                chunk = os.read(read_fd, 1 << 20)
                if not chunk:
                    finished = True
                    break
                chunks.append(chunk)
    finally:
        os.close(read_fd)
        if not finished:
            _kill_parse_tree(pid, top_level)
        _, wait_status, usage = os.wait4(pid, 0)
    payload = b"".join(chunks)
    complete = bool(payload) and os.WIFEXITED(wait_status) and os.WEXITSTATUS(wait_status) == 0
    return (payload if complete else None), wait_status, usage.ru_maxrss * 1024


def _death_error(name: str, wait_status: int, growth: int, allowance: int, overrun: ParseErrorCode) -> ParseError:
    """Classify a child that died without answering.

    A failed allocation in C (pdfium aborts) leaves no message, so the memory it had reached
    tells: a child that grew to a quarter of its allowance before dying is taken as out of
    memory (a doubling buffer fails with a third of the cap resident), as is one the kernel
    killed (SIGKILL not sent by us: the OOM killer or a cgroup limit). Anything else is a crash.
    """
    sig = os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else None
    how = f"signal {signal.Signals(sig).name}" if sig else f"exit status {os.waitstatus_to_exitcode(wait_status)}"
    if growth >= allowance // 4 or sig == signal.SIGKILL:
        return ParseError(
            overrun,
            f"{name}: parser process died ({how}) at {growth >> 20} MiB of its {allowance >> 20} MiB memory limit",
        )
    return ParseError(ParseErrorCode.CORRUPT, f"{name}: parser process died ({how})")
