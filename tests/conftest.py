"""Shared test set-up.

Airflow reads its configuration when first imported, so the environment for it is set here at
import time: a private AIRFLOW_HOME per test session (SQLite metadata DB, migrated once), our
dags/ and plugins/ folders, no examples. Tributary's own state, index and staging go to a
per-test temporary TRIBUTARY_HOME (fixture ``tributary_home``).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_SESSION_DIR = Path(tempfile.mkdtemp(prefix="tributary-tests-"))

os.environ.setdefault("AIRFLOW_HOME", str(_SESSION_DIR / "airflow"))
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(ROOT / "plugins")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
os.environ.setdefault("TRIBUTARY_HOME", str(_SESSION_DIR / "tributary"))

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
PG_ADMIN_URL = os.environ.get("TEST_PG_URL", "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres")


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
    import sqlalchemy as sa

    name = f"tributary_test_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(
                sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"), {"n": name}
            )
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


@pytest.fixture
def demo_site(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A private copy of the demo handbook served on 127.0.0.1: (its root, its base URL)."""
    import shutil

    from include.demo.serve import SITE, serve_directory

    root = tmp_path / "site"
    shutil.copytree(SITE, root)
    server, thread = serve_directory(root)
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        thread.join(timeout=10)
