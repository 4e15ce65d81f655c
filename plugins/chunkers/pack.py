"""Greedy packing of one run of units (blocks, or table rows) into token-bounded chunks.

A run is the units' texts joined by ``"\\n"``, each encoded once (:class:`Run`). A chunk is
a contiguous byte range of the run, optionally preceded by a prefix (heading path, table header)
and starting with ``overlap`` tokens that end the previous chunk. Cut points, best first:

1. unit ends: as many whole units as fit (tables: at most ``max_units`` rows);
2. delimiter ends inside the unit that does not fit (found lazily, only for such units);
3. token ends, moved back to a character boundary (and to a nearby hard boundary when there
   is one, so the next chunk's count needs no re-encoding).

Candidates are chosen on the run's token positions, then the chunk's exact count is taken with
:meth:`Run.count`; if it is over the limit the cut moves back. So no chunk exceeds the
limit, whatever the tokenizer does at the edges.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from include.contract import Position
from plugins.chunkers.options import delimiter_pattern, delimiter_text_pattern
from plugins.chunkers.span import Run

__all__ = ["Draft", "Prefix", "pack_run"]

_NO_LIMIT = 1 << 60


@dataclass(slots=True)
class Prefix:
    """What a chunk starting at a unit begins with."""

    text: str = ""  # ends with "\n" when not empty
    tokens: int = 0
    heading_path: list[str] = field(default_factory=list)
    # Heading units folded into the prefix: the body starts at this unit instead (or None).
    skip_to_unit: int | None = None
    folded: int = 0  # how many heading units were folded


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


class _Cutter:
    """Cut-point choice over a :class:`Run` of pieces of blocks.

    Best first: the furthest block end that fits (tables: at most ``max_units`` rows); else the
    furthest piece end inside the current block (blocks longer than the limit in bytes were split
    at delimiters before encoding); else a delimiter end inside the current piece; else a token end.
    """

    def __init__(
        self,
        run: Run,
        block_of: list[int],
        last_piece: list[int],
        delimiters: re.Pattern[bytes],
        max_units: int,
        isolate_split: bool = False,
    ) -> None:
        self.run = run
        self.isolate_split = isolate_split
        self.first_piece = [0] + [u + 1 for u in last_piece[:-1]]
        self.block_of = block_of
        self.last_piece = last_piece
        self.delimiters = delimiters
        self.max_units = max_units
        self.end_tb = [c + n for c, n in zip(run.cum, run.ntok, strict=True)]
        self.block_end_tb = [self.end_tb[u] for u in last_piece]
        self.block_end = [run.ends[u] for u in last_piece]

    def cut(self, pos: int, unit: int, max_tokens: int) -> int:
        """Furthest cut after ``pos`` whose approximate count stays within ``max_tokens``."""
        block = self.block_of[unit]
        last_block = min(len(self.block_end) - 1, block + self.max_units - 1)
        if self.isolate_split and pos > self.run.starts[self.first_piece[block]]:
            last_block = block  # the rest of a split row is not glued to the next rows
        i = min(bisect_right(self.block_end_tb, max_tokens) - 1, last_block)
        if i >= 0 and self.block_end[i] > pos:
            return self.block_end[i]
        run = self.run
        # The block does not fit: the furthest piece end, then a delimiter inside the next piece.
        j = bisect_right(self.end_tb, max_tokens, unit, self.last_piece[block] + 1) - 1
        spill = j + 1 if j >= unit else unit
        sentence = self._sentence_cut(pos, spill, max_tokens)
        if sentence > pos:
            return sentence
        if j >= unit and run.ends[j] > pos:
            return run.ends[j]
        return self._token_cut(pos, spill, max_tokens)

    def _sentence_cut(self, pos: int, unit: int, max_tokens: int) -> int:
        """Furthest delimiter end in ``unit`` within ``max_tokens`` (binary search, lazy counts)."""
        run = self.run
        offs = [m.end() for m in self.delimiters.finditer(run.data, max(pos, run.starts[unit]), run.ends[unit])]
        lo, hi = 0, len(offs)
        while lo < hi:
            mid = (lo + hi) // 2
            if run.tokens_before(offs[mid]) <= max_tokens:
                lo = mid + 1
            else:
                hi = mid
        return offs[lo - 1] if lo > 0 else pos

    def _token_cut(self, pos: int, unit: int, max_tokens: int) -> int:
        run = self.run
        base = run.starts[unit]
        ends = run.unit_token_ends(unit)
        k = min(max_tokens - run.cum[unit], len(ends))
        while k > 0 and not run.is_char_start(base + ends[k - 1]):
            k -= 1  # a token that ends inside a multi-byte character
        cut = base + ends[k - 1] if k > 0 else base
        if cut <= pos:
            # Not even one token fits the estimate: take the smallest step that makes progress.
            k = bisect_right(ends, pos - base) + 1
            while k < len(ends) and not run.is_char_start(base + ends[k - 1]):
                k += 1
            return base + ends[min(k, len(ends)) - 1]
        hard = run.last_hard_before(pos, cut, scan=8)
        return hard if hard > pos else cut


def _split_blocks(
    texts: Sequence[str], limit: int, pieces_re: re.Pattern[str]
) -> tuple[list[str], list[bool], list[int], list[int]]:
    """Pieces to encode: blocks that may hold more than ``limit`` tokens are cut at delimiter ends.

    A block of at most ``limit`` bytes holds at most ``limit`` tokens and stays whole. Longer
    blocks become pieces of about ``limit / 2`` bytes, each ending at a delimiter: few enough that
    per-piece bookkeeping stays cheap, fine enough that most cuts need no look inside a piece.
    """
    target = max(64, limit // 2)
    pieces: list[str] = []
    joined: list[bool] = []
    block_of: list[int] = []
    last_piece: list[int] = []
    for b, text in enumerate(texts):
        if len(text) * (1 if text.isascii() else 3) > limit:
            prev = 0
            for m in pieces_re.finditer(text):
                end = m.end()
                if end - prev >= target and end < len(text):
                    pieces.append(text[prev:end])
                    joined.append(False)
                    block_of.append(b)
                    prev = end
            text = text[prev:]
        pieces.append(text)
        joined.append(True)
        block_of.append(b)
        last_piece.append(len(pieces) - 1)
    if joined:
        joined[-1] = False
    return pieces, joined, block_of, last_piece


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
    start = best
    for _ in range(8):  # character by character, still inside the previous chunk
        start -= 1
        while start > lo and not run.is_char_start(start):
            start -= 1
        if start < lo:
            break
        got = run.count(start, end)
        if got == want:
            return start
        if got > want:
            break
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
    block; ``delimiters`` is the option string (seed syntax).
    """
    if not texts:
        return []
    pieces, joined, block_of, last_piece = _split_blocks(texts, limit, delimiter_text_pattern(delimiters))
    run = Run(pieces, joined)
    cutter = _Cutter(run, block_of, last_piece, delimiter_pattern(delimiters), max_units, isolate_split)
    first_piece = cutter.first_piece
    size = len(run)
    drafts: list[Draft] = []
    pos = 0
    prev: tuple[int, int] | None = None  # (start, end) of the previous chunk's run bytes
    while pos < size:
        unit = run.unit_at(pos)
        block = first_block = block_of[unit]
        prefix = prefix_at(block, pos == run.starts[first_piece[block]])
        folded = prefix.skip_to_unit is not None
        if prefix.skip_to_unit is not None:
            if prefix.skip_to_unit >= len(texts):  # headings with nothing after them: the path alone
                drafts.append(_draft(run, prefix, size, size, size, kind, unit_positions, first_block, None))
                break
            unit = first_piece[prefix.skip_to_unit]
            pos = run.starts[unit]
        start = pos
        if overlap and prev is not None and not folded:
            start = _overlap_start(run, prev[0], prev[1], overlap)
        while True:
            max_tokens = run.tokens_before(start) + limit - prefix.tokens
            cut = cutter.cut(pos, unit, max_tokens)
            while (exact := run.count(start, cut, prefix.text, prefix.tokens)) > limit:
                shrunk = cutter.cut(pos, unit, run.tokens_before(cut) - (exact - limit))
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
        if run.decode(pos, cut).strip() or folded:
            first_block = min(first_block, block_of[run.unit_at(start)])
            overlap_end = prev[1] if prev is not None and start < pos else start
            drafts.append(
                _draft(run, prefix, start, overlap_end, cut, kind, unit_positions, first_block, exact, block_of)
            )
            prev = (start, cut)
        pos = cut
        end_unit = run.unit_at(cut - 1) if cut > 0 else 0
        if cut == run.ends[end_unit] and joined[end_unit]:
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
    exact: int | None,
    block_of: Sequence[int] | None = None,
) -> Draft:
    meta: dict[str, Any] = {}
    if end > start:
        text = prefix.text + run.decode(start, end)
        last = block_of[run.unit_at(end - 1)] if block_of is not None else first
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
