"""Crash and resume in real Airflow 3.3.2 (issue 10, point 1).

**SIGKILL at every boundary.** Each scenario runs the real DAG with ``airflow dags test`` in a
subprocess whose environment arms one failpoint (``include/failpoints.py``): the process SIGKILLs
itself at a stage boundary or inside the bulk upsert's open SQLite transaction. ``airflow dags
test`` runs every task instance inside its own process (``run_task_in_process``, no supervisor),
so the kill ends the whole run: the subprocess dies of SIGKILL, the DAG run and the killed task
instance stay ``running`` in the metadata DB, later tasks never start, no failure callback fires
(the run log keeps the run as ``running``). The next DAG run must converge: index (chunk ids and
texts, no duplicate rows, no orphan full-text rows) and item state (content hash, chunk ids,
failure count) equal those of a clean sync in another TRIBUTARY_HOME.

**Clearing single task instances.** ``airflow tasks clear -t '^<task>$' -s D -e D -y`` then
``airflow tasks test <dag> <task> D [--map-index i]`` on a run created by ``airflow dags test``
(``tasks test`` runs the instance of the existing run, reads its upstream XComs, records its
state), one task after the other, comparing index and state after each.

Data: 7 markdown notes, ``chunk_token_num`` 64 (8 chunks a note), ``batch_size`` 4: two batches,
so fetch/parse/chunk/upsert are mapped over two task instances and ``name@2`` kills the second
one, after the first went through. All Airflow commands that are not meant to die run through
``tests/reliability/_airflow_driver.py`` (Airflow's own CLI parser and commands, several per
process: start-up is most of a command's cost); each killed one runs in a process of its own, forked
by the driver once earlier jobs have loaded Airflow (a fresh ``airflow dags test`` spent 8.4 s a run,
5-6 s of it importing Airflow and building the in-process execution API).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from include.config import SourceConfig
from plugins.engine import run_pipeline
from tests.conftest import ROOT
from tests.reliability._airflow_driver import DAG_ID, MARK, snapshot
from tests.support.airflow import ensure_airflow_db, write_sources

pytestmark = pytest.mark.airflow

# failpoint -> the task it kills (@2: the second mapped instance, after the first got through)
BOUNDARIES = {
    "discover": "discover",
    "fetch@2": "fetch",
    "parse@2": "parse",
    "chunk@1": "chunk",
    "upsert@1": "upsert",
    "upsert:doc:1@2": "upsert",  # second batch's bulk upsert, transaction open after its 2nd document
    "commit": "commit",
}
EDIT_DELETE = "commit:deleted"  # inside commit: deleted note gone from the index, still in the state
# the mapped tasks, in DAG order (discover is cleared in runs of its own)
MAPPED = ("fetch", "parse", "chunk", "upsert")


def _write_notes(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(7):
        body = "\n\n".join(f"Paragraph {j} of note {i} about canal locks, weirs and sluices." for j in range(24))
        (root / f"note{i}.md").write_text(f"# Note {i}\n\n{body}\n", encoding="utf-8")


def _edit_and_delete(root: Path) -> None:
    note = root / "note2.md"
    note.write_text(note.read_text().replace("Paragraph 5 of note 2", "A rewritten fifth paragraph"), "utf-8")
    st = note.stat()
    os.utime(note, (st.st_atime, st.st_mtime + 5))
    (root / "note6.md").unlink()


def _spec(root: Path) -> dict[str, Any]:
    return {
        "kind": "files",
        "name": "crash",
        "schedule": None,
        "options": {"root": str(root)},
        "batch_size": 4,
        "chunker": {"options": {"chunk_token_num": 64}},
    }


_PER_HOME = ("TRIBUTARY_STATE_URL", "TRIBUTARY_INDEX_PATH", "TRIBUTARY_STAGING_DIR", "TRIBUTARY_REDIS_URL")


def _env(**extra: str) -> dict[str, str]:
    """Subprocess environment: everything Tributary keeps lives under the job's TRIBUTARY_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIBUTARY_FAILPOINT") and k not in _PER_HOME}
    return {**env, "TRIBUTARY_TASK_RETRIES": "0", "AIRFLOW__OPENLINEAGE__DISABLED": "true", **extra}


_last_date: list[dt.datetime] = []


def _logical_date() -> str:
    """A logical date of its own for every run (unique per DAG in the metadata DB), whole seconds so
    that ``tasks clear -s D -e D`` names exactly that run."""
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    if _last_date and now <= _last_date[-1]:
        now = _last_date[-1] + dt.timedelta(seconds=1)
    _last_date.append(now)
    return now.isoformat()


@dataclass
class Case:
    home: Path
    sources: Path
    date: str = ""


def _jobs_dag_test(case: Case, *extra: str) -> list[dict[str, Any]]:
    case.date = _logical_date()
    return [{"home": str(case.home), "sources": str(case.sources), "argv": ["dags", "test", DAG_ID, case.date, *extra]}]


def _jobs_clear_and_rerun(case: Case, task: str, map_indexes: tuple[int, ...] = (-1,)) -> list[dict[str, Any]]:
    base = {"home": str(case.home), "sources": str(case.sources)}
    jobs = [{**base, "argv": ["tasks", "clear", DAG_ID, "-t", f"^{task}$", "-s", case.date, "-e", case.date, "-y"]}]
    for i in map_indexes:
        jobs.append({**base, "argv": ["tasks", "test", DAG_ID, task, case.date, *(["--map-index", str(i)] * (i >= 0))]})
    return jobs


def drive(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run Airflow CLI commands in one driver process; one result per command."""
    ensure_airflow_db()
    child = subprocess.run(
        [sys.executable, "-m", "tests.reliability._airflow_driver"],
        input=json.dumps(jobs).encode(),
        env=_env(),
        cwd=ROOT,
        capture_output=True,
        timeout=600,
    )
    out = child.stdout.decode(errors="replace")
    results = [json.loads(line[len(MARK) :]) for line in out.splitlines() if line.startswith(MARK)]
    assert child.returncode == 0 and len(results) == len(jobs), (out + child.stderr.decode(errors="replace"))[-4000:]
    return results


def _jobs_crash(case: Case, failpoint: str) -> list[dict[str, Any]]:
    """``airflow dags test`` with a failpoint armed, in a process of its own (it is meant to die):
    forked by the driver (``_airflow_driver._run_forked``)."""
    return [{**job, "fork": True, "env": {"TRIBUTARY_FAILPOINT": failpoint}} for job in _jobs_dag_test(case)]


def _crashed(result: dict[str, Any]) -> tuple[int, dict[str, Any], str, dict[str, Any]]:
    """(return code, DAG run, output, snapshot) of a killed run, from the driver's result."""
    return result["exit"], result["dag_run"], result["output"], result["snapshot"]


def _assert_same(snap: dict[str, Any], clean: dict[str, Any]) -> None:
    assert snap["rows"] == len(snap["chunks"]) == snap["fts_rows"], "duplicate or orphan index rows"
    assert snap["chunks"] == clean["chunks"]
    assert snap["state"] == clean["state"]


def _items(counts: dict[str, Any]) -> tuple[int, ...]:
    return tuple(counts[k] for k in ("new", "changed", "unchanged", "deleted", "failed", "skipped"))


@dataclass
class World:
    clean: dict[str, Any]  # result of the clean sync
    crashed: dict[str, tuple[int, dict[str, Any], str, dict[str, Any]]]  # failpoint -> (rc, dag run, output, snapshot)
    reruns: dict[str, dict[str, Any]]  # failpoint -> result of the next dags test
    edited_reference: dict[str, Any]  # snapshot of a clean sync of the edited folder
    open_run: list[dict[str, Any]]  # clearing task instances of a run before its summary ran
    finished_run: list[dict[str, Any]]  # ... and after it finished
    replanned: list[dict[str, Any]]  # clearing discover of a committed run


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    base = tmp_path_factory.mktemp("crash-airflow")
    notes = base / "notes"
    _write_notes(notes)
    sources = write_sources(base / "sources.yaml", [_spec(notes)])

    def case(name: str, src: Path = sources) -> Case:
        return Case(base / name, src)

    clean, opened, replan = case("clean"), case("clear-open"), case("clear-discover")
    edited = case("edit", write_sources(base / "edit.yaml", [_spec(base / "edit-notes")]))
    shutil.copytree(notes, base / "edit-notes")

    # 1. clean sync; first sync of the edit scenario; runs whose task instances get cleared
    jobs = _jobs_dag_test(clean) + _jobs_dag_test(edited)
    # a run stopped before its summary (marked success without running): staging still there
    jobs += _jobs_dag_test(opened, "--mark-success-pattern", "^summary$")
    for task in MAPPED:
        jobs += _jobs_clear_and_rerun(opened, task, (0, 1))
    jobs += _jobs_clear_and_rerun(opened, "commit") + _jobs_clear_and_rerun(opened, "summary")
    n_finished = len(jobs)
    for task, indexes in [("summary", (-1,)), ("commit", (-1,)), *((t, (0, 1)) for t in MAPPED), ("discover", (-1,))]:
        jobs += _jobs_clear_and_rerun(opened, task, indexes)
    n_replan = len(jobs)
    jobs += _jobs_dag_test(replan, "--mark-success-pattern", "^summary$")
    for task, indexes in (("discover", (-1,)), ("fetch", (0, 1)), ("commit", (-1,)), ("summary", (-1,))):
        jobs += _jobs_clear_and_rerun(replan, task, indexes)
    # 2. the killed runs (one forked process each) of fresh homes, after the jobs above warmed the driver
    kills = {fp: case(f"kill-{fp.replace(':', '_').replace('@', '_')}") for fp in BOUNDARIES}
    n_first = len(jobs)
    for failpoint, c in kills.items():
        jobs += _jobs_crash(c, failpoint)
    first = drive(jobs)
    assert first[0]["dag_run"]["state"] == "success" and first[1]["dag_run"]["state"] == "success"
    crashed = {fp: _crashed(r) for fp, r in zip(kills, first[n_first:], strict=True)}

    # 3. the next run of each; the edit scenario's killed run, after the edit, between them
    _edit_and_delete(base / "edit-notes")
    jobs = [job for c in kills.values() for job in _jobs_dag_test(c)]
    jobs += _jobs_crash(edited, EDIT_DELETE) + _jobs_dag_test(edited)
    second = drive(jobs)
    reruns = dict(zip(kills, second[: len(kills)], strict=True))
    crashed[EDIT_DELETE], reruns[EDIT_DELETE] = _crashed(second[-2]), second[-1]

    # reference for the edit scenario: a clean in-process sync of the edited folder
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRIBUTARY_HOME", str(base / "edit-reference"))
        for var in _PER_HOME:
            mp.delenv(var, raising=False)
        run_pipeline(SourceConfig.model_validate(_spec(base / "edit-notes")))
    return World(
        clean=first[0],
        crashed=crashed,
        reruns=reruns,
        edited_reference=snapshot(base / "edit-reference"),
        open_run=first[2:n_finished],
        finished_run=first[n_finished:n_replan],
        replanned=first[n_replan:n_first],
    )


@pytest.mark.parametrize("failpoint", list(BOUNDARIES))
def test_sigkill_at_boundary_then_next_run_equals_clean_sync(failpoint: str, world: World) -> None:
    clean = world.clean["snapshot"]
    rc, run, output, partial = world.crashed[failpoint]

    # What Airflow does: dags test runs the task in its own process, so the SIGKILL ends the run; the
    # DAG run and the killed task instance stay "running", later ones never start, no callback runs.
    assert rc == -signal.SIGKILL, output[-3000:]
    assert run["state"] == "running"
    killed = [ti for ti, state in run["tis"].items() if state == "running"]
    assert len(killed) == 1 and killed[0].split("[")[0] == BOUNDARIES[failpoint], run["tis"]
    assert run["tis"].get("summary") != "success"

    if failpoint == "commit":  # the commit itself went through before the kill
        _assert_same(partial, clean)
    else:  # nothing committed: what reached the index is not in the state yet
        assert partial["state"] == {}
        assert set(partial["chunks"]) < set(clean["chunks"])
        assert partial["rows"] == len(partial["chunks"]) == partial["fts_rows"]  # a killed transaction left nothing

    rerun = world.reruns[failpoint]
    assert rerun["exit"] == 0 and rerun["dag_run"]["state"] == "success", rerun["dag_run"]
    # after a completed commit the next run has nothing to fetch: its mapped tasks expand to nothing
    assert set(rerun["dag_run"]["tis"].values()) == ({"success", "skipped"} if failpoint == "commit" else {"success"})
    _assert_same(rerun["snapshot"], clean)

    log, clean_counts = rerun["run_log"], world.clean["run_log"]["counts"]
    assert log["status"] == "success"
    counts = log["counts"]
    if failpoint == "commit":  # the killed run's commit stands: the next run finds nothing to do
        assert _items(counts) == (0, 0, 7, 0, 0, 0) and counts["chunks_written"] == 0
    else:
        assert _items(counts) == _items(clean_counts) == (7, 0, 0, 0, 0, 0)
        # chunks the killed run already wrote (same ids, same content) are not written again
        assert counts["chunks_unchanged"] == len(partial["chunks"])
        assert counts["chunks_written"] + counts["chunks_unchanged"] == clean_counts["chunks_written"]


def test_edit_and_delete_then_sigkill_between_index_and_state_deletion(world: World) -> None:
    """One note edited, one deleted; the next run is killed inside commit after the deleted note left the
    index but before it left the state (the edit is in the index, not yet in the state). The run after
    that equals a clean sync of the edited folder."""
    rc, run, output, partial = world.crashed[EDIT_DELETE]
    assert rc == -signal.SIGKILL, output[-3000:]
    assert run["tis"]["commit"] == "running"
    assert "note6.md" in partial["state"] and not set(partial["state"]["note6.md"][1]) & set(partial["chunks"])

    rerun = world.reruns[EDIT_DELETE]
    assert rerun["dag_run"]["state"] == "success"
    items = rerun["run_log"]["items"]
    assert items["note2.md"] == "changed" and items["note6.md"] == "deleted"
    assert sorted(k for k, a in items.items() if a == "unchanged") == [f"note{i}.md" for i in (0, 1, 3, 4, 5)]
    _assert_same(rerun["snapshot"], world.edited_reference)


def test_clearing_each_task_instance_of_an_open_run_gives_the_same_result(world: World) -> None:
    """Before the summary ran (staging in place): every mapped instance, then commit, then summary, each
    cleared and re-run on its own. Index and state never move; the run log closes like a clean run's."""
    clean = world.clean["snapshot"]
    paused, *steps = world.open_run
    assert paused["dag_run"]["state"] == "success" and paused["run_log"]["status"] == "running"
    _assert_same(paused["snapshot"], clean)
    reruns = [s for s in steps if s["argv"][1] == "test"]
    assert [r["argv"][3] for r in reruns] == [t for t in MAPPED for _ in (0, 1)] + ["commit", "summary"]
    for step in steps:
        assert step["exit"] == 0
        assert set(step["dag_run"]["tis"].values()) <= {"success", None}, (step["argv"], step["dag_run"]["tis"])
        _assert_same(step["snapshot"], clean)
    assert set(steps[-1]["dag_run"]["tis"].values()) == {"success"}
    log, clean_counts = steps[-1]["run_log"], world.clean["run_log"]["counts"]
    assert log["status"] == "success" and log["lineage_rows"] == 7
    assert _items(log["counts"]) == _items(clean_counts)
    # the re-run upserts found every chunk in place: the counters describe the last attempt
    assert log["counts"]["chunks_written"] + log["counts"]["chunks_unchanged"] == clean_counts["chunks_written"]


def test_clearing_each_task_instance_after_the_run_finished_gives_the_same_result(world: World) -> None:
    """After the summary removed the run's staging, every task instance cleared and re-run on its own
    (summary, commit, each mapped instance, discover) succeeds without changing anything: index, state
    and the run-log row (still success, same counts) stay as the clean sync left them."""
    clean, clean_counts = world.clean["snapshot"], world.clean["run_log"]["counts"]
    outcome = {}
    for step in world.finished_run:
        _assert_same(step["snapshot"], clean)
        assert step["run_log"]["status"] == "success", step["argv"]
        assert _items(step["run_log"]["counts"]) == _items(clean_counts), step["argv"]
        if step["argv"][1] == "test":
            task = step["argv"][3] + (f"[{step['argv'][-1]}]" if "--map-index" in step["argv"] else "")
            outcome[task] = step["dag_run"]["tis"][task]
    assert len(outcome) == 3 + 2 * len(MAPPED) and set(outcome.values()) == {"success"}, outcome


def test_clearing_discover_of_a_committed_run_gives_the_same_result(world: World) -> None:
    """discover cleared and re-run after the commit (summary not run yet) keeps the run's plan: the
    mapped instances, commit and summary re-run after it succeed and the run log counts 7 new items
    once, as the clean sync did. (Before b82eabc discover re-planned against the committed state: no
    batches, mapped re-runs failed, the commit counted new 7 + unchanged 7.)"""
    clean = world.clean["snapshot"]
    for step in world.replanned:
        _assert_same(step["snapshot"], clean)
    last = world.replanned[-1]
    assert set(last["dag_run"]["tis"].values()) == {"success"}, last["dag_run"]["tis"]
    assert last["run_log"]["status"] == "success" and last["run_log"]["lineage_rows"] == 7
    assert _items(last["run_log"]["counts"]) == _items(world.clean["run_log"]["counts"])


_HIT_THREE_TIMES = (
    "from include.failpoints import failpoint\nfor i in range(3):\n    print(i, flush=True)\n    failpoint('x')\n"
)


def test_failpoint_fires_at_the_named_hit_and_once_across_processes(tmp_path: Path) -> None:
    def hit(**env: str) -> tuple[int, str]:
        child = subprocess.run(
            [sys.executable, "-c", _HIT_THREE_TIMES], env=_env(**env), cwd=ROOT, capture_output=True, text=True
        )
        return child.returncode, child.stdout.split()

    assert hit() == (0, ["0", "1", "2"])
    assert hit(TRIBUTARY_FAILPOINT="y,x@2") == (-signal.SIGKILL, ["0", "1"])
    assert hit(TRIBUTARY_FAILPOINT="x@4") == (0, ["0", "1", "2"])
    once = {"TRIBUTARY_FAILPOINT": "x", "TRIBUTARY_FAILPOINT_ONCE": str(tmp_path / "fired")}
    assert hit(**once) == (-signal.SIGKILL, ["0"])
    assert hit(**once) == (0, ["0", "1", "2"])  # the marker exists: a retry runs through
