"""Commit rules: what a finished run's manifests mean for item state, lineage and counts.

Each rule adds to a :class:`CommitBook` (the states, lineage rows and counters one commit writes)
and is idempotent in what it computes: counters are absolute values derived from the state
*before* the run (``prior_states``, ``ItemRecord.prior``), so a re-run of the commit task records
exactly what its first attempt did.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from include.acl import ACL_OVER_CAP, ACL_UNKNOWN
from include.contract import VersionEvidence, document_id
from include.failpoints import failpoint
from include.index import IndexBackend
from include.stores import ItemState, RunItem, StateStore
from plugins.engine.context import RunParams
from plugins.engine.processed import processed_record
from plugins.engine.records import BatchManifest, Deletion, EmbedOutcome, ItemFailure, ItemRecord, RunPlan, Skip

__all__ = [
    "CommitBook",
    "apply_deletions",
    "commit_unchanged",
    "commit_written",
    "count_embedded",
    "dry_run_counts",
    "dry_run_lineage",
    "embedding_lineage",
    "failure_state",
    "forced_reason",
    "judge_outcome",
    "keep_missing",
    "merge_observed_version",
    "rebuild_ends",
    "record_failures",
    "record_skipped",
    "run_counts",
    "written_action",
    "written_state",
]

ERROR_CHARS = 2000  # the state row and lineage keep this much of an error message
EMPTY = "parse:empty"  # nothing to index (a JavaScript shell, a login page, a scan without text)


@dataclass(slots=True)
class CommitBook:
    """What one commit writes: item states, lineage rows and counters."""

    states: list[ItemState] = field(default_factory=list)
    lineage: list[RunItem] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    # why items failed or were skipped for an error this run (``fetch:http_500``, ``quarantined``)
    reasons: Counter[str] = field(default_factory=Counter)
    # why items the source did not change were re-processed ("parser pdf 2.0 -> 3.0": 4)
    reprocessed: Counter[str] = field(default_factory=Counter)


def apply_deletions(
    store: StateStore, sid: str, deletions: list[Deletion], index_factory: Callable[[], IndexBackend], book: CommitBook
) -> None:
    """Delete from the index first, then from the state: a crash in between leaves state rows
    whose documents are gone, and the re-run deletes them again (a no-op in the index)."""
    if not deletions:
        return
    index = index_factory()
    try:
        removed = index.delete_documents(sid, [d.doc_id for d in deletions])
    finally:
        index.close()
    book.counts["chunks_deleted"] += removed
    failpoint("commit:deleted")  # gone from the index, still in the state
    store.delete_items(sid, [d.item_key for d in deletions])
    for d in deletions:
        book.lineage.append(
            RunItem(
                item_key=d.item_key,
                action="deleted",
                doc_id=d.doc_id,
                reason=d.reason,
                version_before=d.version.to_dict() if d.version is not None else None,
                chunks_removed=list(d.chunk_ids),
            )
        )
    book.counts["deleted"] += len(deletions)


def merge_observed_version(
    stored: VersionEvidence | None, observed: VersionEvidence, content_hash: str | None
) -> VersionEvidence:
    """An unchanged item's version: what the source said this time, field by field, else what
    was stored (a source that sends an ETag only when asked keeps the stored Last-Modified)."""
    old = stored or VersionEvidence()
    return VersionEvidence(
        etag=observed.etag or old.etag,
        last_modified=observed.last_modified or old.last_modified,
        modified_time=observed.modified_time or old.modified_time,
        revision=observed.revision or old.revision,
        content_hash=content_hash,
    )


def commit_unchanged(
    items: Iterable[ItemRecord], prior_states: Mapping[str, ItemState], run_id: str, book: CommitBook
) -> None:
    """Items the validators (at discovery) or the content hash (after parsing) said are unchanged:
    seen this run, streaks reset, version merged; the index keeps what it has."""
    for item in items:
        st = prior_states.get(item.item_key)
        if st is None:
            continue
        st.version = merge_observed_version(st.version, item.change.version, st.content_hash)
        st.last_seen_run, st.missing_runs, st.failure_count = run_id, 0, 0
        st.last_error = st.last_error_reason = None
        book.states.append(st)
        book.lineage.append(
            RunItem(
                item_key=item.item_key,
                action="unchanged",
                doc_id=st.doc_id,
                reason=item.unchanged_reason or item.change.reason or "not modified",
                version_before=item.prior.version_dict if item.prior else None,
                version_after=st.version.to_dict(),
                content_hash=st.content_hash,
                chunks_kept=list(st.chunk_ids),
                warnings=item.warnings,  # re-parsed, same text: same warnings
            )
        )
        book.counts["unchanged"] += 1


def _written(item: ItemRecord) -> tuple[str, Any, Any, Any]:
    """(content hash, parse, chunk and upsert outcomes) of an item that reached the index."""
    if item.parsed is None or item.chunked is None or item.upserted is None:
        raise ValueError(f"item {item.item_key!r} is in an upserted manifest without its stage outcomes")
    return item.parsed.content_hash, item.parsed, item.chunked, item.upserted


def written_state(
    item: ItemRecord, sid: str, processing_hash: str, run_id: str, options: Mapping[str, str | None] | None = None
) -> ItemState:
    """The state row of an item this run indexed, with what it went through (``processed_with``)."""
    content_hash, parsed, chunked, _ = _written(item)
    return ItemState(
        source=sid,
        item_key=item.item_key,
        doc_id=chunked.doc_id,
        version=item.observed_version.with_hash(content_hash),
        content_hash=content_hash,
        processing_hash=processing_hash,
        chunk_ids=list(chunked.chunk_ids),
        title=item.title,
        url=item.raw.url if item.raw else None,
        last_seen_run=run_id,
        last_indexed_run=run_id,
        processed_with=processed_record(parsed, chunked, item.embedded, options or {}),
    )


def embedding_lineage(embedded: EmbedOutcome | None, chunk_ids: Sequence[str]) -> dict[str, Any]:
    """The lineage fields of an embedded item (``chunk_ids``: its chunks): model, chunks
    computed / reused, truncations; none for an item that was not embedded."""
    if embedded is None:
        return {}
    reused = set(embedded.reused_chunk_ids)
    return {
        "embedding_model": embedded.model,
        "chunks_embedded": [c for c in chunk_ids if c not in reused],
        "chunks_vector_reused": list(embedded.reused_chunk_ids),
        "chunks_truncated": [{"chunk_id": t.chunk_id, "tokens": t.tokens, "kept": t.kept} for t in embedded.truncated],
    }


def count_embedded(book: CommitBook, embedded: EmbedOutcome | None) -> None:
    """Add an item's embedding counts (computed, reused from the cache, truncated) to the run's."""
    if embedded is not None:
        book.counts["chunks_embedded"] += embedded.computed
        book.counts["chunks_vector_reused"] += embedded.reused
        book.counts["chunks_truncated"] += len(embedded.truncated)


FORCED_UNCHANGED = "forced re-processing: content and chunks unchanged"


def forced_reason(item: ItemRecord, action: str) -> str | None:
    """The lineage reason of a forced item: that it was forced, why ("parser pdf 2.0 -> 3.0"),
    and, when it came out as indexed, that re-processing changed nothing."""
    if not item.forced:
        return None
    reason = FORCED_UNCHANGED if action == "unchanged" else "forced re-processing"
    return f"{reason} ({item.forced_reason})" if item.forced_reason else reason


def written_action(item: ItemRecord) -> str:
    """``new`` / ``changed`` for an item this run wrote; ``unchanged`` for a forced one (full
    resync, ``only_keys``, new processing) whose text and chunks came out as they were indexed:
    re-processing it changed nothing, and saying "changed" would send an auditor looking for it."""
    if item.prior is None or not item.prior.has_version:
        return "new"
    content_hash, _, _, upserted = _written(item)
    rewritten = upserted.written or upserted.deleted_chunks or upserted.chunks_added or upserted.chunks_removed
    same = content_hash == item.prior.content_hash and not rewritten
    return "unchanged" if item.forced and same else "changed"


def _written_lineage(item: ItemRecord, action: str, version: VersionEvidence) -> RunItem:
    content_hash, parsed, chunked, upserted = _written(item)
    return RunItem(
        item_key=item.item_key,
        action=action,
        doc_id=chunked.doc_id,
        reason=forced_reason(item, action),
        version_before=item.prior.version_dict if item.prior else None,
        version_after=version.to_dict(),
        content_hash=content_hash,
        byte_size=item.raw.byte_size if item.raw else None,
        staged_path=item.raw.file.path if item.raw else None,
        parser=parsed.parser,
        parser_version=parsed.parser_version,
        parser_engine=parsed.parser_engine,
        blocks=parsed.blocks,
        chars=parsed.chars,
        chunker=chunked.chunker,
        chunker_options_hash=chunked.chunker_options_hash,
        chunks_added=list(upserted.chunks_added),
        chunks_kept=list(upserted.chunks_kept),
        chunks_removed=list(upserted.chunks_removed),
        stage_ms=dict(item.stage_ms),
        warnings=item.warnings,  # the parser's (needs_ocr ...)
        **(embedding_lineage(item.embedded, item.chunked.chunk_ids) if item.chunked else {}),
    )


def commit_written(
    items: Iterable[ItemRecord],
    sid: str,
    processing_hash: str,
    run_id: str,
    book: CommitBook,
    options: Mapping[str, str | None] | None = None,
) -> None:
    """Items whose index write succeeded: new or changed by what discovery saw of them (not the
    current row, which a first attempt of this task may already have replaced)."""
    for item in items:
        state = written_state(item, sid, processing_hash, run_id, options)
        action = written_action(item)
        upserted = _written(item)[3]
        book.states.append(state)
        assert state.version is not None
        book.lineage.append(_written_lineage(item, action, state.version))
        book.counts[action] += 1
        if item.forced and item.forced_reason:
            book.reprocessed[item.forced_reason] += 1
        if action == "unchanged":
            book.counts["unchanged_forced"] += 1  # of "unchanged": re-processed by force, same result
        book.counts["chunks_written"] += upserted.written
        book.counts["chunks_unchanged"] += upserted.unchanged_chunks
        book.counts["chunks_deleted"] += upserted.deleted_chunks
        count_embedded(book, item.embedded)


def failure_state(failure: ItemFailure, prior: ItemState | None, sid: str, run_id: str) -> tuple[ItemState, str]:
    """(the item's state after this failure, the lineage action ``failed`` or ``skipped``).

    The indexed version (if any) stays; the failure streak grows once per run, however many
    stages failed. ``parse:empty`` was fetched and parsed fine with nothing to index: skipped,
    and it breaks the streak instead of growing it (it is never quarantined as failing).
    """
    key = failure.item_key
    st = prior or ItemState(
        source=sid, item_key=key, doc_id=document_id(sid, key), version=None, content_hash=None,
        processing_hash=None, chunk_ids=[],
    )  # fmt: skip
    action = "skipped" if failure.reason == EMPTY else "failed"
    if action == "skipped":
        st.failure_count = 0
    elif st.last_failure_run != run_id:
        st.failure_count += 1
        st.last_failure_run = run_id
    st.last_error, st.last_error_reason = failure.error[:ERROR_CHARS], failure.reason
    st.last_seen_run = run_id
    return st, action


def record_failures(
    failures: Iterable[ItemFailure], prior_states: Mapping[str, ItemState], sid: str, run_id: str, book: CommitBook
) -> None:
    for failure in failures:
        st, action = failure_state(failure, prior_states.get(failure.item_key), sid, run_id)
        book.states.append(st)
        book.lineage.append(
            RunItem(
                item_key=failure.item_key,
                action=action,
                doc_id=st.doc_id,
                reason=f"{failure.stage}: {failure.reason}",
                version_before=st.version.to_dict() if st.version else None,
                error=failure.error[:ERROR_CHARS],
                warnings=failure.warnings or None,  # a fully scanned PDF's needs_ocr
            )
        )
        book.counts[action] += 1
        if action == "failed":
            book.reasons[failure.reason or "error"] += 1


def keep_missing(missing: Mapping[str, int], prior_states: Mapping[str, ItemState], book: CommitBook) -> None:
    """Items absent from this complete listing but not yet deleted: their absolute miss count."""
    for key, misses in missing.items():
        st = prior_states.get(key)
        if st is not None:
            st.missing_runs = misses
            book.states.append(st)


def record_skipped(skipped: Iterable[Skip], book: CommitBook) -> None:
    """Quarantined items and records the connector skipped: lineage only, state untouched."""
    for skip in skipped:
        book.lineage.append(RunItem(item_key=skip.item_key, action="skipped", reason=skip.reason))
        book.counts["skipped"] += 1
        if skip.reason.startswith("quarantined"):
            book.reasons["quarantined"] += 1


_ZEROS = (
    *("new", "changed", "unchanged", "unchanged_forced", "deleted", "failed", "skipped", "fetched", "parsed"),
    "chunked",
    *("chunks_written", "chunks_unchanged", "chunks_deleted"),
    *("chunks_embedded", "chunks_vector_reused", "chunks_truncated", "reembedded"),
    # permissions read this run: items whose access changed, items private as unknown (issue 35)
    *("acl_changed", "acl_unknown"),
)


def run_counts(plan: RunPlan, manifests: list[BatchManifest], book: CommitBook) -> dict[str, Any]:
    """The run's summary counts (the run log, the asset event, alerts)."""
    counts = Counter(book.counts)
    counts["fetched"] = sum(len(m.items) for m in manifests) + sum(
        1 for m in manifests for u in m.unchanged if u.raw is not None
    )
    counts["parsed"] = counts["fetched"]  # every fetched item went through the parser
    counts["chunked"] = sum(len(m.items) for m in manifests)  # new, changed and unchanged (forced)
    # A crawler downloads during discovery and reports its bytes; other connectors during fetch.
    staged = sum(e.raw.byte_size for m in manifests for e in m.items + m.unchanged if e.raw is not None)
    counts["bytes_fetched"] = int(plan.stats.get("bytes", staged))
    result: dict[str, Any] = {k: int(v) for k, v in counts.items()}
    for key in _ZEROS:
        result.setdefault(key, 0)
    # what share of the chunks embedded this run the model cut to its input limit (rare, since
    # chunks are sized for the model: plugins/engine/chunk_budget.py)
    embedded = result["chunks_embedded"]
    result["chunks_truncated_share"] = round(result["chunks_truncated"] / embedded, 4) if embedded else 0.0
    result["missing_not_deleted"] = len(plan.missing)
    # the connector's own counters (a crawl's fetched / not modified / skipped / errors by kind)
    result["source_stats"] = plan.stats
    result["listing_complete"] = plan.complete
    result["deferred"] = int(plan.stats.get("deferred", 0))  # past max_items, left for a later run
    result["batches"] = len(plan.batches)
    result["reprocessed"] = dict(sorted(book.reprocessed.items(), key=lambda kv: (-kv[1], kv[0])))
    return result


def _would(kind: str, forced: bool, why: str | None) -> str:
    if kind == "new":
        return "dry run: would be indexed (new)"
    if forced:
        because = f": {why}" if why else ""
        return f"dry run: would be re-processed (forced{because}); unchanged (forced) if its content is the same"
    return "dry run: would be re-indexed (changed)"


def dry_run_lineage(plan: RunPlan) -> list[RunItem]:
    """What a real run would do, as lineage rows with a real run's actions and "would" in the
    reason (index and item state are not touched)."""
    forced = set(plan.forced)
    rows = [
        RunItem(item_key=key, action=kind.value, reason=_would(kind.value, key in forced, plan.forced_reasons.get(key)))
        for key, kind in plan.new_or_changed.items()
    ]
    rows += [
        RunItem(
            item_key=u.item_key,
            action="unchanged",
            doc_id=u.prior.doc_id if u.prior else None,
            reason=f"dry run: would stay unchanged ({u.unchanged_reason or u.change.reason or 'not modified'})",
        )
        for u in plan.unchanged
    ]
    rows += [
        RunItem(
            item_key=r.item_key,
            action="unchanged",
            doc_id=r.prior.doc_id if r.prior else None,
            reason=f"dry run: would be re-embedded from the indexed chunk texts ({r.forced_reason})",
        )
        for r in plan.reembed
    ]
    rows += [
        RunItem(
            item_key=d.item_key, action="deleted", doc_id=d.doc_id, reason=f"dry run: would be deleted ({d.reason})"
        )
        for d in plan.deletions
    ]
    return rows


def dry_run_counts(plan: RunPlan) -> dict[str, Any]:
    kinds = Counter(kind.value for kind in plan.new_or_changed.values())
    return {
        "dry_run": True,
        "would_add": kinds.get("new", 0),
        "would_update": kinds.get("changed", 0),
        "unchanged": len(plan.unchanged),
        "would_delete": len(plan.deletions),
        "would_reembed": len(plan.reembed),
        "source_stats": plan.stats,
        "listing_complete": plan.complete,
        "deferred": int(plan.stats.get("deferred", 0)),
        **dict.fromkeys(("new", "changed", "deleted", "failed", "fetched", "parsed", "chunked", "chunks_written"), 0),
    }


def rebuild_ends(params: RunParams) -> bool:
    """A full resync (not a dry run) began an index rebuild at discovery: the run's end swaps it
    in or drops it."""
    return params.full_resync and not params.dry_run


# ------------------------------------------------------------------------------ the run's outcome

OUTCOMES = ("success", "partial", "failed")
_ACL_REASONS = frozenset({ACL_UNKNOWN, ACL_OVER_CAP})  # documents made private, not failed


def _connector_reasons(stats: Mapping[str, Any], item_reasons: Mapping[str, int]) -> Counter[str]:
    """The connector's own error counters, less those the items' reasons already count (a
    crawler counts a page's ``http_500`` in ``errors`` and fails the item with ``fetch:http_500``)."""
    reasons: Counter[str] = Counter()
    errors = stats.get("errors")
    if isinstance(errors, Mapping):
        by_suffix = Counter({r.rpartition(":")[2]: n for r, n in item_reasons.items()})
        for kind, n in errors.items():
            left = int(n) - by_suffix.get(str(kind), 0) - by_suffix.get(str(kind).removeprefix("render_"), 0)
            if left > 0:
                reasons[str(kind)] += left
    elif isinstance(errors, list) and errors:  # a listing's error lines (Feishu's folder walk)
        reasons["listing_error"] += len(errors)
    if incomplete := stats.get("incomplete_reasons"):  # Yuque: why the listing is not complete
        reasons["listing_incomplete"] += len(incomplete)
    robots = stats.get("robots")
    if isinstance(robots, Mapping):
        unreachable = sum(1 for status in robots.values() if status == "unreachable")
        if unreachable:
            reasons["robots_unreachable"] += unreachable
    return reasons


def judge_outcome(counts: Mapping[str, Any], item_reasons: Mapping[str, int]) -> tuple[str, dict[str, int], str]:
    """(outcome, reasons counted, one line saying why) of a run whose commit is done.

    ``success``: no error anywhere. ``partial``: some items failed or were skipped for an error,
    or the connector met errors, and the rest committed. ``failed``: errors and not one item
    reached (the listing failed, nothing was reachable, every fetch failed): whatever the counts
    of zero say, nothing was synced. Deletions are not judged here: an incomplete listing deletes
    nothing (``plan_rules.plan_deletions``).
    """
    reasons = Counter({k: int(v) for k, v in item_reasons.items() if v})
    reasons.update(_connector_reasons(counts.get("source_stats") or {}, item_reasons))
    ordered = dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    if not ordered:
        return "success", {}, ""
    # items read and committed (a dry run: planned); skipped ones were not reached
    kinds = ("would_add", "would_update", "unchanged") if counts.get("dry_run") else ("new", "changed", "unchanged")
    reached = sum(int(counts.get(k) or 0) for k in kinds)
    failing = int(counts.get("failed") or 0) + reasons.get("quarantined", 0)
    listed = "listing incomplete" if counts.get("listing_complete") is False else "listing complete"
    why = ", ".join(f"{k} {n}" for k, n in ordered.items())
    if reached <= 0:
        what = f"all {failing} items failed" if failing else "nothing was reached"
        return "failed", ordered, f"{what} ({listed}; {why})"
    unknown = int(counts.get("acl_unknown") or 0)
    what = f"{failing} failed or skipped for errors" if failing else "the source reported errors"
    if unknown and not failing and set(ordered) <= _ACL_REASONS:
        what = f"{unknown} private: their permissions could not be read"
    return "partial", ordered, f"{reached} items synced, {what} ({listed}; {why})"
