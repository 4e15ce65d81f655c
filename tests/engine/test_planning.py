"""Planning rules (plugins.engine.plan_rules), each alone, over states read from a real
SQLite state store."""

from __future__ import annotations

import dataclasses

from include.contract import Change, ChangeKind, VersionEvidence
from include.stores import StateStore
from plugins.engine.context import RunParams
from plugins.engine.plan_rules import (
    apply_renames,
    classify_changes,
    connector_skips,
    discovery_failures,
    forced_items,
    mass_delete_message,
    plan_deletions,
    quarantine_reason,
    split_batches,
)
from plugins.engine.processed import Processing, reprocess_reason
from tests.engine.conftest import SID, state, stored


def _no_digest(path: str | None) -> None:
    return None


def test_forced_items_withholds_untrusted_versions(store: StateStore) -> None:
    states = stored(
        store,
        state("same.md"),
        state("options.md", processing_hash="old"),
        state("named.md"),
        state("never.md", indexed=False),
    )
    known, forced = forced_items(RunParams(only_keys=["named.md"]), states, Processing("proc"))
    assert set(known) == {"same.md"} and known["same.md"].etag == "e-same.md"
    # a never-indexed item is new anyway; no record of what the item went through: the hash says
    assert forced == {"options.md": "processing options or versions changed", "named.md": "named in only_keys"}
    known, forced = forced_items(RunParams(full_resync=True), states, Processing("proc"))
    assert known == {} and forced == dict.fromkeys(("same.md", "options.md", "named.md"), "full resync")


def test_reprocess_reason_names_what_changed(store: StateStore) -> None:
    record = {
        "parser": {"name": "pdf", "version": "2.0", "engine": "auto"},
        "chunker": {"name": "token", "version": "2"},
        "embedding": {"model": "m1", "dimensions": 8},
        "options": "opts",
    }
    now = Processing("proc", "opts", {"name": "token", "version": "2"}, "m1", {"pdf": "2.0", "html": "1.0"})
    html = {**record, "parser": {"name": "html", "version": "1.0"}}
    st = stored(store, state("a.pdf", processed_with=record), state("b.html", processed_with=html))
    assert reprocess_reason(st["a.pdf"], now) is None
    bumped = dataclasses.replace(now, parsers={"pdf": "3.0", "html": "1.0"})
    assert reprocess_reason(st["a.pdf"], bumped) == "parser pdf 2.0 -> 3.0"
    assert reprocess_reason(st["b.html"], bumped) is None  # another parser's version: not its business
    gone = dataclasses.replace(now, parsers={"html": "1.0"})
    assert reprocess_reason(st["a.pdf"], gone) == "parser pdf 2.0 no longer registered"
    # the hashed parts: the record says which one changed
    rechunked = dataclasses.replace(now, hash="proc2", chunker={"name": "heading", "version": "1"})
    assert reprocess_reason(st["a.pdf"], rechunked) == "chunker token 2 -> heading 1"
    both = dataclasses.replace(bumped, hash="proc2", options="opts2", embedding_model="m2")
    assert reprocess_reason(st["a.pdf"], both) == "parser pdf 2.0 -> 3.0; embedding model m1 -> m2"
    assert (
        reprocess_reason(st["a.pdf"], dataclasses.replace(now, hash="p2", options="o2")) == "processing options changed"
    )
    old = stored(store, state("old.pdf", processing_hash="proc"))["old.pdf"]  # no record: stored before them
    assert reprocess_reason(old, bumped) is None
    assert reprocess_reason(old, rechunked) == "processing options or versions changed"


def test_renames_move_state_and_forced_mark_but_never_overwrite(store: StateStore) -> None:
    states = stored(store, state("old.md"), state("taken.md"), state("other.md"))
    forced = {"old.md": "full resync"}
    applied = apply_renames(states, forced, {"old.md": "new.md", "other.md": "taken.md", "ghost.md": "x.md"})
    assert applied == {"old.md": "new.md"}
    assert "old.md" not in states and states["new.md"].item_key == "new.md"
    assert states["new.md"].doc_id == stored(store)["old.md"].doc_id  # same document
    assert forced == {"new.md": "full resync"}
    assert states["other.md"].item_key == "other.md"  # a rename onto existing state is ignored


def test_quarantine_after_n_failures_unless_named(store: StateStore) -> None:
    st = stored(store, state("bad.md", failure_count=3))["bad.md"]
    assert quarantine_reason(st, 3, RunParams()) == "quarantined after 3 failures"
    assert quarantine_reason(st, 4, RunParams()) is None
    assert quarantine_reason(st, 3, RunParams(only_keys=["bad.md"])) is None
    assert quarantine_reason(None, 1, RunParams()) is None


def test_classify_changes_sorts_each_change(store: StateStore) -> None:
    states = stored(store, state("kept.md"), state("gone.md"), state("bad.md", failure_count=5), state("cached.md"))
    changes = [
        Change("gone.md", ChangeKind.DELETED, reason="trashed"),
        Change("ghost.md", ChangeKind.DELETED),  # never indexed: nothing to delete
        Change("kept.md", ChangeKind.UNCHANGED),
        Change("cached.md", ChangeKind.UNCHANGED),  # forced: bytes needed after all
        Change("bad.md", ChangeKind.CHANGED),
        Change("fresh.md", ChangeKind.CHANGED),  # no state: new
        Change("late.md", ChangeKind.NEW),  # beyond max_items
        Change("moved.md", ChangeKind.UNCHANGED, metadata={"rewrite": True}),
    ]
    forced = {"cached.md": "parser pdf 1 -> 2"}
    out = classify_changes(changes, states, forced, RunParams(), (5, 2), _no_digest)
    assert out.explicit_deletes == {"gone.md": "trashed"}
    assert [(s.item_key, s.reason) for s in out.skipped] == [("bad.md", "quarantined after 5 failures")]
    assert {k: i.change.kind.value for k, i in out.items.items()} == {
        "kept.md": "unchanged",
        "cached.md": "changed",
        "fresh.md": "new",
        "moved.md": "unchanged",
    }
    assert out.items["cached.md"].forced and out.items["moved.md"].forced and not out.items["kept.md"].forced
    assert out.items["cached.md"].forced_reason == "parser pdf 1 -> 2"
    assert out.items["moved.md"].forced_reason == "rewrite asked by the connector"
    prior = out.items["kept.md"].prior
    assert prior is not None and prior.doc_id == states["kept.md"].doc_id and prior.has_version
    assert out.items["fresh.md"].prior is None
    assert [i.item_key for i in out.of_kind(ChangeKind.NEW, ChangeKind.CHANGED)] == ["cached.md", "fresh.md"]


def test_classify_changes_keeps_only_named_keys_and_records_staged_digest(store: StateStore) -> None:
    digest = {"size": 3, "sha256": "ab" * 32}
    changes = [Change("a.md", ChangeKind.NEW, staged_path="/s/raw/a"), Change("b.md", ChangeKind.NEW)]
    out = classify_changes(changes, {}, {}, RunParams(only_keys=["a.md"]), (5, None), lambda p: digest if p else None)
    assert list(out.items) == ["a.md"]
    staged = out.items["a.md"].staged
    assert staged is not None and (staged.path, staged.size, staged.sha256) == ("/s/raw/a", 3, "ab" * 32)


def test_connector_skips_and_discovery_failures_leave_stats_as_counters() -> None:
    stats = {
        "pages": 4,
        "skipped": [{"item_key": "x.bin", "reason": "unsupported"}, "not a record"],
        "failed": [
            {"item_key": "p1", "reason": "http_500", "error": "boom", "retryable": True},
            {"item_key": "p2"},
            {"item_key": "planned"},  # fetched again in this run: its fetch decides
        ],
    }
    assert [(s.item_key, s.reason) for s in connector_skips(stats)] == [("x.bin", "unsupported")]
    failures = discovery_failures(stats, ["planned"])
    assert [(f.item_key, f.reason, f.stage, f.retryable) for f in failures] == [
        ("p1", "http_500", "discover", True),
        ("p2", "discover_error", "discover", True),
    ]
    assert stats == {"pages": 4}


def test_plan_deletions_explicit_and_after_n_absent_listings(store: StateStore) -> None:
    states = stored(
        store,
        state("trashed.md"),
        state("absent1.md"),
        state("absent2.md", missing_runs=1),
        state("listed.md"),
        state("failed_only.md", indexed=False),
    )
    deletions, missing = plan_deletions(states, {"listed.md"}, {"trashed.md": "trashed"}, set(), 2)
    assert [(d.item_key, d.reason) for d in deletions] == [
        ("trashed.md", "trashed"),
        ("absent2.md", "absent from 2 complete listing(s)"),
    ]
    assert deletions[0].doc_id == states["trashed.md"].doc_id
    assert deletions[0].chunk_ids == states["trashed.md"].chunk_ids
    assert deletions[0].version == VersionEvidence(etag="e-trashed.md", content_hash="h-trashed.md")
    assert missing == {"absent1.md": 1}  # absolute, not an increment


def test_plan_deletions_without_a_complete_listing_deletes_only_explicitly(store: StateStore) -> None:
    states = stored(store, state("a.md"), state("b.md"))
    deletions, missing = plan_deletions(states, None, {"a.md": "deleted at source"}, set(), 1)
    assert [d.item_key for d in deletions] == ["a.md"] and missing == {}
    # an item planned for fetching is alive even when the listing missed it
    deletions, missing = plan_deletions(states, set(), {}, {"b.md"}, 1)
    assert [d.item_key for d in deletions] == ["a.md"]


def test_mass_delete_guard_threshold() -> None:
    assert mass_delete_message(SID, 2, 10, 0.2) is None  # exactly the threshold is allowed
    message = mass_delete_message(SID, 3, 10, 0.2)
    assert message is not None and "delete 3 of 10 documents of files:unit (> 20%)" in message
    assert "allow_mass_delete=true" in message
    assert mass_delete_message(SID, 5, 0, 0.2) is None  # nothing indexed yet: nothing to protect
    assert mass_delete_message(SID, 0, 10, 0.0) is None


def test_split_batches_numbers_consecutive_batches(store: StateStore) -> None:
    changes = [Change(f"{n}.md", ChangeKind.NEW) for n in range(5)]
    items = list(classify_changes(changes, {}, {}, RunParams(), (5, None), _no_digest).items.values())
    batches = split_batches("r1", SID, items, 2)
    assert [(b.batch, b.stage, [i.item_key for i in b.items]) for b in batches] == [
        (0, "batch", ["0.md", "1.md"]),
        (1, "batch", ["2.md", "3.md"]),
        (2, "batch", ["4.md"]),
    ]
    assert split_batches("r1", SID, [], 2) == []
