"""Stages 6-7: apply deletions, commit item state, record lineage; then close the run.

Runs only after every batch's upsert finished, so state is committed for exactly the items
whose index write succeeded. Everything here is idempotent: item rows are replaced, counters
are written as absolute values computed from the state *before* the run, lineage rows are
keyed by (run, item).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from include.index import IndexBackend, open_index
from include.staging import StagingArea
from include.stores import ItemState, StateStore
from include.stores.access import AccessStore
from plugins.engine.access import AccessBook, annotate_lineage, commit_access, plan_access
from plugins.engine.alerts import alert_finished_run
from plugins.engine.commit_rules import (
    CommitBook,
    apply_deletions,
    commit_unchanged,
    commit_written,
    dry_run_counts,
    dry_run_lineage,
    judge_outcome,
    keep_missing,
    rebuild_ends,
    record_failures,
    record_skipped,
    run_counts,
)
from plugins.engine.context import RunContext, closed_run, log
from plugins.engine.manifests import read_plan, read_stage_manifest
from plugins.engine.reaper import retains_raw
from plugins.engine.records import ItemRecord, RunPlan
from plugins.engine.reembed import commit_reembedded, reembedded_manifest
from plugins.engine.retention import prune_source
from plugins.engine.upkeep import after_commit

__all__ = [
    "MissingManifestsError",
    "abort_run",
    "commit_stage",
    "end_rebuild",
    "finish_stage",
    "missing_batches",
    "with_error_reason",
]

_STAGES = ("batch", "fetched", "parsed", "chunked", "embedded", "upserted")


class MissingManifestsError(RuntimeError):
    """Batches of the plan have no ``upserted`` manifest: committing would lose their items."""

    def __init__(self, message: str, batches: list[int]) -> None:
        super().__init__(message)
        self.batches = batches


def missing_batches(staging: StagingArea, plan: RunPlan) -> dict[int, str | None]:
    """Batches of the plan without an upserted manifest -> the last stage manifest they have."""
    missing: dict[int, str | None] = {}
    for number in range(len(plan.batches)):
        if StagingArea.exists_at(staging.stage_path("upserted", number)):
            continue
        done = [s for s in _STAGES[:-1] if StagingArea.exists_at(staging.stage_path(s, number))]
        missing[number] = done[-1] if done else None
    return missing


def _refuse_incomplete(ctx: RunContext, plan: RunPlan) -> None:
    """Commit only a complete run: a batch without its upserted manifest (a lost file, a task
    marked success by hand) would otherwise commit as "success" with its items neither in the
    state nor in the lineage, and whatever of them reached the index orphaned until next run."""
    missing = missing_batches(ctx.staging, plan)
    if not missing:
        return
    described = ", ".join(
        f"batch {n} ({f'last manifest {stage}-{n:04d}.json' if stage else 'no manifest at all'})"
        for n, stage in sorted(missing.items())
    )
    raise MissingManifestsError(
        f"run {ctx.run_id} of {ctx.source.source_id}: {len(missing)} of {len(plan.batches)} batches have no "
        f"upserted manifest: {described}; nothing was committed. Re-run those batches' fetch, parse, chunk "
        f"(embed) and upsert tasks (map index = batch number), then commit.",
        sorted(missing),
    )


def _planned(ctx: RunContext, store: StateStore) -> RunPlan | dict[str, Any]:
    """The run's plan; or the counts of the run when it already finished (its commit stands)."""
    sid, plan_file = ctx.source.source_id, ctx.staging.path("discover.json")
    if StagingArea.exists_at(plan_file):
        return read_plan(plan_file)
    if (closed := closed_run(ctx, store)) is not None:
        log.info("%s: run %s already finished; its commit stands", sid, ctx.run_id)
        return dict(closed.get("counts") or {})
    # e.g. the reaper closed the run and removed its staging; its single tasks cannot be redone
    run = store.get_run(ctx.run_id, sid) or {}
    raise FileNotFoundError(
        f"run {ctx.run_id} of {sid} has no plan in staging ({plan_file}; run log: {run.get('status')}, "
        f"{run.get('error') or 'no error recorded'}): re-run the whole DAG run, starting with discover"
    )


def commit_stage(ctx: RunContext, store: StateStore, index_factory: Callable[[], IndexBackend]) -> dict[str, Any]:
    """Apply the plan's deletions, then commit item state and lineage for what reached the index."""
    plan = _planned(ctx, store)
    if not isinstance(plan, RunPlan):
        return plan
    if plan.dry_run:
        return _dry_run(ctx, store, plan)
    _refuse_incomplete(ctx, plan)
    sid, staging = ctx.source.source_id, ctx.staging
    manifests = [read_stage_manifest(staging.stage_path("upserted", n)) for n in range(len(plan.batches))]
    reembedded = reembedded_manifest(ctx, plan)  # vectors written to the index: state follows here
    access_store = AccessStore(store)  # document permissions, in the same database
    # keys a connector renamed (discover's plan): moved first, so the rows below find their state
    store.rename_items(sid, plan.renames)
    access_store.rename(sid, plan.renames)
    prior_states = store.items(sid)
    book = CommitBook()
    apply_deletions(store, sid, plan.deletions, index_factory, book)
    access_store.delete(sid, [d.item_key for d in plan.deletions])  # after the index delete
    refetched = [u for m in manifests for u in m.unchanged]
    unchanged = [*plan.unchanged, *refetched]
    written = [i for m in manifests for i in m.items]
    commit_unchanged(unchanged, prior_states, ctx.run_id, book)
    options = {"options": plan.processing_options, "text_options": plan.processing_text_options}
    commit_written(written, sid, plan.processing_hash, ctx.run_id, book, options)
    failures = [*plan.failed, *(f for m in manifests for f in m.failures)]
    if reembedded is not None:
        commit_reembedded(reembedded.items, prior_states, plan, ctx.run_id, book)
        failures += reembedded.failures
    record_failures(failures, prior_states, sid, ctx.run_id, book)
    keep_missing(plan.missing, prior_states, book)
    record_skipped(plan.skipped, book)
    access = _access(ctx, access_store, written, refetched, prior_states, book)
    store.save_items(book.states)
    commit_access(access, sid, access_store, index_factory)
    store.record_run_items(ctx.run_id, sid, book.lineage)
    result = _judged(run_counts(plan, manifests, book), book.reasons)
    result.update(after_commit(ctx, store, [*written, *unchanged]))  # e.g. Feishu's event subscriptions
    log.info("%s: committed %s", sid, result)
    return result


def _access(
    ctx: RunContext,
    access_store: AccessStore,
    written: list[ItemRecord],
    refetched: list[ItemRecord],
    prior_states: Mapping[str, ItemState],
    book: CommitBook,
) -> AccessBook:
    """The commit's permissions (:mod:`plugins.engine.access`): rows to save, changes put on the
    items' lineage rows, and unknown ones counted (``acl_unknown``: the run is partial)."""
    keys = [i.item_key for i in written] + [u.item_key for u in refetched if u.access is not None]
    stored = access_store.get(ctx.source.source_id, keys) if keys else {}
    access = plan_access(written, refetched, prior_states, stored, ctx.run_id)
    annotate_lineage(book.lineage, access, {i.item_key: i for i in (*written, *refetched)})
    book.counts["acl_changed"] += access.changed
    book.counts["acl_unknown"] += sum(access.unknown.values())
    book.reasons.update(access.unknown)
    return access


def _judged(counts: dict[str, Any], item_reasons: Mapping[str, int]) -> dict[str, Any]:
    """``counts`` with the run's outcome: ``outcome`` (success / partial / failed), ``reasons``
    ({reason: count}) and ``outcome_note`` (one line), which the summary closes the run with."""
    outcome, reasons, note = judge_outcome(counts, item_reasons)
    return {**counts, "outcome": outcome, "reasons": reasons, "outcome_note": note}


def _dry_run(ctx: RunContext, store: StateStore, plan: RunPlan) -> dict[str, Any]:
    """Report what a real run would change; touch neither the index nor item state."""
    store.record_run_items(ctx.run_id, ctx.source.source_id, dry_run_lineage(plan))
    reasons = Counter(f.reason or "error" for f in plan.failed)
    reasons["quarantined"] += sum(1 for s in plan.skipped if s.reason.startswith("quarantined"))
    return _judged(dry_run_counts(plan), reasons)


def end_rebuild(ctx: RunContext, success: bool) -> None:
    """Swap in (or drop) the index generation a full resync wrote, where the backend has one."""
    if not rebuild_ends(ctx.params):
        return
    index = open_index(ctx.source.index)
    try:
        index.finish_rebuild(success)
    finally:
        index.close()


def abort_run(ctx: RunContext, store: StateStore, error: str) -> None:
    """A run failed: record it and drop a half-written rebuild (state was never committed).

    The counts the run log has so far (a mass-delete guard's ``would_delete``) stay, with the
    error's kind added to ``reasons`` (``error:MassDeleteError``) for the run's error panel."""
    if closed_run(ctx, store) is not None:
        log.warning("%s: a re-run task of finished run %s failed: %s", ctx.source.source_id, ctx.run_id, error)
        return  # the run itself finished and stays as it ended
    sid = ctx.source.source_id
    counts = with_error_reason(dict((store.get_run(ctx.run_id, sid) or {}).get("counts") or {}), error)
    store.finish_run(ctx.run_id, "failed", counts, error=error[:2000], source=sid)
    end_rebuild(ctx, success=False)


def with_error_reason(counts: dict[str, Any], error: str) -> dict[str, Any]:
    """``counts`` with one more ``error:<ExceptionType>`` in ``reasons`` (``error`` reads
    ``"<ExceptionType>: message"``, as the runner and the failure callback write it)."""
    kind = error.partition(":")[0].strip() if ":" in error else "error"
    reasons = dict(counts.get("reasons") or {})
    key = f"error:{kind or 'error'}"
    reasons[key] = int(reasons.get(key, 0)) + 1
    return {**counts, "reasons": reasons}


def finish_stage(ctx: RunContext, store: StateStore, counts: dict[str, Any]) -> dict[str, Any]:
    """Swap a rebuilt index in, close the run in the run log with its outcome (``counts["outcome"]``,
    judged at commit) and clean its staging area.

    A ``failed`` outcome (nothing was reached) drops a full resync's rebuild instead of swapping
    an empty generation in; the Airflow layer fails its summary task on it, so the DAG run fails
    and its failure callback alerts (not this stage: that would alert twice).
    """
    if (closed := closed_run(ctx, store)) is not None:
        return dict(closed.get("counts") or {})  # already closed (a cleared summary task)
    outcome = str(counts.get("outcome") or "success")
    end_rebuild(ctx, success=outcome != "failed")
    staging = ctx.staging
    counts = dict(counts)
    counts["staging_bytes"] = staging.size_bytes()
    keep_raw = retains_raw(ctx.source)
    # retention first (this run is the newest, so always kept): its counts go into the summary
    counts.update(prune_source(store, ctx.source, keep_raw))
    note = counts.get("outcome_note") or None
    store.finish_run(
        ctx.run_id, outcome, counts, error=note if outcome != "success" else None, source=ctx.source.source_id
    )
    if outcome != "failed":
        # a run with many failed or newly quarantined items is not a silent one (plugins.engine.alerts)
        alert_finished_run(ctx, store, counts)
    staging.cleanup(keep_raw=keep_raw)
    return counts
