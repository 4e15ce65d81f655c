"""Commit rules (plugins.engine.commit_rules), each alone, on a real SQLite state store and
(for deletions) the real SQLite index."""

from __future__ import annotations

from include.config import SourceConfig
from include.contract import Change, ChangeKind, Chunk, VersionEvidence, text_hash
from include.index import DocumentRecord, DocumentWrite, open_index
from include.stores import StateStore
from plugins.engine.commit_rules import (
    CommitBook,
    apply_deletions,
    commit_unchanged,
    commit_written,
    dry_run_counts,
    dry_run_lineage,
    failure_state,
    keep_missing,
    merge_observed_version,
    rebuild_ends,
    record_failures,
    record_skipped,
    run_counts,
)
from plugins.engine.context import RunParams
from plugins.engine.records import (
    BatchManifest,
    ChunkOutcome,
    Deletion,
    ItemFailure,
    ItemRecord,
    ParseOutcome,
    PriorState,
    RawRef,
    RunPlan,
    Skip,
    StagedRef,
    UpsertOutcome,
)
from tests.engine.conftest import SID, state, stored

REF = StagedRef("/staging/x", 3, "00" * 32)


def _written_item(key: str, prior: PriorState | None = None, **kw: object) -> ItemRecord:
    doc = prior.doc_id if prior else f"doc-{key}"
    return ItemRecord(
        change=Change(key, ChangeKind.CHANGED if prior else ChangeKind.NEW, VersionEvidence(etag="listed")),
        prior=prior,
        raw=RawRef(REF, key, byte_size=11, url=f"https://x/{key}", version=VersionEvidence(etag="fetched")),
        parsed=ParseOutcome("hash-2", "markdown", "1.0", blocks=2, chars=40, title="Title", file=REF),
        chunked=ChunkOutcome(doc, REF, [f"{doc}-00000", f"{doc}-00001"], "token"),
        upserted=UpsertOutcome(2, 0, 1, [f"{doc}-00001"], [f"{doc}-00000"], [f"{doc}-00002"]),
        stage_ms={"parse": 1.0},
        **kw,  # type: ignore[arg-type]
    )


def test_deletions_leave_the_index_then_the_state(store: StateStore, source: SourceConfig) -> None:
    stored(store, state("gone.md"), state("kept.md"))
    st = store.items(SID)["gone.md"]
    index = open_index(source.index)
    chunk = Chunk(st.chunk_ids[0], st.doc_id, 0, "ferry timetables", 2, text_hash("ferry timetables"))
    index.upsert([DocumentWrite(DocumentRecord(SID, st.doc_id, "gone.md"), [chunk])])
    index.close()
    book = CommitBook()
    deletion = Deletion("gone.md", st.doc_id, "trashed", st.chunk_ids, st.version)

    apply_deletions(store, SID, [deletion], lambda: open_index(source.index), book)

    index = open_index(source.index)
    assert index.count(source=SID) == 0
    index.close()
    assert set(store.items(SID)) == {"kept.md"}
    [row] = book.lineage
    assert (row.action, row.reason, row.chunks_removed) == ("deleted", "trashed", st.chunk_ids)
    assert row.version_before == {"etag": "e-gone.md", "content_hash": "h-gone.md"}
    assert (book.counts["deleted"], book.counts["chunks_deleted"]) == (1, 1)


def test_no_deletions_opens_no_index(store: StateStore) -> None:
    book = CommitBook()
    apply_deletions(store, SID, [], lambda: (_ for _ in ()).throw(AssertionError("index opened")), book)
    assert book.counts == {}


def test_merging_observed_versions_keeps_what_the_source_did_not_resend() -> None:
    stored_version = VersionEvidence(etag="e1", last_modified="Mon", revision="r1", content_hash="old")
    merged = merge_observed_version(stored_version, VersionEvidence(etag="e2", modified_time="t2"), "h")
    assert merged == VersionEvidence(
        etag="e2", last_modified="Mon", modified_time="t2", revision="r1", content_hash="h"
    )
    assert merge_observed_version(None, VersionEvidence(revision="r"), None) == VersionEvidence(revision="r")


def test_unchanged_items_reset_streaks_and_merge_versions(store: StateStore) -> None:
    states = stored(store, state("a.md", failure_count=2, missing_runs=1, last_error="x", last_error_reason="y"))
    prior = PriorState.of(states["a.md"])
    assert prior is not None
    items = [
        ItemRecord(Change("a.md", ChangeKind.UNCHANGED, VersionEvidence(last_modified="Tue")), prior=prior),
        ItemRecord(Change("unknown.md", ChangeKind.UNCHANGED)),  # no state: nothing to keep
    ]
    book = CommitBook()
    commit_unchanged(items, states, "run-2", book)
    store.save_items(book.states)
    st = store.items(SID)["a.md"]
    assert (st.failure_count, st.missing_runs, st.last_error, st.last_seen_run) == (0, 0, None, "run-2")
    assert st.version == VersionEvidence(etag="e-a.md", last_modified="Tue", content_hash="h-a.md")
    [row] = book.lineage
    assert (row.action, row.reason, row.version_before) == ("unchanged", "not modified", prior.version_dict)
    assert book.counts["unchanged"] == 1


def test_written_items_are_new_or_changed_by_what_discovery_saw(store: StateStore) -> None:
    states = stored(store, state("old.md"))
    prior = PriorState.of(states["old.md"])
    assert prior is not None
    book = CommitBook()
    commit_written([_written_item("old.md", prior), _written_item("fresh.md", forced=True)], SID, "proc2", "r", book)
    store.save_items(book.states)
    rows = {r.item_key: r for r in book.lineage}
    assert (rows["old.md"].action, rows["fresh.md"].action) == ("changed", "new")
    assert rows["fresh.md"].reason == "forced re-processing" and rows["old.md"].reason is None
    assert rows["old.md"].version_after == {"etag": "fetched", "content_hash": "hash-2"}  # fetch's version wins
    assert rows["old.md"].staged_path == REF.path and rows["old.md"].byte_size == 11
    st = store.items(SID)["old.md"]
    assert (st.doc_id, st.processing_hash, st.last_indexed_run, st.title) == (prior.doc_id, "proc2", "r", "Title")
    assert st.chunk_ids == [f"{prior.doc_id}-00000", f"{prior.doc_id}-00001"]
    assert dict(book.counts) == {
        "changed": 1,
        "new": 1,
        "chunks_written": 4,
        "chunks_unchanged": 0,
        "chunks_deleted": 2,
    }


def test_failure_streak_grows_once_per_run_and_empty_breaks_it(store: StateStore) -> None:
    states = stored(store, state("a.md", failure_count=1))
    fetch = ItemFailure("a.md", "http_500", "boom " * 1000)
    st, action = failure_state(fetch, states["a.md"], SID, "run-2")
    assert (action, st.failure_count, st.last_failure_run, len(st.last_error or "")) == ("failed", 2, "run-2", 2000)
    st, action = failure_state(ItemFailure("a.md", "index_error", "e", stage="upsert"), st, SID, "run-2")
    assert st.failure_count == 2  # the same run: the streak grows once
    st, action = failure_state(ItemFailure("a.md", "parse:empty", "no text", False, "parse"), st, SID, "run-3")
    assert (action, st.failure_count, st.last_error_reason) == ("skipped", 0, "parse:empty")
    assert st.version is not None  # the indexed version stays


def test_recorded_failures_of_never_indexed_items_get_a_state_row(store: StateStore) -> None:
    book = CommitBook()
    failures = [ItemFailure("new.pdf", "parse:encrypted", "locked", False, "parse", {"needs_ocr": True})]
    record_failures(failures, store.items(SID), SID, "run-1", book)
    store.save_items(book.states)
    st = store.items(SID)["new.pdf"]
    assert (st.failure_count, st.version, st.last_error_reason) == (1, None, "parse:encrypted")
    [row] = book.lineage
    assert (row.action, row.reason, row.warnings) == ("failed", "parse: parse:encrypted", {"needs_ocr": True})
    assert book.counts["failed"] == 1


def test_missing_items_get_their_absolute_miss_count_and_quarantined_ones_lineage(store: StateStore) -> None:
    states = stored(store, state("away.md", missing_runs=1))
    book = CommitBook()
    keep_missing({"away.md": 2, "unknown.md": 1}, states, book)
    record_skipped([Skip("bad.md", "quarantined after 5 failures")], book)
    store.save_items(book.states)
    assert store.items(SID)["away.md"].missing_runs == 2
    [row] = book.lineage
    assert (row.item_key, row.action, row.reason) == ("bad.md", "skipped", "quarantined after 5 failures")
    assert book.counts["skipped"] == 1


def _plan(**kw: object) -> RunPlan:
    fields: dict[str, object] = {
        "run_id": "r",
        "source": SID,
        "dry_run": False,
        "complete": True,
        "processing_hash": "p",
    }
    return RunPlan(**{**fields, **kw})  # type: ignore[arg-type]


def test_run_counts_add_fetched_parsed_and_bytes() -> None:
    fetched_unchanged = ItemRecord(Change("u.md", ChangeKind.CHANGED), raw=RawRef(REF, "u.md", byte_size=5))
    manifest = BatchManifest("r", SID, 0, "upserted", [_written_item("a.md")], [fetched_unchanged])
    book = CommitBook()
    commit_written(manifest.items, SID, "p", "r", book)
    counts = run_counts(_plan(stats={"files": 2}, missing={"m": 1}, batches=["b0"]), [manifest], book)
    assert (counts["fetched"], counts["parsed"], counts["chunked"], counts["bytes_fetched"]) == (2, 2, 1, 16)
    assert (counts["missing_not_deleted"], counts["batches"], counts["listing_complete"]) == (1, 1, True)
    assert counts["source_stats"] == {"files": 2} and counts["failed"] == 0
    crawl = run_counts(_plan(stats={"bytes": 999}), [manifest], CommitBook())
    assert crawl["bytes_fetched"] == 999  # a crawler counted its downloads during discovery


def test_dry_run_reports_what_a_real_run_would_do() -> None:
    plan = _plan(
        dry_run=True,
        new_or_changed={"a.md": ChangeKind.NEW, "b.md": ChangeKind.CHANGED, "c.md": ChangeKind.NEW},
        deletions=[Deletion("d.md", "doc-d", "trashed")],
        unchanged=[ItemRecord(Change("u.md", ChangeKind.UNCHANGED))],
    )
    rows = dry_run_lineage(plan)
    assert [(r.item_key, r.action) for r in rows] == [
        ("a.md", "new"),
        ("b.md", "changed"),
        ("c.md", "new"),
        ("u.md", "unchanged"),  # a real run records its unchanged items too: same words, with "would"
        ("d.md", "deleted"),
    ]
    assert rows[-1].reason == "dry run: would be deleted (trashed)"
    assert rows[0].reason == "dry run: would be indexed (new)" and rows[3].reason.startswith("dry run: would stay")
    counts = dry_run_counts(plan)
    assert (counts["would_add"], counts["would_update"], counts["would_delete"], counts["unchanged"]) == (2, 1, 1, 1)
    assert counts["dry_run"] is True and counts["new"] == counts["chunks_written"] == 0


def test_the_rebuild_ends_only_for_a_real_full_resync() -> None:
    assert rebuild_ends(RunParams(full_resync=True))
    assert not rebuild_ends(RunParams(full_resync=True, dry_run=True))
    assert not rebuild_ends(RunParams())
