"""Stage 1 in parts: a partitioned source is discovered one partition per task, then planned once.

A connector may name disjoint parts of its source (``Connector.partitions()``; the web
connector: groups of seed hosts, one host never in two). Such a source's discovery is

    start (open the run) -> crawl[p] (one per partition, in parallel) -> discover (merge + plan)

Each crawl step asks the connector for its partition only (``DiscoveryRequest.partition``) and
stages that partial Discovery as ``discover-part-NNNN.json`` (a re-run overwrites it). The plan
step merges the parts (changes concatenated, complete only if every part is and every current
partition was crawled, key sets united, stats summed) and hands the result to
:func:`~plugins.engine.discover.discover_stage`, whose plan rules run unchanged: deletion
planning sees one merged listing. A source with no partitions keeps the one ``discover`` step.

What a part finds in another part (a link or a redirect target on another partition's host)
is handed off, never capped: the crawl spills the list to staging past a bound
(``handoffs-part-NNNN-MMMM.txt.gz``, :mod:`include.staging.handoffs`), and the plan step keeps every
indexed key no part reached and counts them (``cross_partition_unreached``).

The plan's ``stats["partitions"]`` says what each part crawled (hosts, pages, changes, time).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar

from include.contract import Change
from include.staging import StagedFile, StagingArea
from include.staging.handoffs import Spill, take_handoffs
from include.stores import ItemState, StateStore
from plugins.connectors.base import Discovery, DiscoveryRequest, source_partitions
from plugins.engine.context import RunContext, log
from plugins.engine.discover import (
    Asked,
    Asker,
    ask_connector,
    canonical_keys,
    discover_stage,
    open_connector,
)
from plugins.engine.plan_rules import forced_items
from plugins.engine.processed import Processing, current_processing
from plugins.engine.reaper import DagRunState
from plugins.engine.steps import DiscoverStep, PlanResult, Step, StepResult, start_run

__all__ = [
    "CrawlPartitionStep",
    "PartialDiscovery",
    "PartitionResult",
    "PlanPartitionsStep",
    "StartStep",
    "discover_run",
    "handoff_spill",
    "merge_discoveries",
    "part_name",
]

PART_VERSION = 1
# Cross-partition links no partition reached, listed in the plan's stats (a sample).
_UNREACHED_SAMPLE = 20


def part_name(index: int) -> str:
    """The staged name of partition ``index``'s discovery (deterministic: a re-run overwrites)."""
    return f"discover-part-{index:04d}.json"


def handoff_spill(staging: StagingArea, index: int) -> Spill:
    """Where partition ``index``'s crawl spills its hand-offs: ``handoffs-part-NNNN-MMMM.txt.gz``,
    numbered in order, so a re-run overwrites its own chunks (its record names only those)."""
    chunks = itertools.count()

    def spill(data: bytes) -> StagedFile:
        return staging.put_bytes(f"handoffs-part-{index:04d}-{next(chunks):04d}.txt.gz", data)

    return spill


def _units(partition: str) -> list[str]:
    return [u for u in partition.split(",") if u]


# ----------------------------------------------------------------------------------- the record


@dataclass(slots=True)
class PartialDiscovery:
    """One partition's discovery as staged, with the digests of the bytes its crawl staged
    (the plan step's staging instance did not stage them, so it cannot know them otherwise)."""

    index: int
    partition: str
    discovery: Discovery
    digests: dict[str, dict[str, Any]] = field(default_factory=dict)
    elapsed_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        d = self.discovery
        return {
            "version": PART_VERSION,
            "index": self.index,
            "partition": self.partition,
            "complete": d.complete,
            "all_keys": sorted(d.all_keys) if d.all_keys is not None else None,
            "changes": [c.to_dict() for c in d.changes],
            "stats": d.stats,
            "renames": d.renames,
            "digests": self.digests,
            "elapsed_ms": self.elapsed_ms,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], path: str) -> PartialDiscovery:
        if data.get("version") != PART_VERSION:
            raise ValueError(f"{path}: partial discovery version {data.get('version')!r}, expected {PART_VERSION}")
        keys = data.get("all_keys")
        discovery = Discovery(
            changes=[Change.from_dict(c) for c in data["changes"]],
            complete=bool(data["complete"]),
            all_keys=set(keys) if keys is not None else None,
            stats=dict(data.get("stats") or {}),
            renames=dict(data.get("renames") or {}),
        )
        return cls(
            int(data["index"]),
            str(data["partition"]),
            discovery,
            dict(data.get("digests") or {}),
            float(data.get("elapsed_ms") or 0.0),
        )

    @classmethod
    def read(cls, path: str) -> PartialDiscovery:
        return cls.from_json(StagingArea.read_json(path), path)

    def summary(self) -> dict[str, Any]:
        """What the plan records of this part: which hosts, how many pages, whether complete."""
        stats = self.discovery.stats
        return {
            "index": self.index,
            "hosts": _units(self.partition),
            "pages": int(stats.get("pages", 0) or 0),
            "fetched": int(stats.get("fetched", 0) or 0),
            "changes": len(self.discovery.changes),
            "complete": self.discovery.complete,
            "elapsed_ms": self.elapsed_ms,
        }


# ----------------------------------------------------------------------------------- merging


def merge_stats(parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Counters summed, flags or'd, lists concatenated, nested dicts merged the same way."""
    merged: dict[str, Any] = {}
    for stats in parts:
        for key, value in stats.items():
            merged[key] = _merge_value(merged[key], value) if key in merged else value
    return merged


def _merge_value(a: Any, b: Any) -> Any:
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) or bool(b)
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a + b
    if isinstance(a, list) and isinstance(b, list):
        return a + b
    if isinstance(a, dict) and isinstance(b, dict):
        return merge_stats([a, b])
    return a  # text and mismatched kinds: the first part's (e.g. a crawler version string)


def merge_discoveries(parts: list[PartialDiscovery], expected: list[str]) -> Discovery:
    """One Discovery from the parts. ``expected``: the source's partitions now; a unit of them no
    part crawled (the sources file changed since the DAG was parsed) makes the listing
    incomplete, so nothing on that host is deleted for being absent."""
    crawled = {u for p in parts for u in _units(p.partition)}
    uncovered = sorted({u for p in expected for u in _units(p)} - crawled)
    complete = all(p.discovery.complete for p in parts) and not uncovered
    keys: set[str] = set()
    for part in parts:
        keys |= part.discovery.all_keys or set()
    stats = merge_stats(p.discovery.stats for p in parts)
    stats["partitions"] = [p.summary() for p in sorted(parts, key=lambda p: p.index)]
    if uncovered:
        stats["partitions_uncovered"] = uncovered
    renames: dict[str, str] = {}
    for part in parts:
        renames.update(part.discovery.renames)
    return Discovery(
        changes=[c for p in sorted(parts, key=lambda p: p.index) for c in p.discovery.changes],
        complete=complete,
        all_keys=keys if complete else None,
        stats=stats,
        renames=renames,
    )


def _settle_handoffs(found: Discovery, states: dict[str, ItemState]) -> None:
    """Keys handed from one partition to another (links, redirect targets) that no partition
    reached (a page only linked from another host, a partition's ``max_pages`` cut): counted,
    and an indexed one is kept alive, so how the source is split never deletes a page. The
    hand-offs are read back in full (held and spilled, ``include/staging/handoffs.py``); only the
    unreached ones are held here."""
    reached = {c.item_key for c in found.changes} | (found.all_keys or set())
    unreached = {key for key in take_handoffs(found.stats) if key not in reached}
    found.stats["cross_partition_unreached"] = len(unreached)
    if unreached:
        found.stats["cross_partition_unreached_sample"] = heapq.nsmallest(_UNREACHED_SAMPLE, unreached)
        if found.all_keys is not None:
            found.all_keys |= {k for k in unreached if k in states and states[k].indexed}


def merged_asker(partials: list[str]) -> Asker:
    """The plan step's replacement of the connector call: the staged parts, merged."""

    def ask(ctx: RunContext, staging: StagingArea, states: dict[str, ItemState], processing: Processing) -> Asked:
        parts = [PartialDiscovery.read(str(p)) for p in partials]
        params, source = ctx.params, ctx.source
        with open_connector(ctx) as connector:
            params.only_keys = canonical_keys(connector, params.only_keys)  # as the crawls did
            found = merge_discoveries(parts, connector.partitions())
        _settle_handoffs(found, states)
        known, forced = forced_items(params, states, processing)
        request = DiscoveryRequest(known=known, max_items=params.max_items or source.max_items)
        digests = {path: d for part in parts for path, d in part.digests.items()}
        return Asked(found, request, forced, lambda path: digests.get(path) if path else None)

    return ask


# ----------------------------------------------------------------------------------- the steps


class StartStep(Step[StepResult]):
    """Open the run in the run log before the partitions are crawled (reaping dead runs first)."""

    stage: ClassVar[str] = "start"

    def __init__(self, ctx: RunContext, dag_run_state: DagRunState | None = None) -> None:
        super().__init__(ctx)
        self.dag_run_state = dag_run_state

    def _execute(self, store: StateStore) -> StepResult:
        start_run(self.ctx, store, self.dag_run_state)
        return StepResult()

    def _closed(self, run: dict[str, Any]) -> StepResult:
        return StepResult(closed=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionResult(StepResult):
    """One partition's staged discovery."""

    partial: str
    partition: str
    changes: int = 0
    complete: bool = False

    def counts(self) -> dict[str, Any]:
        if self.closed:
            return {}
        return {"partition": self.partition, "changes": self.changes, "complete": self.complete}


class CrawlPartitionStep(Step[PartitionResult]):
    """Discover one partition (its own connector; ``index`` names its staged file)."""

    stage: ClassVar[str] = "crawl"

    def __init__(self, ctx: RunContext, index: int, partition: str) -> None:
        # own params: discovery canonicalises ``only_keys`` in place, and partitions may run in threads
        super().__init__(dataclasses.replace(ctx, params=dataclasses.replace(ctx.params)))
        self.index = index
        self.partition = partition

    def _execute(self, store: StateStore) -> PartitionResult:
        ctx = self.ctx
        staging = ctx.staging  # one instance: it remembers the digests of what the crawl staged
        path = str(staging.path(part_name(self.index)))
        if staging.has("discover.json"):
            # Planned already (a crawl task cleared after discover ran): crawling again would
            # overwrite raw bytes whose digests the plan holds.
            log.info("%s: run %s already planned; partition %d not crawled again", self._who(), ctx.run_id, self.index)
            return PartitionResult(partial=path, partition=self.partition)
        states = store.items(ctx.source.source_id)
        processing = current_processing(ctx.source)
        start = time.perf_counter()
        spill = handoff_spill(staging, self.index)
        found = ask_connector(ctx, staging, states, processing, partition=self.partition, spill=spill).found
        elapsed = round((time.perf_counter() - start) * 1000, 2)
        digests = {
            c.staged_path: d for c in found.changes if c.staged_path and (d := staging.staged_digest(c.staged_path))
        }
        part = PartialDiscovery(self.index, self.partition, found, digests, elapsed)
        path = str(staging.write_json(part_name(self.index), part.to_json()))
        log.info(
            "%s: partition %d (%s): %d changes, complete %s",
            self._who(),
            self.index,
            self.partition,
            len(found.changes),
            found.complete,
        )
        return PartitionResult(
            partial=path, partition=self.partition, changes=len(found.changes), complete=found.complete
        )

    def _closed(self, run: dict[str, Any]) -> PartitionResult:
        return PartitionResult(
            closed=True, partial=str(self.ctx.staging.path(part_name(self.index))), partition=self.partition
        )


class PlanPartitionsStep(DiscoverStep):
    """Discover's plan from the staged partitions (the run was opened by :class:`StartStep`)."""

    def __init__(self, ctx: RunContext, partials: list[str], dag_run_state: DagRunState | None = None) -> None:
        super().__init__(ctx, dag_run_state)
        self.partials = [str(p) for p in partials]

    def _execute(self, store: StateStore) -> PlanResult:
        planned = discover_stage(self.ctx, store, ask=merged_asker(self.partials))
        return PlanResult(plan=str(planned["plan"]), batches=[str(b) for b in planned["batches"]])


# ----------------------------------------------------------------------------------- in-process


def discover_run(ctx: RunContext, store: StateStore) -> PlanResult:
    """Stage 1 in one process: the one discover step, or, for a partitioned source, start, the
    partitions in a thread pool (the crawl waits on the network, so threads overlap it), then the
    merge and plan. A crawl's failure is raised after the other partitions finished."""
    partitions = source_partitions(ctx.source)
    if not partitions:
        return DiscoverStep(ctx).run(store)
    StartStep(ctx).run(store)
    crawl: Callable[[tuple[int, str]], PartitionResult] = lambda part: CrawlPartitionStep(ctx, *part).run(store)  # noqa: E731
    with ThreadPoolExecutor(max_workers=len(partitions), thread_name_prefix="crawl") as pool:
        results = list(pool.map(crawl, enumerate(partitions)))
    return PlanPartitionsStep(ctx, [r.partial for r in results]).run(store)
