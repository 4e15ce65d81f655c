"""The manifest records (plugins.engine.records): one JSON form, checked versions, and the
version 1 dict manifests (tests/engine/fixtures/v1, staged by the engine before records, from a
run that changed, added, skipped and deleted items) read and committed as that engine did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from include.config import SourceConfig
from include.contract import Change, ChangeKind, Chunk, VersionEvidence, text_hash
from include.index import DocumentRecord, DocumentWrite, open_index
from include.stores import ItemState, StateStore
from plugins.engine.commit import commit_stage
from plugins.engine.context import RunContext, RunParams
from plugins.engine.manifests import read_plan, read_stage_manifest
from plugins.engine.records import (
    SCHEMA_VERSION,
    BatchManifest,
    ItemFailure,
    ItemRecord,
    ManifestError,
    ManifestVersionError,
    ParseOutcome,
    PriorState,
    RunPlan,
    StagedRef,
    decode,
    encode,
)

V1 = Path(__file__).parent / "fixtures" / "v1"


def _batch() -> BatchManifest:
    item = ItemRecord(
        change=Change("a.md", ChangeKind.CHANGED, VersionEvidence(etag="e"), metadata={"k": [1]}),
        prior=PriorState("doc-a", VersionEvidence(etag="old"), "h0", "p", ["doc-a-00000"], 1, "r0", 0),
        forced=True,
        staged=StagedRef("/s/raw/a", 4, "ab" * 32),
        parsed=ParseOutcome("h1", "markdown", "1.0", 1, 9, "A", {"truncated": True}),
        unchanged_reason="content hash unchanged",
    )
    failure = ItemFailure("b.pdf", "parse:encrypted", "locked", False, "parse", {"needs_ocr": True})
    return BatchManifest("r1", "files:t", 3, "parsed", [item], [item], [failure])


def test_a_batch_manifest_survives_json_unchanged() -> None:
    batch = _batch()
    data = json.loads(json.dumps(encode(batch)))
    assert data["schema_version"] == SCHEMA_VERSION and data["items"][0]["change"]["kind"] == "changed"
    assert decode(BatchManifest, data, "parsed-0003.json") == batch


def test_a_plan_survives_json_unchanged() -> None:
    plan = RunPlan("r1", "files:t", False, True, "p", new_or_changed={"a.md": ChangeKind.NEW}, batches=["b"])
    assert decode(RunPlan, json.loads(json.dumps(encode(plan))), "discover.json") == plan


def test_an_unknown_schema_version_is_refused_naming_file_and_version(tmp_path: Path) -> None:
    path = tmp_path / "upserted-0000.json"
    path.write_text(json.dumps({**encode(_batch()), "schema_version": 7}), encoding="utf-8")
    with pytest.raises(ManifestVersionError) as info:
        read_stage_manifest(str(path))
    assert info.value.path == str(path) and info.value.version == 7
    assert str(path) in str(info.value) and "schema_version 7" in str(info.value)


def test_a_manifest_that_is_not_its_record_is_refused_naming_the_file(tmp_path: Path) -> None:
    data = encode(_batch())
    del data["items"][0]["change"]["item_key"]
    path = tmp_path / "parsed-0003.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ManifestError, match=r"(?s)parsed-0003\.json \(schema_version 2\).*items\.0\.change\.item_key"):
        read_stage_manifest(str(path))
    with pytest.raises(ManifestError, match="expected a JSON object"):
        decode(RunPlan, [], "discover.json")


def test_version_1_manifests_read_as_records() -> None:
    plan = read_plan(V1 / "discover.json")
    assert plan.schema_version == SCHEMA_VERSION  # upgraded on read
    assert plan.new_or_changed == {"b.md": "changed", "c.txt": "changed", "d.md": "new", "empty.md": "new"}
    [deletion] = plan.deletions
    assert (deletion.item_key, deletion.reason) == ("gone.md", "absent from 1 complete listing(s)")
    assert deletion.version is not None and deletion.version.revision == "size:22"
    assert [u.item_key for u in plan.unchanged] == ["a.md"]

    batch = read_stage_manifest(str(V1 / "batch-0000.json"))
    assert (batch.stage, [i.item_key for i in batch.items], batch.failures) == ("batch", ["b.md", "c.txt"], [])
    upserted = read_stage_manifest(str(V1 / "upserted-0000.json"))
    [b], [c] = upserted.items, upserted.unchanged
    assert b.raw is not None and b.raw.file.path.startswith("STAGING/raw/") and b.raw.byte_size == 30
    assert b.parsed is not None and b.parsed.file is not None and b.parsed.parser == "markdown"
    assert b.chunked is not None and b.upserted is not None
    assert b.chunked.chunk_ids == b.upserted.chunks_kept and b.prior is not None and b.prior.has_version
    assert c.unchanged_reason == "content hash unchanged" and c.parsed is not None and c.parsed.file is None
    [failure] = read_stage_manifest(str(V1 / "upserted-0001.json")).failures
    assert (failure.item_key, failure.reason, failure.stage, failure.retryable) == (
        "empty.md",
        "parse:empty",
        "parse",
        False,
    )


def _stage_v1(ctx: RunContext) -> None:
    """The version 1 plan and upserted manifests, in this run's staging area."""
    root = Path(ctx.staging.root)
    root.mkdir(parents=True)
    for name in ("discover.json", "upserted-0000.json", "upserted-0001.json"):
        (root / name).write_text((V1 / name).read_text(encoding="utf-8").replace("STAGING", str(root)))


def _prior_state(store: StateStore, sid: str) -> list[DocumentWrite]:
    """The state (and index) the version 1 run was planned against."""
    plan = read_plan(V1 / "discover.json")
    entries = [
        *plan.unchanged,
        *(i for n in (0, 1) for i in read_stage_manifest(str(V1 / f"upserted-000{n}.json")).items),
    ]
    entries += read_stage_manifest(str(V1 / "upserted-0000.json")).unchanged
    states = [
        ItemState(sid, e.item_key, p.doc_id, p.version, p.content_hash, p.processing_hash, p.chunk_ids)
        for e in entries
        if (p := e.prior) is not None
    ]
    [gone] = plan.deletions
    states.append(ItemState(sid, gone.item_key, gone.doc_id, gone.version, "h", plan.processing_hash, gone.chunk_ids))
    store.save_items(states)
    chunk = Chunk(gone.chunk_ids[0], gone.doc_id, 0, "soon deleted", 2, text_hash("soon deleted"))
    return [DocumentWrite(DocumentRecord(sid, gone.doc_id, gone.item_key), [chunk])]


def test_a_run_staged_by_version_1_commits_as_that_engine_did(store: StateStore, tmp_path: Path) -> None:
    source = SourceConfig(kind="files", name="v1", options={"root": str(tmp_path)}, batch_size=2)
    ctx = RunContext(source=source, run_id="v1run", params=RunParams(allow_mass_delete=True))
    _stage_v1(ctx)
    writes = _prior_state(store, source.source_id)
    index = open_index(source.index)
    index.upsert(writes)
    index.close()

    counts = commit_stage(ctx, store, lambda: open_index(source.index))

    # what the version 1 engine committed from these very manifests
    expected = {"new": 1, "changed": 1, "unchanged": 2, "deleted": 1, "skipped": 1, "failed": 0, "fetched": 3}
    assert {k: counts[k] for k in expected} == expected
    assert (counts["chunks_written"], counts["chunks_deleted"], counts["bytes_fetched"]) == (2, 1, 66)
    actions = {r["item_key"]: (r["action"], r["reason"]) for r in store.run_items("v1run", source=source.source_id)}
    assert actions == {
        "a.md": ("unchanged", "not modified"),
        "b.md": ("changed", None),
        "c.txt": ("unchanged", "content hash unchanged"),
        "d.md": ("new", None),
        "empty.md": ("skipped", "parse: parse:empty"),
        "gone.md": ("deleted", "absent from 1 complete listing(s)"),
    }
    states = store.items(source.source_id)
    assert "gone.md" not in states and states["b.md"].content_hash == "204ab1e30787fdd76437b0edc58d5819"
    assert (states["empty.md"].failure_count, states["empty.md"].last_error_reason) == (0, "parse:empty")


def test_a_version_1_manifest_that_cannot_be_upgraded_is_refused_naming_version_1(tmp_path: Path) -> None:
    data = json.loads((V1 / "fetched-0000.json").read_text(encoding="utf-8"))
    del data["items"][0]["raw_digest"]  # an entry without the digest of its staged bytes
    path = tmp_path / "fetched-0000.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ManifestError) as info:
        read_stage_manifest(str(path))
    assert info.value.version == 1 and f"manifest {path} (schema_version 1)" in str(info.value)
    assert "items.0.raw.file" in str(info.value)
