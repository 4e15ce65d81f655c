"""Stage 1: ask the connector what changed, plan deletions, split the work into batches.

Writes ``discover.json`` (the plan for the whole run) and ``batch-NNNN.json`` files; returns
the small manifest that goes to XCom. Writes nothing to the index or the item state: a
re-run of this task only rewrites its own files.
"""

from __future__ import annotations

from typing import Any

from include.contract import ChangeKind, VersionEvidence, document_id
from include.failpoints import failpoint
from include.index import open_index
from include.settings import get_settings
from include.stores import ItemState, StateStore
from plugins.connectors.base import Connector, ConnectorContext, Discovery, DiscoveryRequest, get_connector_class
from plugins.engine.context import MassDeleteError, RunContext, closed_run, log

__all__ = ["discover_stage", "open_connector"]


def open_connector(ctx: RunContext) -> Connector:
    cls = get_connector_class(ctx.source.kind)
    return cls(ctx.source, ConnectorContext(redis_url=get_settings().redis_url, run_id=ctx.run_id, log=log))


def _canonical_keys(connector: Connector, keys: list[str] | None) -> list[str] | None:
    """``only_keys`` in the connector's canonical form, first spelling first, duplicates dropped.

    Every entry point (trigger form and REST conf through the DAG's params, the CLI's
    ``--only-key``, ``run_pipeline(params=...)``) reaches the engine here.
    """
    if not keys:
        return None
    canonical: dict[str, None] = {}
    for number, key in enumerate(keys):
        try:
            canonical[connector.canonical_key(str(key))] = None
        except ValueError as exc:
            # the reason, not the key: a refused key may be a URL carrying a token
            raise ValueError(f"only_keys: entry #{number} is not an item key of this source: {exc}") from None
    return list(canonical)


def _known_versions(
    ctx: RunContext, states: dict[str, ItemState], processing: str
) -> tuple[dict[str, VersionEvidence], set[str]]:
    """(stored versions the connector may trust, keys that must be re-fetched regardless).

    Items whose stored version must not be trusted are withheld from the connector, which then
    treats them as new (no validators sent): full resync, changed parser/chunker options, named
    in ``only_keys``.
    """
    params = ctx.params
    only = set(params.only_keys or ())
    known: dict[str, VersionEvidence] = {}
    forced: set[str] = set()
    for key, st in states.items():
        if not st.indexed:
            continue
        if params.full_resync or st.processing_hash != processing or key in only:
            forced.add(key)
            continue
        known[key] = st.version or VersionEvidence()
    return known, forced


def _v(st: ItemState) -> dict[str, Any] | None:
    return st.version.to_dict() if st.version else None


def _prior(st: ItemState | None) -> dict[str, Any] | None:
    if st is None:
        return None
    return {
        "doc_id": st.doc_id,
        "version": st.version.to_dict() if st.version else None,
        "content_hash": st.content_hash,
        "processing_hash": st.processing_hash,
        "chunk_ids": st.chunk_ids,
        "failure_count": st.failure_count,
        "last_failure_run": st.last_failure_run,
        "missing_runs": st.missing_runs,
    }


def discover_stage(ctx: RunContext, store: StateStore) -> dict[str, Any]:
    """Plan the run (once: a re-run of this task returns the plan it already wrote)."""
    source, params = ctx.source, ctx.params
    staging = ctx.staging
    plan_file = staging.path("discover.json")
    if plan_file.exists():
        # Cleared or retried after the plan was written: the run keeps its plan. Planning again
        # would compare the source with state this very run may already have committed.
        plan = staging.read_json(plan_file)
        log.info("%s: run %s already planned; reusing %s", source.source_id, ctx.run_id, plan_file)
        return {"run_id": ctx.run_id, "plan": str(plan_file), "batches": plan.get("batches", [])}
    if (closed := closed_run(ctx, store)) is not None:
        # Finished and cleaned up: the same batch names, so re-run mapped tasks line up (they
        # find the run closed and do nothing).
        count = int((closed.get("counts") or {}).get("batches", 0))
        log.info("%s: run %s already finished; nothing to plan", source.source_id, ctx.run_id)
        batches = [str(staging.path(f"batch-{n:04d}.json")) for n in range(count)]
        return {"run_id": ctx.run_id, "plan": str(plan_file), "batches": batches}
    states = store.items(source.source_id)
    processing = source.processing_hash()
    quarantine_after = source.engine_options.quarantine_after
    with open_connector(ctx) as connector:
        # Before anything compares them with stored state: a key spelled differently from the
        # connector's own keys would otherwise be fetched and indexed as a second document.
        params.only_keys = _canonical_keys(connector, params.only_keys)
        known, forced = _known_versions(ctx, states, processing)
        request = DiscoveryRequest(
            known=known,
            window_start=params.window_start,
            window_end=params.window_end,
            max_items=params.max_items or source.max_items,
            full_resync=params.full_resync,
            only_keys=params.only_keys,
            stage=staging.stage_raw,
            stored=frozenset(key for key, st in states.items() if st.indexed),
        )
        found: Discovery = connector.discover(request)
    renames = _apply_renames(states, forced, found.renames)
    only = set(params.only_keys or ())

    entries: dict[str, dict[str, Any]] = {}
    skipped: list[dict[str, Any]] = []
    explicit_deletes: dict[str, str] = {}
    fetchable = 0
    limit = request.max_items
    for change in found.changes:
        key = change.item_key
        if change.kind is ChangeKind.DELETED:
            if key in states and states[key].indexed:
                explicit_deletes[key] = change.reason or "deleted at source"
            continue
        if only and key not in only:
            continue
        st = states.get(key)
        if change.kind is ChangeKind.UNCHANGED and key in forced:
            change.kind = ChangeKind.CHANGED  # a connector answered from its own cache; we need bytes
        if change.kind is not ChangeKind.UNCHANGED:
            if st is not None and st.failure_count >= quarantine_after and not params.only_keys:
                skipped.append({"item_key": key, "reason": f"quarantined after {st.failure_count} failures"})
                continue
            if limit is not None and fetchable >= limit:
                continue
            fetchable += 1
            if st is None or not st.indexed:
                change.kind = ChangeKind.NEW
        entries[key] = {
            "change": change.to_dict(),
            "prior": _prior(st),
            # a connector may ask for a rewrite of unchanged text (its URL moved, say)
            "forced": key in forced or bool(change.metadata.get("rewrite")),
            "staged": staging.staged_digest(change.staged_path),  # checked when fetch reads it back
        }

    # Records a connector had to skip (malformed, unsupported) or failed to read during discovery
    # (a crawler's page fetch) go to lineage with their reason; failures count toward quarantine.
    skipped.extend(s for s in found.stats.pop("skipped", None) or [] if isinstance(s, dict) and "item_key" in s)
    failed = [
        {
            "item_key": f["item_key"],
            "reason": f.get("reason", "discover_error"),
            "error": str(f.get("error", "")),
            "retryable": bool(f.get("retryable", True)),
            "stage": "discover",
        }
        for f in found.stats.pop("failed", None) or []
        if isinstance(f, dict) and "item_key" in f and f["item_key"] not in entries
    ]
    deletions, missing = _plan_deletions(ctx, states, found, explicit_deletes, set(entries))
    indexed = sum(1 for st in states.values() if st.indexed)
    if deletions and indexed and len(deletions) > source.mass_delete_threshold * indexed:
        message = (
            f"mass-delete guard: this run would delete {len(deletions)} of {indexed} documents of "
            f"{source.source_id} (> {source.mass_delete_threshold:.0%}); nothing was deleted. "
            "Re-run with allow_mass_delete=true if this is intended."
        )
        if not params.allow_mass_delete:
            store.finish_run(
                ctx.run_id, "failed", {"would_delete": len(deletions)}, error=message, source=source.source_id
            )
            raise MassDeleteError(message)
        log.warning("%s (allowed by allow_mass_delete)", message)

    to_fetch = [e for e in entries.values() if e["change"]["kind"] in (ChangeKind.NEW, ChangeKind.CHANGED)]
    unchanged = [e for e in entries.values() if e["change"]["kind"] == ChangeKind.UNCHANGED]
    batches: list[str] = []
    if not params.dry_run:
        size = source.batch_size
        for number, start in enumerate(range(0, len(to_fetch), size)):
            batches.append(
                staging.write_json(
                    f"batch-{number:04d}.json",
                    {
                        "run_id": ctx.run_id,
                        "source": source.source_id,
                        "batch": number,
                        "items": to_fetch[start : start + size],
                    },
                )
            )
    plan = {
        "run_id": ctx.run_id,
        "source": source.source_id,
        "dry_run": params.dry_run,
        "complete": found.complete,
        "stats": found.stats,
        "unchanged": unchanged,
        "to_fetch": [e["change"]["item_key"] for e in to_fetch],
        "new_or_changed": {e["change"]["item_key"]: e["change"]["kind"] for e in to_fetch},
        "deletions": deletions,
        "missing": missing,
        "skipped": skipped,
        "failed": failed,
        "forced": sorted(forced),
        "renames": renames,
        "processing_hash": processing,
        "batches": batches,
    }
    if params.full_resync and not params.dry_run:
        # Zero-downtime rebuild where the backend has one: this run writes a new generation,
        # swapped in by finish_stage when the run succeeds (readers keep the old one meanwhile).
        index = open_index(source.index)
        try:
            index.begin_rebuild(source=source.source_id)
        finally:
            index.close()
    # Written last (atomically): its existence means the run is planned, rebuild included.
    plan_path = staging.write_json("discover.json", plan)
    log.info(
        "%s: discovered %d to fetch, %d unchanged, %d to delete, %d skipped (complete listing: %s)",
        source.source_id,
        len(to_fetch),
        len(unchanged),
        len(deletions),
        len(skipped),
        found.complete,
    )
    failpoint("discover")
    return {"run_id": ctx.run_id, "plan": plan_path, "batches": batches}


def _apply_renames(states: dict[str, ItemState], forced: set[str], renames: dict[str, str]) -> dict[str, str]:
    """Re-key the stored states a connector renamed (old -> new), in memory: the plan then treats
    each as the item it was (same doc id, chunk ids, version). The commit stage renames the rows.
    A rename onto a key that already has state, or of a key without state, is ignored."""
    applied: dict[str, str] = {}
    for old, new in renames.items():
        if old in states and new not in states:
            st = states.pop(old)
            st.item_key = new
            states[new] = st
            if old in forced:
                forced.discard(old)
                forced.add(new)
            applied[old] = new
    return applied


def _plan_deletions(
    ctx: RunContext,
    states: dict[str, ItemState],
    found: Discovery,
    explicit: dict[str, str],
    present: set[str],
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Deletions: explicit ones, plus items absent from N complete listings in a row.

    Returns (deletions, missing) where ``missing`` maps still-kept absent items to their new
    absolute miss count (absolute, so re-running the commit sets the same value).
    """
    deletions = [
        {
            "item_key": k,
            "doc_id": states[k].doc_id,
            "chunk_ids": states[k].chunk_ids,
            "reason": r,
            "version": _v(states[k]),
        }
        for k, r in explicit.items()
    ]
    missing: dict[str, int] = {}
    if found.complete and found.all_keys is not None and not ctx.params.only_keys:
        alive = found.all_keys | present
        for key, st in states.items():
            if key in alive or key in explicit or not st.indexed:
                continue
            misses = st.missing_runs + 1
            if misses >= ctx.source.delete_after_missing_runs:
                deletions.append(
                    {
                        "item_key": key,
                        "doc_id": st.doc_id,
                        "chunk_ids": st.chunk_ids,
                        "reason": f"absent from {misses} complete listing(s)",
                        "version": _v(st),
                    }
                )
            else:
                missing[key] = misses
    for d in deletions:
        d.setdefault("doc_id", document_id(ctx.source.source_id, d["item_key"]))
    return deletions, missing
