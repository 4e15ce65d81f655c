"""Several processes opening one fresh state database at once (the first tasks of several DAGs).

``create_all`` checks, then creates: without the schema lock one of them can fail with
"table ... already exists" (seen twice in clean-clone CI runs: a Yuque DAG's discover, started
with two other DAGs'). Six processes here did not reproduce that interleaving on this machine
(the race needs the CI stack's timing); this test checks that the lock path, taken by real
processes at once, lets every one of them open the store and creates the tables once.
`test_state_store.py` forces the interleaving itself with a table event.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
from pathlib import Path

import pytest

from include.stores import StateStore

_PROCESSES = 6


def _open(url: str, start: multiprocessing.synchronize.Event, errors: multiprocessing.Queue[str]) -> None:
    start.wait(30)
    try:
        StateStore(url).close()
    except Exception as exc:  # reported to the parent, which fails the test with it
        errors.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("round_", range(3))
def test_processes_opening_a_fresh_database_together_all_succeed(tmp_path: Path, round_: int) -> None:
    url = f"sqlite:///{tmp_path / f'state-{round_}.db'}"
    ctx = multiprocessing.get_context("fork")
    start, errors = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_open, args=(url, start, errors)) for _ in range(_PROCESSES)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert failures == [] and [p.exitcode for p in procs] == [0] * _PROCESSES
    store = StateStore(url)
    try:
        assert store.items("web:x") == {}  # the tables are there, once
    finally:
        store.close()
