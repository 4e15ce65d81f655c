"""Shared test set-up.

Airflow reads its configuration when first imported, so the environment for it is set here at
import time: a private AIRFLOW_HOME per test session (SQLite metadata DB, migrated once), our
dags/ and plugins/ folders, no examples. Tributary's own state, index and staging go to a
per-test temporary TRIBUTARY_HOME (fixture ``tributary_home``).

Secret-leak scan of the whole run (issue 10, item 4): the simulators register every credential
they know or issue (``tests/support/leakscan.py``); each test's captured stdout/stderr/log is kept
as a file; at session end every file the run produced — pytest's temporary directories (task and
component logs of the Airflow stacks, every TRIBUTARY_HOME), this session directory, the files
AIRFLOW_HOME gained during the run — is searched for them. A hit fails the session, naming the file
and the kind of secret (never the secret); the summary line counts what was scanned.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import leakscan
from tests.support.postgres import scratch_database

ROOT = Path(__file__).resolve().parent.parent
_SESSION_DIR = Path(tempfile.mkdtemp(prefix="tributary-tests-"))

# ``make test`` runs the suite in pytest-xdist workers (``-n 2 --dist loadfile``): each worker is a
# session of its own, so it gets its own AIRFLOW_HOME (metadata DB) and Redis database, never the
# other worker's. A serial run keeps the caller's AIRFLOW_HOME (``make test`` exports the repo's).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER:
    os.environ["AIRFLOW_HOME"] = str(_SESSION_DIR / "airflow")
os.environ.setdefault("AIRFLOW_HOME", str(_SESSION_DIR / "airflow"))
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(ROOT / "plugins")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
os.environ.setdefault("TRIBUTARY_HOME", str(_SESSION_DIR / "tributary"))

_SESSION_START = time.time()
_SECRETS_DIR = _SESSION_DIR / "secrets"
_CAPTURED_DIR = _SESSION_DIR / "captured"
_SECRETS_DIR.mkdir()
_CAPTURED_DIR.mkdir()
# set, not setdefault: a pytest run started by a test keeps its own registry
os.environ[leakscan.ENV] = str(_SECRETS_DIR)
_AIRFLOW_HOME = Path(os.environ["AIRFLOW_HOME"])
_SCAN_KEY = pytest.StashKey[leakscan.ScanResult]()

# db 15, one lower per xdist worker (gw0: 15, gw1: 14; the cluster tests use 12 and 13)
_REDIS_DB = 15 - int(_WORKER.removeprefix("gw") or 0)
REDIS_URL = os.environ.get("TEST_REDIS_URL", f"redis://127.0.0.1:6379/{_REDIS_DB}")


@pytest.fixture
def tributary_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh TRIBUTARY_HOME (state, index, staging) for one test."""
    home = tmp_path / "tributary"
    monkeypatch.setenv("TRIBUTARY_HOME", str(home))
    for var in ("TRIBUTARY_STATE_URL", "TRIBUTARY_INDEX_PATH", "TRIBUTARY_STAGING_DIR", "TRIBUTARY_REDIS_URL"):
        monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A real Redis (db 15), flushed before and after the test."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    client.ping()  # fail loudly: .ci/run starts Redis, a missing one is a set-up error
    client.flushdb()
    yield REDIS_URL
    client.flushdb()
    client.close()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test; dropped afterwards."""
    with scratch_database("tributary_test") as url:
        yield url


@pytest.fixture
def demo_site(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A private copy of the demo handbook served on 127.0.0.1: (its root, its base URL)."""
    import shutil

    from plugins.tributary_airflow.demo.serve import SITE, serve_directory

    root = tmp_path / "site"
    shutil.copytree(SITE, root)
    server, thread = serve_directory(root)
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        thread.join(timeout=10)


# --------------------------------------------------------------------------- secret-leak scan


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep each test's captured output (the teardown report carries every phase's sections)."""
    if report.when != "teardown" or not report.sections:
        return
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", report.nodeid)[-150:]
    text = "".join(f"----- {title}\n{content}\n" for title, content in report.sections)
    # dag.test() runs tasks in this process: their task logs are this captured output
    folder = _CAPTURED_DIR / ("dag-test" if "[DAG TEST] starting task_id=" in text else "tests")
    folder.mkdir(exist_ok=True)
    path = folder / f"{len(os.listdir(folder)):05d}-{name}.txt"
    path.write_text(text, encoding="utf-8", errors="backslashreplace")


@pytest.hookimpl(tryfirst=True)  # before the tmpdir plugin's own session-end clean-up
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    roots = [_SESSION_DIR]
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:
        roots.append(factory.getbasetemp())
    since = {}
    if not _AIRFLOW_HOME.resolve().is_relative_to(_SESSION_DIR.resolve()):
        roots.append(_AIRFLOW_HOME)  # `make test` keeps AIRFLOW_HOME in the repo: this run's files only
        since[_AIRFLOW_HOME] = _SESSION_START
    secrets = leakscan.load_secrets(_SECRETS_DIR)
    result = leakscan.scan(roots, secrets, exclude=[_SECRETS_DIR], modified_since=since)
    session.config.stash[_SCAN_KEY] = result
    if result.findings:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    result = config.stash.get(_SCAN_KEY, None)
    if result is None:
        return
    kinds = result.secrets_by_kind
    cats = ", ".join(f"{n} {c}" for c, n in sorted(result.by_category.items()))
    terminalreporter.write_sep("-", "secret-leak scan")
    terminalreporter.write_line(
        f"secret-leak scan: {result.files} files ({result.bytes / 2**20:.1f} MiB) scanned [{cats}] for "
        f"{sum(kinds.values())} registered secrets ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}); "
        f"{len(result.findings)} leaks"
    )
    for finding in result.findings:
        terminalreporter.write_line(f"SECRET LEAK: a {finding.kind} appears in {finding.path}", red=True)
    policy = config.getini("tmp_path_retention_policy")
    if policy != "all":  # "failed"/"none" delete passed tests' tmp_path before the session ends
        terminalreporter.write_line(
            f"secret-leak scan: tmp_path_retention_policy={policy}: removed tmp dirs not scanned"
        )
    if result.unreadable:
        terminalreporter.write_line(f"secret-leak scan: {len(result.unreadable)} files could not be read")
