"""Stage 1: ask the connector what changed, plan deletions, split the work into batches.

Writes ``discover.json`` (the plan for the whole run) and ``batch-NNNN.json`` files; returns
the small manifest that goes to XCom. Writes nothing to the index or the item state: a
re-run of this task only rewrites its own files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from include.contract import ChangeKind
from include.index import open_index
from include.settings import get_settings
from include.staging import StagingArea
from include.staging.handoffs import Spill
from include.stores import ItemState, StateStore
from plugins.connectors.base import Connector, ConnectorContext, Discovery, DiscoveryRequest, get_connector_class
from plugins.engine.commit_rules import rebuild_ends
from plugins.engine.context import MassDeleteError, RunContext, closed_run, log
from plugins.engine.manifests import read_plan, write_batch_manifest, write_plan
from plugins.engine.plan_rules import (
    apply_renames,
    classify_changes,
    connector_skips,
    discovery_failures,
    forced_items,
    mass_delete_message,
    plan_deletions,
    reembed_items,
    split_batches,
)
from plugins.engine.processed import Processing, current_processing, processing_versions
from plugins.engine.records import ItemRecord, RunPlan
from plugins.parsers.registry import check_engines

__all__ = [
    "Asked",
    "Asker",
    "ask_connector",
    "canonical_keys",
    "discover_stage",
    "open_connector",
    "processing_versions",  # re-exported: plugins.engine.processed has it
]


def open_connector(ctx: RunContext) -> Connector:
    cls = get_connector_class(ctx.source.kind)
    return cls(ctx.source, ConnectorContext(redis_url=get_settings().redis_url, run_id=ctx.run_id, log=log))


def canonical_keys(connector: Connector, keys: list[str] | None) -> list[str] | None:
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


def _result(ctx: RunContext, plan_path: str, batches: list[str]) -> dict[str, Any]:
    """What goes to XCom: the plan's path and the batch manifests (what fetch is mapped over)."""
    return {"run_id": ctx.run_id, "plan": plan_path, "batches": batches}


def _already_planned(ctx: RunContext, store: StateStore, staging: StagingArea) -> dict[str, Any] | None:
    plan_file = staging.path("discover.json")
    if staging.has("discover.json"):
        # Cleared or retried after the plan was written: the run keeps its plan. Planning again
        # would compare the source with state this very run may already have committed.
        log.info("%s: run %s already planned; reusing %s", ctx.source.source_id, ctx.run_id, plan_file)
        return _result(ctx, str(plan_file), read_plan(plan_file).batches)
    if (closed := closed_run(ctx, store)) is not None:
        # Finished and cleaned up: the same batch names, so re-run mapped tasks line up (they
        # find the run closed and do nothing).
        count = int((closed.get("counts") or {}).get("batches", 0))
        log.info("%s: run %s already finished; nothing to plan", ctx.source.source_id, ctx.run_id)
        return _result(ctx, str(plan_file), [str(staging.path(f"batch-{n:04d}.json")) for n in range(count)])
    return None


class Asked(NamedTuple):
    """What asking the source returned: its discovery, the request, the forced keys, and where
    the digests of staged bytes are when another staging instance staged them (partitions)."""

    found: Discovery
    request: DiscoveryRequest
    forced: dict[str, str]  # key -> why it is re-processed
    staged_digest: Callable[[str | None], dict[str, Any] | None] | None = None


# (ctx, staging, states, processing now) -> Asked: one connector call, or merged partitions
Asker = Callable[[RunContext, StagingArea, dict[str, ItemState], Processing], Asked]


def ask_connector(
    ctx: RunContext,
    staging: StagingArea,
    states: dict[str, ItemState],
    processing: Processing,
    partition: str | None = None,
    spill: Spill | None = None,
) -> Asked:
    """Ask the connector what changed (in ``partition`` only, when given; ``spill`` stages the
    lists that partition's discovery cannot hold in memory)."""
    params, source = ctx.params, ctx.source
    with open_connector(ctx) as connector:
        # Before anything compares them with stored state: a key spelled differently from the
        # connector's own keys would otherwise be fetched and indexed as a second document.
        params.only_keys = canonical_keys(connector, params.only_keys)
        known, forced = forced_items(params, states, processing)
        request = DiscoveryRequest(
            known=known,
            window_start=params.window_start,
            window_end=params.window_end,
            max_items=params.max_items or source.max_items,
            full_resync=params.full_resync,
            only_keys=params.only_keys,
            stage=staging.stage_raw,
            stored=frozenset(key for key, st in states.items() if st.indexed),
            partition=partition,
            spill=spill,
            progress=_crawl_progress(ctx, partition),
            # one crawl in this process: its pages may be parsed while it goes on
            prepare=ctx.early.submit if ctx.early is not None and partition is None else None,
        )
        return Asked(connector.discover(request), request, forced)


def _crawl_progress(ctx: RunContext, partition: str | None) -> Callable[[Mapping[str, int]], None] | None:
    """The connector's discovery counts to the run's progress line (per partition crawled)."""
    progress = ctx.progress
    if progress is None:
        return None
    return lambda stats: progress.crawled(stats, partition)


def _guard_mass_delete(ctx: RunContext, store: StateStore, deletions: int, states: dict[str, ItemState]) -> None:
    """Refuse (and fail the run) a plan deleting more than the source's threshold, unless allowed."""
    indexed = sum(1 for st in states.values() if st.indexed)
    message = mass_delete_message(ctx.source.source_id, deletions, indexed, ctx.source.mass_delete_threshold)
    if message is None:
        return
    if not ctx.params.allow_mass_delete:
        store.finish_run(ctx.run_id, "failed", {"would_delete": deletions}, error=message, source=ctx.source.source_id)
        raise MassDeleteError(message)
    log.warning("%s (allowed by allow_mass_delete)", message)


def _begin_rebuild(ctx: RunContext) -> None:
    """Zero-downtime rebuild where the backend has one: a full resync writes a new generation,
    swapped in by finish_stage when the run succeeds (readers keep the old one meanwhile)."""
    if not rebuild_ends(ctx.params):
        return
    index = open_index(ctx.source.index)
    try:
        index.begin_rebuild(source=ctx.source.source_id)
    finally:
        index.close()


def _reembed_plan(
    ctx: RunContext, states: Mapping[str, ItemState], processing: Processing, forced: dict[str, str]
) -> dict[str, str]:
    """Items to re-embed from their indexed chunk texts -> why. One whose chunks are not all in
    the index goes to ``forced`` instead (re-fetched whole, the reason saying so)."""
    reembed = reembed_items(ctx.params, states, processing)
    if not reembed:
        return reembed
    index = open_index(ctx.source.index)
    try:
        stored = index.chunk_ids(source=ctx.source.source_id)
    finally:
        index.close()
    for key in [k for k in reembed if not set(states[k].chunk_ids) <= stored]:
        forced[key] = f"{reembed.pop(key)}; its chunk text is missing from the index"
    return reembed


def _split_reembed(
    unchanged: list[ItemRecord], reembed: Mapping[str, str]
) -> tuple[list[ItemRecord], list[ItemRecord]]:
    """(unchanged items, those of them to re-embed, ``forced_reason`` saying why)."""
    kept, again = [], []
    for item in unchanged:
        if item.item_key in reembed:
            item.forced_reason = reembed[item.item_key]
            again.append(item)
        else:
            kept.append(item)
    return kept, again


def discover_stage(ctx: RunContext, store: StateStore, ask: Asker | None = None) -> dict[str, Any]:
    """Plan the run (once: a re-run of this task returns the plan it already wrote).

    ``ask`` replaces the connector call (``plugins.engine.partitions``: the merged discoveries
    of a partitioned source); the plan rules are the same either way."""
    source, params = ctx.source, ctx.params
    staging = ctx.staging  # one instance: it remembers the digests of what discovery staged
    if (planned := _already_planned(ctx, store, staging)) is not None:
        return planned
    check_engines(source.parser)  # a typo in parser.engines fails here, before any document
    states = store.items(source.source_id)
    processing = current_processing(source)
    found, request, forced, staged_digest = (ask or ask_connector)(ctx, staging, states, processing)
    renames = apply_renames(states, forced, found.renames)
    reembed = _reembed_plan(ctx, states, processing, forced)
    limits = (source.engine_options.quarantine_after, request.max_items)
    sorted_ = classify_changes(found.changes, states, forced, params, limits, staged_digest or staging.staged_digest)
    skipped = sorted_.skipped + connector_skips(found.stats)
    if sorted_.deferred:
        found.stats["deferred"] = sorted_.deferred  # said in the run's counts, in words on its page
    failed = discovery_failures(found.stats, sorted_.items)
    listing = found.all_keys if found.complete and not params.only_keys else None
    deletions, missing = plan_deletions(
        states, listing, sorted_.explicit_deletes, set(sorted_.items), source.delete_after_missing_runs
    )
    _guard_mass_delete(ctx, store, len(deletions), states)
    to_fetch = sorted_.of_kind(ChangeKind.NEW, ChangeKind.CHANGED)
    unchanged, to_reembed = _split_reembed(sorted_.of_kind(ChangeKind.UNCHANGED), reembed)
    batches = [] if params.dry_run else split_batches(ctx.run_id, source.source_id, to_fetch, source.batch_size)
    plan = RunPlan(
        run_id=ctx.run_id,
        source=source.source_id,
        dry_run=params.dry_run,
        complete=found.complete,
        processing_hash=processing.hash,
        processing_options=processing.options,
        processing_text_options=processing.text_options,
        stats=found.stats,
        unchanged=unchanged,
        to_fetch=[i.item_key for i in to_fetch],
        new_or_changed={i.item_key: i.change.kind for i in to_fetch},
        deletions=deletions,
        missing=missing,
        skipped=skipped,
        failed=failed,
        forced=sorted(forced),
        forced_reasons=dict(sorted(forced.items())),
        renames=renames,
        batches=[write_batch_manifest(staging, b) for b in batches],
        reembed=to_reembed,
    )
    _begin_rebuild(ctx)
    plan_path = write_plan(staging, plan)  # last: its existence means the run is planned, rebuild included
    log.info(
        "%s: discovered %d to fetch, %d unchanged, %d to re-embed, %d to delete, %d skipped (complete listing: %s)",
        *(source.source_id, len(to_fetch), len(unchanged), len(to_reembed), len(deletions), len(skipped)),
        found.complete,
    )
    return _result(ctx, plan_path, plan.batches)
