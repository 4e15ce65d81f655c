"""One call's requests a few at a time: at most ``limit`` running, none queued beyond them.

:func:`run_bounded` starts the next task only when a running one ends, so a call of many
requests holds ``limit`` threads and no backlog. With ``limit`` 1 the tasks run one after
another in the caller's thread, exactly as a plain loop would. The outcome is the plain loop's
too: when task ``k`` fails, no task after it starts, a running one after it gives up at its next
request (:meth:`Failures.abandons`, then :class:`Abandoned`), the ones before it run to their
end (a plain loop would have run them first) and the failure of the earliest failing task is
raised.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

__all__ = ["Abandoned", "Failures", "run_bounded"]


class Abandoned(Exception):
    """A task gave up because an earlier task of the same call failed (not itself a failure)."""


class Failures:
    """The position of the earliest failed task of a call, read by the tasks still running."""

    def __init__(self) -> None:
        self.first: float = math.inf
        self._lock = threading.Lock()

    def record(self, position: int) -> None:
        with self._lock:
            self.first = min(self.first, position)

    def abandons(self, position: int) -> bool:
        """Whether the task at ``position`` is past a failure (a plain loop would not run it)."""
        return position > self.first


def run_bounded(tasks: Sequence[Callable[[], None]], limit: int, failures: Failures) -> None:
    """Run ``tasks`` at most ``limit`` at a time, started in order (see the module docstring)."""
    if limit <= 1 or len(tasks) <= 1:
        for task in tasks:
            task()
        return
    raised: dict[int, BaseException] = {}
    following = iter(enumerate(tasks))
    with ThreadPoolExecutor(max_workers=min(limit, len(tasks)), thread_name_prefix="embeddings") as pool:
        running: dict[Future[None], int] = {}
        try:
            while True:
                while len(running) < limit and not raised and (upcoming := next(following, None)) is not None:
                    running[pool.submit(upcoming[1])] = upcoming[0]
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    position = running.pop(future)
                    failure = future.exception()
                    if failure is not None and not isinstance(failure, Abandoned):
                        raised[position] = failure
                        failures.record(position)
        except BaseException:
            failures.record(-1)  # interrupted here: every running task gives up at its next request
            raise
    if raised:
        raise raised[min(raised)]
