"""Greedy packing of one run of blocks (paragraphs, or table rows) into token-bounded chunks.

Layout: short consecutive blocks are grouped into units of about ``2 * limit`` bytes (at least
2 KiB, joined by ``"\\n"``), blocks longer than ``limit`` bytes are cut at delimiter ends into
pieces of about ``limit`` bytes (at least 1 KiB); each unit is encoded once (:class:`Run`).
Few, mid-sized units keep both the tokenizer calls and the per-unit bookkeeping cheap; the byte
end of every token comes from one vectorised pass over the run (:class:`Run`), so no Python code
runs per token or per short block.

A chunk is a contiguous byte range of the run, optionally preceded by a prefix (heading path,
table header) and starting with ``overlap`` tokens that end the previous chunk. Cut points, best
first:

1. block ends: as many whole blocks as fit (tables: at most ``max_units`` rows);
2. inside a block that does not fit: piece ends, then delimiter ends;
3. token ends, moved back to a character boundary (and to a nearby hard boundary when there
   is one, so the next chunk's count needs no re-encoding).

Candidates are chosen on approximate token positions, then the chunk's exact count is taken with
:meth:`Run.count`; if it is over the limit the cut moves back. So no chunk exceeds the limit,
whatever the tokenizer does at the edges.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, compress
from operator import add
from typing import Any

from include.contract import Position
from plugins.chunkers.options import delimiter_pattern, delimiter_text_pattern
from plugins.chunkers.span import Run

__all__ = ["Draft", "Prefix", "pack_run"]

_NO_LIMIT = 1 << 60


@dataclass(slots=True)
class Prefix:
    """What a chunk whose body starts in a given block begins with."""

    text: str = ""  # ends with "\n" when not empty
    tokens: int = 0
    heading_path: list[str] = field(default_factory=list)
    # Heading blocks folded into the prefix: the body starts at this block instead (or None).
    skip_to_unit: int | None = None
    folded: int = 0  # how many heading blocks were folded


@dataclass(slots=True)
class Draft:
    """A chunk before it gets its id: text, exact count and provenance."""

    text: str
    token_count: int
    heading_path: list[str]
    positions: list[Position]
    kind: str
    metadata: dict[str, Any]


def _positions(units_positions: Sequence[Sequence[Position]], first: int, last: int) -> list[Position]:
    seen: set[tuple[Any, ...]] = set()
    out: list[Position] = []
    for i in range(first, last + 1):
        for p in units_positions[i]:
            key = (p.page, p.bbox, p.sheet, p.row, p.line, p.slide, p.path)
            if key not in seen:
                seen.add(key)
                out.append(p)
    return out


@dataclass(slots=True)
class _Layout:
    units: list[str]
    joined: list[bool]  # unit followed by a joining "\n" (False: the next piece continues it)
    block_starts: list[int]  # byte offsets of the blocks in the run ("\n".join(texts))
    block_ends: list[int]


def _layout(texts: Sequence[str], limit: int, pieces_re: re.Pattern[str]) -> _Layout:
    """Group short blocks into units of at most ``group_target`` bytes, cut long ones into pieces.

    Greedy, in order: a group takes blocks while its bytes (joins included) stay within the
    target. The group ends are found by bisection over the blocks' end offsets, so the work
    per block is done by C loops (sizes, sums), and Python runs once per unit.
    """
    group_target = max(2048, 2 * limit)
    piece_target = max(1024, limit)
    sizes = [len(t) if t.isascii() else len(t.encode("utf-8")) for t in texts]
    n = len(sizes)
    starts = list(map(add, accumulate(sizes, initial=0), range(n)))  # + one join byte per block
    ends = list(map(add, starts, sizes))
    lay = _Layout([], [], starts, ends)
    units, joined = lay.units, lay.joined
    # Blocks longer than the limit may hold more tokens than a chunk: pieces at delimiter ends.
    long = list(compress(range(n), map(limit.__lt__, sizes)))
    g = 0
    for stop in (*long, n):
        while g < stop:
            nxt = bisect_right(ends, starts[g] + group_target, g + 1, stop)
            units.append("\n".join(texts[g:nxt]))
            joined.append(True)
            g = nxt
        if stop == n:
            break
        text = texts[stop]
        prev = 0
        # One search per piece (not one match per line): the first delimiter run that ends
        # at least piece_target characters after the piece start.
        while (m := pieces_re.search(text, prev + piece_target - 1)) is not None and m.end() < len(text):
            units.append(text[prev : m.end()])
            joined.append(False)
            prev = m.end()
        units.append(text[prev:])
        joined.append(True)
        g = stop + 1
    if joined:
        joined[-1] = False
    return lay


class _Cutter:
    """Cut-point choice over a :class:`Run` (see the module docstring for the order)."""

    def __init__(
        self,
        run: Run,
        block_starts: list[int],
        block_ends: list[int],
        delimiters: re.Pattern[bytes],
        max_units: int,
        isolate_split: bool,
    ) -> None:
        self.run = run
        self.block_starts = block_starts
        self.block_ends = block_ends
        self.delimiters = delimiters
        self.max_units = max_units
        self.isolate_split = isolate_split
        self.end_tb = [c + n for c, n in zip(run.cum, run.ntok, strict=True)]

    def cut(self, pos: int, max_tokens: int) -> int:
        """Furthest cut after ``pos`` whose approximate count stays within ``max_tokens``."""
        run, block_ends = self.run, self.block_ends
        block = bisect_right(self.block_starts, pos) - 1
        cap = block_ends[min(len(block_ends) - 1, block + self.max_units - 1)]
        if self.isolate_split and pos > self.block_starts[block]:
            cap = block_ends[block]  # the rest of a split row is not glued to the next rows
        j = bisect_right(self.end_tb, max_tokens) - 1  # the last unit that fits whole
        # 1. Block ends: up to the end of unit j, or inside the unit after it.
        bound = min(run.ends[j], cap) if j >= 0 else 0
        i = bisect_right(block_ends, bound) - 1
        best = block_ends[i] if i >= 0 else -1
        spill = j + 1
        if spill < len(run.starts) and run.starts[spill] < cap:
            lo = bisect_right(block_ends, run.starts[spill])
            hi = bisect_right(block_ends, min(run.ends[spill], cap))
            k = self._furthest(block_ends, lo, hi, max_tokens)
            if k >= 0:
                best = max(best, block_ends[k])
        if best > pos:
            return best
        # 2. The block does not fit: piece ends, then delimiter ends, then token ends within it.
        bend = block_ends[block]
        unit = run.unit_at(pos)
        if j >= unit and pos < run.ends[j] < bend:
            piece_end, spill = run.ends[j], j + 1
        else:
            piece_end, spill = -1, unit
        sentence = self._sentence_cut(pos, spill, bend, max_tokens)
        if sentence > pos:
            return sentence
        if piece_end > pos:
            return piece_end
        return self._token_cut(pos, spill, max_tokens)

    def _furthest(self, offs: Sequence[int], lo: int, hi: int, max_tokens: int) -> int:
        """Index of the furthest offset in ``offs[lo:hi]`` within ``max_tokens`` (-1 if none)."""
        tokens_before = self.run.tokens_before
        while lo < hi:
            mid = (lo + hi) // 2
            if tokens_before(offs[mid]) <= max_tokens:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    def _sentence_cut(self, pos: int, unit: int, bound: int, max_tokens: int) -> int:
        """Furthest delimiter end in ``unit`` (not past ``bound``) within ``max_tokens``."""
        run = self.run
        # Look no further than the token where the budget runs out: a huge block without
        # delimiters must not be scanned again for every chunk.
        end = min(run.ends[unit], bound, run.offset_of(max_tokens + 1))
        offs = [m.end() for m in self.delimiters.finditer(run.data, max(pos, run.starts[unit]), end)]
        k = self._furthest(offs, 0, len(offs), max_tokens)
        return offs[k] if k >= 0 else pos

    def _token_cut(self, pos: int, unit: int, max_tokens: int) -> int:
        run = self.run
        base = run.starts[unit]
        ends = run.unit_ends(unit)  # offsets in the run
        k = min(max_tokens - run.cum[unit], len(ends))
        while k > 0 and not run.is_char_start(ends[k - 1]):
            k -= 1  # a token that ends inside a multi-byte character
        cut = ends[k - 1] if k > 0 else base
        if cut <= pos:
            # Not even one token fits the estimate: take the smallest step that makes progress.
            k = bisect_right(ends, pos) + 1
            while k < len(ends) and not run.is_char_start(ends[k - 1]):
                k += 1
            return ends[min(k, len(ends)) - 1]
        hard = run.last_hard_before(pos, cut, scan=8)
        return hard if hard > pos else cut


def _overlap_start(run: Run, lo: int, end: int, want: int) -> int:
    """Start of the last ``want`` tokens of ``run[lo:end]`` (exact count, or the largest below).

    Token starts are tried first; a multi-character token can hide the exact start, so the
    characters just before the best start found are tried too.
    """
    base = run.tokens_before(end)
    first = run.tokens_before(lo)
    k = max(base - want, first)
    best, best_got = end, 0
    for _ in range(6):
        start = max(run.offset_of(k), lo)
        while not run.is_char_start(start) and k < base:
            k += 1
            start = max(run.offset_of(k), lo)
        if start >= end:
            break
        got = run.count(start, end)
        if got == want:
            return start
        if got < want:
            if got > best_got:
                best, best_got = start, got
            if k <= first:
                break
            k = max(k - (want - got), first)
        else:
            k += got - want
            if k >= base:
                break
    # Character by character from the end, still inside the previous chunk. Token counts are not
    # monotonic in the start (a longer tail can merge into fewer tokens), so an overshoot does not
    # end the search; the window is the one within which an exact overlap is promised.
    start = end
    for _ in range(8 * want + 8):
        start -= 1
        while start > lo and not run.is_char_start(start):
            start -= 1
        if start < lo:
            break
        if run.count(start, end) == want:
            return start
    return best


def pack_run(
    texts: Sequence[str],
    unit_positions: Sequence[Sequence[Position]],
    prefix_at: Callable[[int, bool], Prefix],
    *,
    limit: int,
    overlap: int,
    delimiters: str,
    kind: str = "text",
    max_units: int = _NO_LIMIT,
    isolate_split: bool = False,
) -> list[Draft]:
    """Chunk one run of blocks (``texts``), the blocks joined by ``"\\n"``.

    ``prefix_at(block, at_block_start)`` gives the prefix of a chunk whose body starts in that
    block; ``delimiters`` is the option string (seed syntax); ``max_units`` caps blocks per chunk
    and ``isolate_split`` keeps the pieces of a split block out of other blocks' chunks (tables).
    """
    if not texts:
        return []
    lay = _layout(texts, limit, delimiter_text_pattern(delimiters))
    run = Run(lay.units, lay.joined)
    block_starts, block_ends = lay.block_starts, lay.block_ends
    cutter = _Cutter(run, block_starts, block_ends, delimiter_pattern(delimiters), max_units, isolate_split)
    size = len(run)
    drafts: list[Draft] = []
    pos = 0
    prev: tuple[int, int] | None = None  # (start, end) of the previous chunk's run bytes
    while pos < size:
        block = first_block = bisect_right(block_starts, pos) - 1
        prefix = prefix_at(block, pos == block_starts[block])
        folded = prefix.skip_to_unit is not None
        if prefix.skip_to_unit is not None:
            if prefix.skip_to_unit >= len(texts):  # headings with nothing after them: the path alone
                drafts.append(_draft(run, prefix, size, size, size, kind, unit_positions, first_block, -1, None))
                break
            pos = block_starts[prefix.skip_to_unit]
        start = pos
        if overlap and prev is not None and not folded:
            start = _overlap_start(run, prev[0], prev[1], overlap)
        while True:
            max_tokens = run.tokens_before(start) + limit - prefix.tokens
            cut = cutter.cut(pos, max_tokens)
            while (exact := run.count(start, cut, prefix.text, prefix.tokens)) > limit:
                shrunk = cutter.cut(pos, run.tokens_before(cut) - (exact - limit))
                if shrunk >= cut:
                    break  # a single character over the limit: handled below
                cut = shrunk
            if exact <= limit:
                break
            if start < pos:
                start = pos  # the overlap leaves no room for even one character: drop it
            elif prefix.text:
                prefix = Prefix(heading_path=prefix.heading_path)
            else:  # pragma: no cover - options validation keeps limit >= 32 tokens
                raise RuntimeError(f"cannot fit one character at byte {pos} into {limit} tokens")
        body = run.data[pos:cut]
        if folded or (body.strip() and (body.isascii() or not run.decode(pos, cut).isspace())):
            first_block = min(first_block, bisect_right(block_starts, start) - 1)
            last_block = bisect_right(block_starts, cut - 1) - 1
            overlap_end = prev[1] if prev is not None and start < pos else start
            drafts.append(
                _draft(run, prefix, start, overlap_end, cut, kind, unit_positions, first_block, last_block, exact)
            )
            prev = (start, cut)
        pos = cut
        i = bisect_left(block_ends, cut)
        if i < len(block_ends) and block_ends[i] == cut and cut < size:
            pos = cut + 1  # the "\n" joining two blocks belongs to neither chunk
    return drafts


def _draft(
    run: Run,
    prefix: Prefix,
    start: int,
    overlap_end: int,
    end: int,
    kind: str,
    unit_positions: Sequence[Sequence[Position]],
    first: int,
    last: int,
    exact: int | None,
) -> Draft:
    meta: dict[str, Any] = {}
    if end > start:
        text = prefix.text + run.decode(start, end)
    else:  # a prefix-only chunk (a heading with nothing under it): no trailing newline
        text = prefix.text.rstrip("\n")
        exact = None
        last = len(unit_positions) - 1
    if exact is None:
        exact = run.encode_len(text)
    if prefix.text:
        meta["prefix_chars"] = min(len(prefix.text), len(text))
    if start < overlap_end:  # the previous chunk's tail, repeated
        meta["overlap_chars"] = len(run.decode(start, overlap_end))
        meta["overlap_tokens"] = run.count(start, overlap_end)
    if prefix.folded:
        meta["heading_folded"] = prefix.folded
    return Draft(text, exact, list(prefix.heading_path), _positions(unit_positions, first, last), kind, meta)
