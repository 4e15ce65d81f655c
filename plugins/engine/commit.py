"""Stages 6-7: apply deletions, commit item state, record lineage; then close the run.

Runs only after every batch's upsert finished, so state is committed for exactly the items
whose index write succeeded. Everything here is idempotent: item rows are replaced, counters
are written as absolute values computed from the state *before* the run, lineage rows are
keyed by (run, item).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from include.contract import VersionEvidence, document_id
from include.failpoints import failpoint
from include.index import IndexBackend
from include.staging import StagingArea
from include.stores import ItemState, RunItem, StateStore
from plugins.engine.alerts import alert_finished_run
from plugins.engine.context import RunContext, closed_run, log
from plugins.engine.reaper import retains_raw
from plugins.engine.retention import prune_source

__all__ = ["MissingManifestsError", "abort_run", "commit_stage", "end_rebuild", "finish_stage", "missing_batches"]

_STAGES = ("batch", "fetched", "parsed", "chunked", "upserted")


class MissingManifestsError(RuntimeError):
    """Batches of the plan have no ``upserted`` manifest: committing would lose their items."""

    def __init__(self, message: str, batches: list[int]) -> None:
        super().__init__(message)
        self.batches = batches


def missing_batches(staging: StagingArea, plan: dict[str, Any]) -> dict[int, str | None]:
    """Batches of the plan without an upserted manifest -> the last stage manifest they have."""
    missing: dict[int, str | None] = {}
    for number in range(len(plan.get("batches", []))):
        if Path(staging.stage_path("upserted", number)).exists():
            continue
        done = [s for s in _STAGES[:-1] if Path(staging.stage_path(s, number)).exists()]
        missing[number] = done[-1] if done else None
    return missing


def _refuse_incomplete(ctx: RunContext, plan: dict[str, Any]) -> None:
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
        f"run {ctx.run_id} of {ctx.source.source_id}: {len(missing)} of {len(plan['batches'])} batches have no "
        f"upserted manifest: {described}; nothing was committed. Re-run those batches' fetch, parse, chunk "
        f"and upsert tasks (map index = batch number), then commit.",
        sorted(missing),
    )


def commit_stage(ctx: RunContext, store: StateStore, index_factory: Callable[[], IndexBackend]) -> dict[str, Any]:
    source = ctx.source
    sid = source.source_id
    staging = ctx.staging
    plan_file = staging.path("discover.json")
    if not plan_file.exists() and (closed := closed_run(ctx, store)) is not None:
        log.info("%s: run %s already finished; its commit stands", sid, ctx.run_id)
        return dict(closed.get("counts") or {})
    if not plan_file.exists():
        # e.g. the reaper closed the run and removed its staging; its single tasks cannot be redone
        run = store.get_run(ctx.run_id, sid) or {}
        raise FileNotFoundError(
            f"run {ctx.run_id} of {sid} has no plan in staging ({plan_file}; run log: {run.get('status')}, "
            f"{run.get('error') or 'no error recorded'}): re-run the whole DAG run, starting with discover"
        )
    plan = staging.read_json(plan_file)
    if plan["dry_run"]:
        return _dry_run(ctx, store, plan)
    _refuse_incomplete(ctx, plan)
    manifests = [staging.read_json(staging.stage_path("upserted", n)) for n in range(len(plan["batches"]))]
    counts: Counter[str] = Counter()
    lineage: list[RunItem] = []
    states: list[ItemState] = []
    # keys a connector renamed (discover's plan): moved first, so the rows below find their state
    store.rename_items(sid, plan.get("renames") or {})
    prior_states = store.items(sid)

    # 1. deletions: index first, then state.
    if plan["deletions"]:
        index = index_factory()
        try:
            removed = index.delete_documents(sid, [d["doc_id"] for d in plan["deletions"]])
        finally:
            index.close()
        counts["chunks_deleted"] += removed
        failpoint("commit:deleted")  # gone from the index, still in the state
        store.delete_items(sid, [d["item_key"] for d in plan["deletions"]])
        for d in plan["deletions"]:
            lineage.append(
                RunItem(
                    item_key=d["item_key"],
                    action="deleted",
                    doc_id=d["doc_id"],
                    reason=d["reason"],
                    version_before=d.get("version"),
                    chunks_removed=list(d["chunk_ids"]),
                )
            )
        counts["deleted"] += len(plan["deletions"])

    # 2. unchanged items (validators said so at discovery, or the content hash did after parsing)
    unchanged = list(plan["unchanged"])
    for m in manifests:
        unchanged.extend(m["unchanged"])
    for entry in unchanged:
        key = entry["change"]["item_key"]
        st = prior_states.get(key)
        if st is None:
            continue
        before = (entry.get("prior") or {}).get("version")
        observed = VersionEvidence.from_dict(entry["change"]["version"])
        st.version = VersionEvidence(
            etag=observed.etag or (st.version.etag if st.version else None),
            last_modified=observed.last_modified or (st.version.last_modified if st.version else None),
            modified_time=observed.modified_time or (st.version.modified_time if st.version else None),
            revision=observed.revision or (st.version.revision if st.version else None),
            content_hash=st.content_hash,
        )
        st.last_seen_run, st.missing_runs, st.failure_count = ctx.run_id, 0, 0
        st.last_error = st.last_error_reason = None
        states.append(st)
        lineage.append(
            RunItem(
                item_key=key,
                action="unchanged",
                doc_id=st.doc_id,
                reason=entry.get("reason") or entry["change"].get("reason") or "not modified",
                version_before=before,
                version_after=st.version.to_dict(),
                content_hash=st.content_hash,
                chunks_kept=list(st.chunk_ids),
                warnings=entry.get("warnings") or None,  # re-parsed, same text: same warnings
            )
        )
        counts["unchanged"] += 1

    # 3. written items
    for m in manifests:
        for entry in m["items"]:
            key = entry["change"]["item_key"]
            # "before" is what discovery saw, not the current row: a re-run of this task must
            # classify and record exactly as the first attempt did.
            before = entry.get("prior") or {}
            version = VersionEvidence.from_dict(entry["raw"].get("version") or entry["change"]["version"])
            version = version.with_hash(entry["content_hash"])
            action = "changed" if before.get("version") else "new"
            states.append(
                ItemState(
                    source=sid,
                    item_key=key,
                    doc_id=entry["doc_id"],
                    version=version,
                    content_hash=entry["content_hash"],
                    processing_hash=plan["processing_hash"],
                    chunk_ids=list(entry["chunk_ids"]),
                    title=entry.get("title"),
                    url=entry["raw"].get("url"),
                    last_seen_run=ctx.run_id,
                    last_indexed_run=ctx.run_id,
                )
            )
            lineage.append(
                RunItem(
                    item_key=key,
                    action=action,
                    doc_id=entry["doc_id"],
                    reason="forced re-processing" if entry.get("forced") else None,
                    version_before=before.get("version"),
                    version_after=version.to_dict(),
                    content_hash=entry["content_hash"],
                    byte_size=entry.get("byte_size"),
                    staged_path=entry.get("raw_path"),
                    parser=entry.get("parser"),
                    parser_version=entry.get("parser_version"),
                    blocks=entry.get("blocks"),
                    chars=entry.get("chars"),
                    chunker=entry.get("chunker"),
                    chunker_options_hash=entry.get("chunker_options_hash"),
                    chunks_added=entry["chunks_added"],
                    chunks_kept=entry["chunks_kept"],
                    chunks_removed=entry["chunks_removed"],
                    stage_ms=entry.get("stage_ms", {}),
                    warnings=entry.get("warnings") or None,  # the parser's (needs_ocr ...)
                )
            )
            counts[action] += 1
            counts["chunks_written"] += entry["written"]
            counts["chunks_unchanged"] += entry["unchanged_chunks"]
            counts["chunks_deleted"] += entry["deleted_chunks"]

    # 4. failures: the indexed version (if any) stays; the streak grows once per run. An item with
    # nothing to index (parse:empty: a JavaScript shell, a login page, a scan without text) was
    # fetched and parsed fine: it is recorded as skipped, breaks the streak instead of growing it
    # (so it is never quarantined as failing) and is looked at again next run.
    discovery_failures = [{"failures": plan.get("failed", [])}]
    for m in [*discovery_failures, *manifests]:
        for failure in m["failures"]:
            key = failure["item_key"]
            st = prior_states.get(key) or ItemState(
                source=sid,
                item_key=key,
                doc_id=document_id(sid, key),
                version=None,
                content_hash=None,
                processing_hash=None,
                chunk_ids=[],
            )
            action = "skipped" if failure["reason"] == "parse:empty" else "failed"
            if action == "skipped":
                st.failure_count = 0
            elif st.last_failure_run != ctx.run_id:
                st.failure_count += 1
                st.last_failure_run = ctx.run_id
            st.last_error, st.last_error_reason = failure["error"][:2000], failure["reason"]
            st.last_seen_run = ctx.run_id
            states.append(st)
            lineage.append(
                RunItem(
                    item_key=key,
                    action=action,
                    doc_id=st.doc_id,
                    reason=f"{failure['stage']}: {failure['reason']}",
                    version_before=st.version.to_dict() if st.version else None,
                    error=failure["error"][:2000],
                    warnings=failure.get("warnings") or None,  # a fully scanned PDF's needs_ocr
                )
            )
            counts[action] += 1

    # 5. absent-but-kept items and quarantined ones
    for key, misses in plan["missing"].items():
        st = prior_states.get(key)
        if st is not None:
            st.missing_runs = misses
            states.append(st)
    for skip in plan["skipped"]:
        lineage.append(RunItem(item_key=skip["item_key"], action="skipped", reason=skip["reason"]))
        counts["skipped"] += 1

    store.save_items(states)
    store.record_run_items(ctx.run_id, sid, lineage)
    counts["fetched"] = sum(len(m["items"]) for m in manifests) + sum(
        1 for m in manifests for u in m["unchanged"] if "raw_path" in u
    )
    counts["parsed"] = counts["fetched"]  # every fetched item went through the parser
    counts["chunked"] = counts["new"] + counts["changed"]
    # A crawler downloads during discovery and reports its bytes; other connectors during fetch.
    staged = sum(e.get("byte_size") or 0 for m in manifests for e in m["items"] + m["unchanged"])
    counts["bytes_fetched"] = int(plan["stats"].get("bytes", staged))
    result = {k: int(v) for k, v in counts.items()}
    for key in (
        *("new", "changed", "unchanged", "deleted", "failed", "skipped", "fetched", "parsed", "chunked"),
        *("chunks_written", "chunks_unchanged", "chunks_deleted"),
    ):
        result.setdefault(key, 0)
    result["missing_not_deleted"] = len(plan["missing"])
    # the connector's own counters (a crawl's fetched / not modified / skipped / errors by kind)
    result["source_stats"] = plan["stats"]
    result["listing_complete"] = bool(plan["complete"])
    result["batches"] = len(plan.get("batches", []))
    log.info("%s: committed %s", sid, result)
    failpoint("commit")
    return result


def _dry_run(ctx: RunContext, store: StateStore, plan: dict[str, Any]) -> dict[str, Any]:
    """Report what a real run would change; touch neither the index nor item state."""
    lineage = [
        RunItem(item_key=key, action=kind, reason="dry run: would be fetched and re-indexed if content changed")
        for key, kind in plan["new_or_changed"].items()
    ]
    lineage += [
        RunItem(
            item_key=d["item_key"],
            action="deleted",
            doc_id=d["doc_id"],
            reason=f"dry run: would delete ({d['reason']})",
        )
        for d in plan["deletions"]
    ]
    store.record_run_items(ctx.run_id, ctx.source.source_id, lineage)
    kinds = Counter(plan["new_or_changed"].values())
    return {
        "dry_run": True,
        "would_add": kinds.get("new", 0),
        "would_update": kinds.get("changed", 0),
        "unchanged": len(plan["unchanged"]),
        "would_delete": len(plan["deletions"]),
        "new": 0,
        "changed": 0,
        "deleted": 0,
        "failed": 0,
        "fetched": 0,
        "parsed": 0,
        "chunked": 0,
        "chunks_written": 0,
    }


def end_rebuild(ctx: RunContext, success: bool) -> None:
    """Swap in (or drop) the index generation a full resync wrote, where the backend has one."""
    if not ctx.params.full_resync or ctx.params.dry_run:
        return
    from include.index import open_index

    index = open_index(ctx.source.index)
    try:
        index.finish_rebuild(success)
    finally:
        index.close()


def abort_run(ctx: RunContext, store: StateStore, error: str) -> None:
    """A run failed: record it and drop a half-written rebuild (state was never committed)."""
    if closed_run(ctx, store) is not None:
        log.warning("%s: a re-run task of finished run %s failed: %s", ctx.source.source_id, ctx.run_id, error)
        return  # the run itself succeeded and stays so
    store.finish_run(ctx.run_id, "failed", {}, error=error[:2000], source=ctx.source.source_id)
    end_rebuild(ctx, success=False)


def finish_stage(ctx: RunContext, store: StateStore, counts: dict[str, Any]) -> dict[str, Any]:
    """Swap a rebuilt index in, close the run in the run log and clean its staging area."""
    if (closed := closed_run(ctx, store)) is not None:
        return dict(closed.get("counts") or {})  # already closed (a cleared summary task)
    end_rebuild(ctx, success=True)
    staging = ctx.staging
    counts = dict(counts)
    counts["staging_bytes"] = staging.size_bytes()
    keep_raw = retains_raw(ctx.source)
    # retention first (this run is the newest, so always kept): its counts go into the summary
    counts.update(prune_source(store, ctx.source, keep_raw))
    store.finish_run(ctx.run_id, "success", counts, source=ctx.source.source_id)
    # a success with many failed or newly quarantined items is not a silent one (plugins.engine.alerts)
    alert_finished_run(ctx, store, counts)
    staging.cleanup(keep_raw=keep_raw)
    return counts
