"""Hand-offs: item keys one partition's discovery found in another partition's part of the source.

A partitioned source (``Connector.partitions()``: the web connector's host groups) is discovered
one part at a time. What a part finds in another part (the web crawler: a link or a redirect
target on another partition's host) is not followed there; it is *handed off*, and the plan step
checks that some partition reached it. One that none reached is kept, not deleted, and counted:
a page must never be deleted because of how the crawl was split.

So the list is never capped (a cap of 2,000 once let the 2,001st page linked only from another
host drop out of it and be deleted). It is held as a set up to :data:`MEMORY_LIMIT` keys, then
written to the run's staging as sorted, gzip'd chunks (through the ``spill`` callable the engine
gives the connector, ``DiscoveryRequest.spill``); the plan step reads them back, verified.
"""

from __future__ import annotations

import dataclasses
import gzip
from collections.abc import Callable, Iterator
from typing import Any

from include.staging import StagedFile, StagingArea

__all__ = ["MEMORY_LIMIT", "HandoffSpool", "Spill", "take_handoffs"]

# Keys held in memory before a chunk goes to staging (about 100 bytes each: a few MB).
MEMORY_LIMIT = 50_000

# (chunk bytes) -> the staged file: the engine names it (one run, one partition, one chunk)
Spill = Callable[[bytes], StagedFile]

# The discovery stats that carry the list from a partition's crawl to the plan step.
_HELD = "handoffs"
_FILES = "handoff_files"
_SPILLED = "handoffs_spilled"


class HandoffSpool:
    """One partition's hand-offs: a set in memory, spilled in chunks past ``memory_limit``.

    Keys within a chunk are distinct; a key may recur in another chunk (the set is emptied at
    each spill), which the reader's consumer dedupes. Without ``spill`` everything stays in
    memory (a crawl outside the engine's staging)."""

    def __init__(self, spill: Spill | None, memory_limit: int | None = None) -> None:
        self.spill = spill
        self.memory_limit = max(1, memory_limit or MEMORY_LIMIT)  # read at construction: tests lower it
        self._held: set[str] = set()
        self._files: list[StagedFile] = []
        self._spilled = 0

    def add(self, key: str) -> None:
        self._held.add(key)
        if self.spill is not None and len(self._held) >= self.memory_limit:
            self._write_chunk(self.spill)

    def _write_chunk(self, spill: Spill) -> None:
        lines = "\n".join(sorted(self._held)).encode("utf-8")
        self._files.append(spill(gzip.compress(lines, mtime=0)))  # mtime 0: a re-run writes the same bytes
        self._spilled += len(self._held)
        self._held.clear()

    def to_stats(self) -> dict[str, Any]:
        """The discovery stats carrying the list (JSON): keys held, spilled files, spilled count."""
        return {
            _HELD: sorted(self._held),
            _FILES: [dataclasses.asdict(f) for f in self._files],
            _SPILLED: self._spilled,
        }


def _read_chunk(file: dict[str, Any]) -> list[str]:
    staged = StagedFile(**file)
    data = StagingArea.read_verified(staged.path, staged.digest())  # StagingCorruptError if replaced
    return gzip.decompress(data).decode("utf-8").split("\n")


def take_handoffs(stats: dict[str, Any]) -> Iterator[str]:
    """Every handed-off key in (merged) discovery ``stats``, held ones first, then each spilled
    chunk read back one at a time. The list's entries are removed from ``stats`` (they do not
    belong in the run summary); the spilled count stays. Keys may repeat."""
    held: list[str] = stats.pop(_HELD, None) or []  # popped now, not when first iterated
    files: list[dict[str, Any]] = stats.pop(_FILES, None) or []
    return _chain(held, files)


def _chain(held: list[str], files: list[dict[str, Any]]) -> Iterator[str]:
    yield from held
    for file in files:
        yield from _read_chunk(file)
