"""Planning rules: from a connector's discovery and the stored state to a run plan.

Pure functions over item states and discovery results (nothing here touches the index, the
state store or the staging area), in the order :func:`plugins.engine.discover.discover_stage`
applies them: forced items, renames, classifying each change (quarantine, ``max_items``), what
discovery failed or skipped, deletions, the mass-delete guard, batches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from include.contract import Change, ChangeKind, VersionEvidence
from include.stores import ItemState
from plugins.engine.context import RunParams
from plugins.engine.processed import Processing, reembed_reason, reprocess_reason
from plugins.engine.records import BatchManifest, Deletion, ItemFailure, ItemRecord, PriorState, Skip, StagedRef

__all__ = [
    "Classified",
    "apply_renames",
    "classify_changes",
    "connector_skips",
    "discovery_failures",
    "forced_items",
    "mass_delete_message",
    "plan_deletions",
    "quarantine_reason",
    "reembed_items",
    "split_batches",
]


def forced_items(
    params: RunParams, states: Mapping[str, ItemState], processing: Processing
) -> tuple[dict[str, VersionEvidence], dict[str, str]]:
    """(stored versions the connector may trust, keys that must be re-fetched regardless -> why).

    Items whose stored version must not be trusted are withheld from the connector, which then
    treats them as new (no validators sent): full resync, named in ``only_keys``, or processed
    otherwise than the source would now (:func:`plugins.engine.processed.reprocess_reason`: new
    options, chunker or model for every item; a new parser version for the items it read).
    Items needing new vectors only (:func:`reembed_items`) are trusted: their chunk texts stand.
    """
    only = set(params.only_keys or ())
    known: dict[str, VersionEvidence] = {}
    forced: dict[str, str] = {}
    reembed = reembed_items(params, states, processing)
    for key, st in states.items():
        if not st.indexed:
            continue
        why = "full resync" if params.full_resync else "named in only_keys" if key in only else None
        if why is None and key in reembed:
            known[key] = st.version or VersionEvidence()
            continue
        if (why := why or reprocess_reason(st, processing)) is not None:
            forced[key] = why
            continue
        known[key] = st.version or VersionEvidence()
    return known, forced


def reembed_items(params: RunParams, states: Mapping[str, ItemState], processing: Processing) -> dict[str, str]:
    """Indexed items whose only difference from now is the embedding -> why ("embedding model A
    -> B"): re-embedded from their indexed chunk texts (:mod:`plugins.engine.reembed`), unless
    the source changed them (then fetched as any change). A full resync or ``only_keys``
    re-processes its items whole."""
    if params.full_resync:
        return {}
    only = set(params.only_keys or ())
    return {
        key: why
        for key, st in states.items()
        if st.indexed and key not in only and (why := reembed_reason(st, processing)) is not None
    }


def apply_renames(states: dict[str, ItemState], forced: dict[str, str], renames: Mapping[str, str]) -> dict[str, str]:
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
                forced[new] = forced.pop(old)
            applied[old] = new
    return applied


def quarantine_reason(st: ItemState | None, quarantine_after: int, params: RunParams) -> str | None:
    """Why a changed item is not fetched this run (it failed too often), else None. Naming the
    item in ``only_keys`` lifts the quarantine: that is how an operator retries it."""
    if st is None or st.failure_count < quarantine_after or params.only_keys:
        return None
    return f"quarantined after {st.failure_count} failures"


@dataclass(slots=True)
class Classified:
    """Discovery's changes sorted: items of the run, quarantined ones, explicit deletions."""

    items: dict[str, ItemRecord] = field(default_factory=dict)
    skipped: list[Skip] = field(default_factory=list)
    explicit_deletes: dict[str, str] = field(default_factory=dict)  # key -> reason
    deferred: int = 0  # new or changed items past ``max_items``: left for a later run

    def of_kind(self, *kinds: ChangeKind) -> list[ItemRecord]:
        return [i for i in self.items.values() if i.change.kind in kinds]


def classify_changes(
    changes: Iterable[Change],
    states: Mapping[str, ItemState],
    forced: Mapping[str, str],
    params: RunParams,
    limits: tuple[int, int | None],
    staged_digest: Callable[[str | None], dict[str, Any] | None],
) -> Classified:
    """Sort each change: an explicit deletion of an indexed item, outside ``only_keys``, a
    quarantined item, beyond ``max_items`` (``limits`` = (quarantine_after, max_items)), or an
    item of the run (new if never indexed; changed if indexed, also when forced: the connector,
    given no stored version of a forced item, calls it new, as a dry run would then say).
    """
    quarantine_after, limit = limits
    only = set(params.only_keys or ())
    out = Classified()
    fetchable = 0
    for change in changes:
        key, st = change.item_key, states.get(change.item_key)
        if change.kind is ChangeKind.DELETED:
            if st is not None and st.indexed:
                out.explicit_deletes[key] = change.reason or "deleted at source"
            continue
        if only and key not in only:
            continue
        if change.kind is ChangeKind.UNCHANGED and key in forced:
            change.kind = ChangeKind.CHANGED  # a connector answered from its own cache; we need bytes
        if change.kind is not ChangeKind.UNCHANGED:
            if (reason := quarantine_reason(st, quarantine_after, params)) is not None:
                out.skipped.append(Skip(key, reason))
                continue
            if limit is not None and fetchable >= limit:
                out.deferred += 1
                continue
            fetchable += 1
            if st is None or not st.indexed:
                change.kind = ChangeKind.NEW
            elif change.kind is ChangeKind.NEW:
                change.kind = ChangeKind.CHANGED  # indexed, withheld from the connector (forced)
        # a connector may ask for a rewrite of unchanged text (its URL moved, say)
        rewrite = "rewrite asked by the connector" if change.metadata.get("rewrite") else None
        out.items[key] = ItemRecord(
            change=change,
            prior=PriorState.of(st),
            forced=key in forced or rewrite is not None,
            forced_reason=forced.get(key) or rewrite,
            staged=StagedRef.from_digest(change.staged_path, staged_digest(change.staged_path)),
        )
    return out


def connector_skips(stats: dict[str, Any]) -> list[Skip]:
    """Records the connector had to skip (malformed, unsupported): to lineage with their reason.
    Taken out of ``stats``, which goes to the run log as the connector's counters."""
    skipped = stats.pop("skipped", None) or []
    return [
        Skip(str(s["item_key"]), str(s.get("reason", ""))) for s in skipped if isinstance(s, dict) and "item_key" in s
    ]


def discovery_failures(stats: dict[str, Any], planned: Iterable[str]) -> list[ItemFailure]:
    """Items the connector failed to read during discovery (a crawler's page fetch); they count
    toward quarantine. An item also planned for fetching is left to the fetch."""
    failed = stats.pop("failed", None) or []
    present = set(planned)
    return [
        ItemFailure(
            item_key=f["item_key"],
            reason=f.get("reason", "discover_error"),
            error=str(f.get("error", "")),
            retryable=bool(f.get("retryable", True)),
            stage="discover",
        )
        for f in failed
        if isinstance(f, dict) and "item_key" in f and f["item_key"] not in present
    ]


def _deletion(st: ItemState, reason: str) -> Deletion:
    return Deletion(
        item_key=st.item_key, doc_id=st.doc_id, reason=reason, chunk_ids=list(st.chunk_ids), version=st.version
    )


def plan_deletions(
    states: Mapping[str, ItemState],
    all_keys: frozenset[str] | set[str] | None,
    explicit: Mapping[str, str],
    present: set[str],
    delete_after: int,
) -> tuple[list[Deletion], dict[str, int]]:
    """Deletions: explicit ones, plus items absent from ``delete_after`` complete listings in a row.

    ``all_keys`` is the complete listing (None when the listing was not complete, or the run was
    limited to ``only_keys``: then nothing is absent). Returns (deletions, missing) where
    ``missing`` maps still-kept absent items to their new absolute miss count (absolute, so
    re-running the commit sets the same value).
    """
    deletions = [_deletion(states[k], r) for k, r in explicit.items()]
    missing: dict[str, int] = {}
    if all_keys is not None:
        alive = set(all_keys) | present
        for key, st in states.items():
            if key in alive or key in explicit or not st.indexed:
                continue
            misses = st.missing_runs + 1
            if misses >= delete_after:
                deletions.append(_deletion(st, f"absent from {misses} complete listing(s)"))
            else:
                missing[key] = misses
    return deletions, missing


def mass_delete_message(source_id: str, deletions: int, indexed: int, threshold: float) -> str | None:
    """Why this many deletions look like a broken listing rather than a cleanup, else None."""
    if not deletions or not indexed or deletions <= threshold * indexed:
        return None
    return (
        f"mass-delete guard: this run would delete {deletions} of {indexed} documents of "
        f"{source_id} (> {threshold:.0%}); nothing was deleted. "
        "Re-run with allow_mass_delete=true if this is intended."
    )


def split_batches(run_id: str, source_id: str, items: list[ItemRecord], size: int) -> list[BatchManifest]:
    """The items to fetch in batches of ``size`` (one mapped task instance each)."""
    return [
        BatchManifest(run_id=run_id, source=source_id, batch=number, stage="batch", items=items[start : start + size])
        for number, start in enumerate(range(0, len(items), size))
    ]
