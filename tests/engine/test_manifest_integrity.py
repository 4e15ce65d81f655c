"""Stage manifests are verified between steps (issue 33, point 13).

One byte changed in a stage manifest between two steps (title "Beta" -> "BetX", a chunk id) was
indexed or committed as if the engine had written it. Each step now hands on a ref carrying the
manifest's size and SHA-256; a changed manifest fails its batch's items as ``staging_corrupt``
(retryable: not advanced, fetched again next run), on local, PostgreSQL and S3 (moto) staging.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from include.config import SourceConfig
from include.index.sqlite_fts import SqliteFtsIndex
from include.settings import get_settings
from include.staging import StagingArea, split_ref
from include.staging.locations import location_name
from include.stores import open_state_store
from plugins.engine import run_pipeline
from plugins.engine import steps as engine_steps
from tests.support.postgres import scratch_database
from tests.support.s3 import S3Server, s3_connection

CONN_ID = "tributary_manifest_s3"
DOCS = {
    "a.md": "# Alpha\n\nThe alpha page talks about river deltas and sediment.\n",
    "b.md": "# Beta\n\nBeta explains how salmon find their way upstream.\n",
    "c.txt": "Gamma is a plain text note about estuaries and tides.\n",
}
SID = "files:m"


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_connection(CONN_ID) as server:
        yield server


@pytest.fixture(params=["local", "postgres", "s3"])
def staging(request: pytest.FixtureRequest, tributary_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    kind = request.param
    monkeypatch.delenv("TRIBUTARY_STAGING_URL", raising=False)
    if kind == "local":
        yield kind
    elif kind == "s3":
        server: S3Server = request.getfixturevalue("s3")
        monkeypatch.setenv("TRIBUTARY_STAGING_URL", f"s3://{CONN_ID}@{server.bucket}/t-{uuid.uuid4().hex[:8]}")
        yield kind
    else:
        try:
            context = scratch_database("tributary_manifests")
            url = context.__enter__()
        except Exception as exc:  # no PostgreSQL on this machine
            pytest.skip(f"PostgreSQL unreachable: {exc}")
        monkeypatch.setenv("TRIBUTARY_STATE_URL", url)
        monkeypatch.setenv("TRIBUTARY_STAGING_URL", f"db:///staging-{uuid.uuid4().hex[:8]}")
        try:
            yield kind
        finally:
            context.__exit__(None, None, None)


def _source(tmp_path: Path) -> SourceConfig:
    root = tmp_path / "docs"
    root.mkdir(exist_ok=True)
    for name, text in DOCS.items():
        (root / name).write_text(text, encoding="utf-8")
    return SourceConfig(kind="files", name="m", options={"root": str(root)}, batch_size=2)


def _flip(ref: str, old: bytes, new: bytes) -> bool:
    """Change ``old`` to ``new`` (same length) in the staged file ``ref`` names; whether it held it."""
    path = split_ref(ref)[0]
    data = StagingArea.read_bytes(path)
    if old not in data:
        return False
    StagingArea.of(path).write_bytes(location_name(path), data.replace(old, new, 1))
    return True


def _after(monkeypatch: pytest.MonkeyPatch, stage: str, old: bytes, new: bytes) -> list[str]:
    """Flip ``old`` in the manifest the step running ``stage`` writes, before the next step reads it."""
    flipped: list[str] = []
    original: Callable[..., str] = getattr(engine_steps, stage)

    def wrapped(*args: Any, **kwargs: Any) -> str:
        ref = original(*args, **kwargs)
        if _flip(ref, old, new):
            flipped.append(ref)
        return ref

    monkeypatch.setattr(engine_steps, stage, wrapped)
    return flipped


def _index_rows() -> list[dict[str, Any]]:
    index = SqliteFtsIndex(get_settings().index_path, index_name="tributary")
    try:
        return [r for r in (index.get_chunk(c) for c in sorted(index.chunk_ids(source=SID))) if r]
    finally:
        index.close()


def _state_agrees_with_index() -> None:
    """Every chunk id the state records of an item is one the index holds for its document."""
    held = {(r["doc_id"], r["chunk_id"]) for r in _index_rows()}
    store = open_state_store()
    try:
        for state in store.items(SID).values():
            assert {(state.doc_id, c) for c in state.chunk_ids} <= held, state.item_key
    finally:
        store.close()


def _title_of_b(rows: list[dict[str, Any]]) -> set[str]:
    return {str(r.get("title")) for r in rows if "salmon" in r["text"]}


# (step whose output manifest is changed before the next step reads it, bytes, replacement;
# None: the first hex digit of the first chunk id)
FLIPS: dict[str, tuple[str, bytes | None, bytes | None]] = {
    "title_before_upsert": ("chunk_stage", b'"title": "Beta"', b'"title": "BetX"'),
    "key_before_parse": ("fetch_stage", b'"item_key": "b.md"', b'"item_key": "b.mX"'),
    "chunk_id_before_upsert": ("chunk_stage", None, None),
    "chunk_id_before_commit": ("upsert_stage", None, None),
}


@pytest.mark.parametrize("case", sorted(FLIPS))
def test_a_changed_manifest_fails_its_items_and_the_next_run_indexes_them(
    case: str, staging: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _source(tmp_path)
    stage, old, new = FLIPS[case]
    with monkeypatch.context() as m:
        flipped = _after(m, stage, old, new) if old and new else _after_chunk_id(m, stage)
        first = run_pipeline(source)
    assert flipped, "the manifest was not changed"
    assert first.status in ("partial", "failed")  # items failed: never reported as a clean run
    assert first.counts["failed"] >= 1, first.counts
    assert "BetX" not in {str(r.get("title")) for r in _index_rows()}
    _state_agrees_with_index()
    second = run_pipeline(source)  # the failed items are fetched again and indexed as they are
    assert second.status == "success" and second.counts["failed"] == 0, second.counts
    assert _title_of_b(_index_rows()) == {"Beta"}
    _state_agrees_with_index()
    store = open_state_store()
    try:
        states = store.items(SID)
    finally:
        store.close()
    assert set(states) == set(DOCS) and all(st.chunk_ids for st in states.values())


def _after_chunk_id(monkeypatch: pytest.MonkeyPatch, stage: str) -> list[str]:
    """Change the first hex digit of the first chunk id in the manifest ``stage`` writes."""
    flipped: list[str] = []
    original: Callable[..., str] = getattr(engine_steps, stage)

    def wrapped(*args: Any, **kwargs: Any) -> str:
        ref = original(*args, **kwargs)
        path = split_ref(ref)[0]
        data = StagingArea.read_bytes(path)
        at = data.find(b'"chunk_ids": ["')
        if at >= 0:
            pos = at + len(b'"chunk_ids": ["')
            digit = b"1" if data[pos : pos + 1] != b"1" else b"2"
            StagingArea.of(path).write_bytes(location_name(path), data[:pos] + digit + data[pos + 1 :])
            flipped.append(ref)
        return ref

    monkeypatch.setattr(engine_steps, stage, wrapped)
    return flipped


def test_a_bare_manifest_path_is_still_read(tmp_path: Path, tributary_home: Path) -> None:
    """A run started before refs hands on bare paths: they are read, unchecked."""
    area = StagingArea.at(tmp_path / "run")
    staged = area.put_json("batch-0000.json", {"x": 1})
    assert split_ref(staged.ref()) == (staged.path, staged.digest())
    assert split_ref(staged.path) == (staged.path, None)
    assert StagingArea.of(staged.ref()).root == area.root
