"""The staging backends, one contract: a local directory, S3 (moto's server on loopback), the
PostgreSQL state database and a SQLite one (include/staging/).

Every backend must keep what ``StagingArea`` promises: writes replace atomically, a reader checks
size and hash and refuses a truncated or replaced object, manifests are listed in batch order, a
run's cleanup removes exactly that run (keeping ``raw/`` when asked), and sizes add up. Then the
in-process pipeline runs with its staging in S3 and in PostgreSQL and must index the same chunks
as with local staging, leave nothing in the local staging directory, and clean up after itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from include.config import SourceConfig
from include.index.sqlite_fts import SqliteFtsIndex
from include.settings import get_settings
from include.staging import StagingArea, StagingCorruptError
from include.staging import database as db_staging
from include.staging.locations import backend_for
from include.stores import open_state_store
from plugins.engine import run_pipeline
from tests.support.postgres import scratch_database
from tests.support.s3 import S3Server, s3_connection

CONN_ID = "tributary_stage_s3"  # one per test module: Airflow caches a file system per conn id
BACKENDS = ["local", "s3", "postgres", "sqlite"]
DOCS = {
    "a.md": "# Alpha\n\nThe alpha page talks about river deltas and sediment.\n",
    "b.md": "# Beta\n\nBeta explains how salmon find their way upstream.\n",
    "c.txt": "Gamma is a plain text note about estuaries and tides.\n",
    "d.html": "<html><body><main><h1>Delta</h1><p>Delta covers flood plains in spring.</p></main></body></html>",
    "e.md": "# Epsilon\n\nEpsilon lists the bridges over the river.\n",
}


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_connection(CONN_ID) as server:
        yield server


@pytest.fixture
def pg_url() -> Iterator[str]:
    # one per test: the pipeline tests need an empty state as much as an empty staging table
    with scratch_database("tributary_staging") as url:
        yield url


@pytest.fixture(params=BACKENDS)
def staging_url(
    request: pytest.FixtureRequest, tributary_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> str:
    """TRIBUTARY_STAGING_URL (and the state DB it needs) for one backend; "" is local staging."""
    kind = request.param
    url = ""
    if kind == "s3":
        s3: S3Server = request.getfixturevalue("s3")
        url = f"s3://{CONN_ID}@{s3.bucket}/t-{uuid.uuid4().hex[:8]}"
    elif kind in ("postgres", "sqlite"):
        state = request.getfixturevalue("pg_url") if kind == "postgres" else f"sqlite:///{tmp_path / 'state.db'}"
        monkeypatch.setenv("TRIBUTARY_STATE_URL", state)
        url = f"db:///staging-{uuid.uuid4().hex[:8]}"
    if url:
        monkeypatch.setenv("TRIBUTARY_STAGING_URL", url)
    else:
        monkeypatch.delenv("TRIBUTARY_STAGING_URL", raising=False)
    return url


def _local_staging_files() -> list[Path]:
    root = get_settings().staging_dir
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


# -- the contract --------------------------------------------------------------------------------
def test_write_read_size_exists(staging_url: str) -> None:
    area = StagingArea("sync_files_t", "manual__1")
    assert area.root.startswith(staging_url or str(get_settings().staging_dir))
    assert not area.exists() and not area.has("batch-0000.json")
    loc = area.write_json("batch-0000.json", {"items": ["a", "ü"]})
    assert area.has("batch-0000.json") and StagingArea.exists_at(loc)
    assert StagingArea.read_json(loc) == {"items": ["a", "ü"]}
    assert backend_for(loc).size(loc) == len(StagingArea.read_bytes(loc))
    assert backend_for(loc).size(area.path("nothing.json")) is None
    with pytest.raises(FileNotFoundError):
        StagingArea.read_bytes(area.path("nothing.json"))
    if staging_url:
        assert _local_staging_files() == []


def test_replace_is_whole_and_leaves_one_object(staging_url: str) -> None:
    area = StagingArea("sync_files_t", "manual__2")
    area.write_bytes("parsed-0001.json", b"old" * 1000)
    loc = area.write_bytes("parsed-0001.json", b"new")
    assert StagingArea.read_bytes(loc) == b"new"
    assert [name for name, _ in backend_for(area.root).walk(area.root)] == [loc]  # no temporary left


def test_digest_check_refuses_truncated_replaced_and_gone(staging_url: str) -> None:
    area = StagingArea("sync_files_t", "manual__3")
    staged = area.put_bytes("raw/x.bin", b"0123456789" * 10)
    assert StagingArea.read_verified(staged.path, staged.digest()) == b"0123456789" * 10
    backend = backend_for(staged.path)
    backend.write(staged.path, b"0123456789")  # truncated
    with pytest.raises(StagingCorruptError, match="10 bytes, 100 were staged"):
        StagingArea.read_verified(staged.path, staged.digest())
    backend.write(staged.path, b"x" * 100)  # same size, other bytes
    with pytest.raises(StagingCorruptError, match="sha256"):
        StagingArea.read_verified(staged.path, staged.digest())
    backend.remove(area.root)
    with pytest.raises(StagingCorruptError, match="gone"):
        StagingArea.read_verified(staged.path, staged.digest())


def test_stage_files_in_batch_order(staging_url: str) -> None:
    area = StagingArea("sync_files_t", "manual__4")
    for name in ("upserted-0010.json", "parsed-0001.json", "upserted-0002.json", "raw/upserted-0003.json"):
        area.write_json(name, {})
    assert area.stage_files("upserted") == [area.path("upserted-0002.json"), area.path("upserted-0010.json")]
    # the location of a listed manifest leads back to its area
    assert StagingArea.of(area.stage_files("parsed")[0]).root == area.root


def test_cleanup_removes_this_run_only_and_keeps_raw_when_asked(staging_url: str) -> None:
    # run ids that a prefix test would confuse: "r_1" as a LIKE pattern matches "rx1", "r_1" is a
    # string prefix of "r_10"
    runs = {run: StagingArea("sync_files_t", run) for run in ("r_1", "rx1", "r_10")}
    for area in runs.values():
        area.write_json("batch-0000.json", {"n": 1})
        area.stage_raw("item", b"raw bytes", "page.html")
    area = runs["r_1"]
    assert area.holds_more_than_raw()
    area.cleanup(keep_raw=True)
    assert area.exists() and not area.holds_more_than_raw()
    assert [loc.rsplit("/", 2)[-2] for loc, _ in backend_for(area.root).walk(area.root)] == ["raw"]
    area.cleanup()
    assert not area.exists() and area.size_bytes() == 0
    for other in ("rx1", "r_10"):
        assert runs[other].has("batch-0000.json") and runs[other].holds_more_than_raw()


# run ids that once reached another run's staging (issue 33, points 10 and 11): ``..`` and ``.``
# named the DAG's or the whole tree's directory; ``:`` was mapped to ``_`` and ids were cut at 150
# characters, so these pairs shared one prefix and one run's cleanup deleted the other's files
HOSTILE_RUN_IDS = [
    "..",
    ".",
    "",
    "a/../../b",
    "manual__2026-12-04T10:00:00+00:00",
    "manual__2026-12-04T10_00_00+00_00",
    "x" * 150 + "-first",
    "x" * 150 + "-second",
    "x" * 150,
]


def test_no_run_id_reaches_another_runs_staging(staging_url: str) -> None:
    neighbour = StagingArea("sync_other_t", "manual__neighbour")
    neighbour.write_json("batch-0000.json", {"n": 1})
    areas = [StagingArea("sync_files_t", run) for run in HOSTILE_RUN_IDS]
    assert len({a.root for a in areas}) == len(areas)  # one prefix per run id
    base = areas[0].root.rsplit("/", 1)[0]  # the DAG's own prefix
    for area in areas:
        assert area.root.startswith(base + "/") and "/" not in area.root[len(base) + 1 :]
        area.write_json("batch-0000.json", {"root": area.root})
    for doomed in areas:
        doomed.cleanup()
        assert not doomed.exists()
        for other in areas[areas.index(doomed) + 1 :]:
            assert StagingArea.read_json(other.path("batch-0000.json")) == {"root": other.root}
        assert neighbour.has("batch-0000.json")
    assert StagingArea("sync_files_t", "plain-run_1.2").root.endswith("/sync_files_t/plain-run_1.2")


def test_size_bytes_adds_every_object(staging_url: str) -> None:
    area = StagingArea("sync_files_t", "manual__5")
    area.write_bytes("batch-0000.json", b"a" * 10)
    area.write_bytes("raw/one.bin", b"b" * 200)
    area.write_bytes("raw/sub/two.bin", b"c" * 3000)
    assert area.size_bytes() == 3210


def test_database_backend_refuses_an_object_over_its_cap(
    tributary_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TRIBUTARY_STATE_URL", f"sqlite:///{tmp_path / 'state.db'}")
    monkeypatch.setattr(db_staging, "MAX_OBJECT_BYTES", 64)
    area = StagingArea.at("db:///staging/sync_files_t/big")
    with pytest.raises(db_staging.StagingTooLargeError, match="over the database staging cap"):
        area.write_bytes("raw/big.bin", b"x" * 65)
    assert not area.exists()
    with pytest.raises(ValueError, match="db:///"):
        db_staging.DatabaseBackend().size("db://host/x")


# -- the pipeline with shared staging ------------------------------------------------------------
def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir(exist_ok=True)
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def _sync_chunks(source: SourceConfig) -> dict[str, str]:
    summary = run_pipeline(source)
    assert summary.status == "success", summary
    assert summary.counts["new"] == len(DOCS) and summary.counts["failed"] == 0
    index = SqliteFtsIndex(get_settings().index_path, index_name="tributary")
    try:
        return {cid: index.get_chunk(cid)["text_hash"] for cid in index.chunk_ids()}  # type: ignore[index]
    finally:
        index.close()


@pytest.fixture
def reference_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The chunks a sync with local staging indexes (in its own TRIBUTARY_HOME)."""
    with monkeypatch.context() as m:
        m.setenv("TRIBUTARY_HOME", str(tmp_path / "reference"))
        for var in ("TRIBUTARY_STATE_URL", "TRIBUTARY_INDEX_PATH", "TRIBUTARY_STAGING_DIR", "TRIBUTARY_STAGING_URL"):
            m.delenv(var, raising=False)
        source = SourceConfig(kind="files", name="t", options={"root": str(_folder(tmp_path))}, batch_size=2)
        return _sync_chunks(source)


@pytest.mark.parametrize("staging_url", ["s3", "postgres"], indirect=True)
@pytest.mark.parametrize("retain_raw", [False, True])
def test_pipeline_with_shared_staging_indexes_the_same_chunks(
    staging_url: str, retain_raw: bool, reference_chunks: dict[str, str], tmp_path: Path
) -> None:
    source = SourceConfig(
        kind="files", name="t", options={"root": str(_folder(tmp_path))}, batch_size=2, retain_raw=retain_raw
    )
    assert _sync_chunks(source) == reference_chunks
    assert _local_staging_files() == []
    backend = backend_for(staging_url)
    left = [loc for loc, _ in backend.walk(staging_url)]
    if retain_raw:  # the raw bytes stay for audit, every manifest is gone
        assert len(left) == len(DOCS) and all("/raw/" in loc for loc in left), left
    else:
        assert left == []


@pytest.mark.parametrize("staging_url", ["sqlite"], indirect=True)
def test_a_file_over_the_database_cap_fails_alone_and_the_batch_goes_on(
    staging_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Non-negotiable: one bad document never fails a batch. The one file staging refuses is a
    fetch failure of its item (not retryable: it is as large next time); the others are indexed."""
    root = _folder(tmp_path)
    (root / "big.txt").write_text("river " * 4000, encoding="utf-8")  # 24,000 bytes; manifests < 10,000
    monkeypatch.setattr(db_staging, "MAX_OBJECT_BYTES", 12_000)
    source = SourceConfig(kind="files", name="t", options={"root": str(root)}, batch_size=10)
    summary = run_pipeline(source)
    assert summary.status == "partial" and summary.counts["new"] == len(DOCS) and summary.counts["failed"] == 1
    store = open_state_store()
    try:
        [row] = store.run_items(summary.run_id, action="failed", source=source.source_id)
    finally:
        store.close()
    assert row["item_key"] == "big.txt" and row["reason"] == "fetch: staging_too_large", row
