"""Run one call in a forked child with a deadline, and never wait on it forever.

A plain process and a pipe, not a ``multiprocessing.Pool``: a Pool's shutdown SIGTERMs its workers
and joins them, which hangs once an earlier test in the same worker (Airflow's task runner) has
left a SIGTERM handler in this process for the forked children to inherit (stop 44's CI: 600 s).
Here the child is SIGKILLed when it is late or lingers.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from typing import Any


def _answer(send: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    send.send(fn(*args))


def call_forked(fn: Callable[..., Any], *args: Any, timeout: float = 60.0) -> Any:
    """``fn(*args)`` in a forked child; its answer, or AssertionError when none came in ``timeout`` s."""
    ctx = mp.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_answer, args=(send, fn, args))
    child.start()
    send.close()
    try:
        assert receive.poll(timeout), f"{getattr(fn, '__name__', fn)} gave no answer within {timeout:g} s"
        answer = receive.recv()
        child.join(30)
        assert child.exitcode == 0, f"the child exited with {child.exitcode} after answering"
        return answer
    finally:
        receive.close()
        if child.is_alive():
            child.kill()
            child.join()
