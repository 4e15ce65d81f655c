"""Greedy packing of one run of units (blocks, or table rows) into token-bounded chunks.

A run is the units' texts joined by ``"\\n"`` and encoded once (:class:`EncodedText`). A chunk is
a contiguous byte range of the run, optionally preceded by a prefix (heading path, table header)
and starting with ``overlap`` tokens that end the previous chunk. Cut points, best first:

1. unit ends: as many whole units as fit (tables: at most ``max_units`` rows);
2. delimiter ends inside the unit that does not fit (found lazily, only for such units);
3. token ends, moved back to a character boundary (and to a nearby hard boundary when there
   is one, so the next chunk's count needs no re-encoding).

Candidates are chosen on the run's token positions, then the chunk's exact count is taken with
:meth:`EncodedText.count`; if it is over the limit the cut moves back. So no chunk exceeds the
limit, whatever the tokenizer does at the edges.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from include.contract import Position
from plugins.chunkers.span import EncodedText

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


class _Run:
    def __init__(
        self,
        texts: Sequence[str],
        limit: int,
        delimiters: re.Pattern[bytes],
        max_units: int,
    ) -> None:
        self.et = et = EncodedText("\n".join(texts))
        self.limit = limit
        self.delimiters = delimiters
        self.max_units = max_units
        starts, ends = [], []
        off = 0
        for t in texts:
            size = len(t) if t.isascii() else len(t.encode("utf-8"))
            starts.append(off)
            ends.append(off + size)
            off += size + 1
        self.starts, self.ends = starts, ends
        self.end_tb = [et.tokens_before(e) for e in ends]
        self._sentences: dict[int, tuple[list[int], list[int]]] = {}

    def unit_at(self, pos: int) -> int:
        return bisect_right(self.starts, pos) - 1

    def sentences(self, unit: int) -> tuple[list[int], list[int]]:
        """Delimiter ends inside ``unit`` (byte offsets) and their token positions."""
        cached = self._sentences.get(unit)
        if cached is None:
            start, end = self.starts[unit], self.ends[unit]
            offs = [m.end() for m in self.delimiters.finditer(self.et.data, start, end)]
            offs = [o for o in offs if o < end]
            cached = self._sentences[unit] = (offs, [self.et.tokens_before(o) for o in offs])
        return cached

    def cut(self, pos: int, unit: int, max_tokens: int) -> int:
        """Furthest cut after ``pos`` whose approximate count stays within ``max_tokens``."""
        last_unit = min(len(self.ends) - 1, unit + self.max_units - 1)
        i = min(bisect_right(self.end_tb, max_tokens) - 1, last_unit)
        if i >= 0 and self.ends[i] > pos:
            return self.ends[i]
        offs, tbs = self.sentences(unit)
        j = bisect_right(tbs, max_tokens) - 1
        if j >= 0 and offs[j] > pos:
            return offs[j]
        return self._token_cut(pos, max_tokens)

    def _token_cut(self, pos: int, max_tokens: int) -> int:
        et = self.et
        k = min(max_tokens, et.token_total)
        while k > 0 and not et.is_char_start(et.ends[k - 1]):
            k -= 1  # a token that ends inside a multi-byte character
        cut = et.ends[k - 1] if k > 0 else 0
        if cut <= pos:
            # Not even one token fits the estimate: take the smallest step that makes progress.
            k = et.tokens_before(pos) + 1
            while k < et.token_total and not et.is_char_start(et.ends[k - 1]):
                k += 1
            return et.ends[k - 1]
        hard = et.last_hard_before(pos, cut, scan=8)
        return hard if hard > pos else cut


def _overlap_start(et: EncodedText, lo: int, end: int, want: int) -> int:
    """Start of the last ``want`` tokens of ``et[lo:end]`` (exact count, or the largest below)."""
    base = et.tokens_before(end)
    first = et.tokens_before(lo)
    k = max(base - want, first)
    best = end
    for _ in range(6):
        start = et.token_start(k)
        while not et.is_char_start(start) and k < base:
            k += 1
            start = et.token_start(k)
        start = max(start, lo)
        got = et.count(start, end)
        if got == want:
            return start
        if got < want:
            best = min(best, start)
            if k <= first:
                break
            k -= want - got
            k = max(k, first)
        else:
            k += got - want
            if k >= base:
                break
    return best


def pack_run(
    texts: Sequence[str],
    unit_positions: Sequence[Sequence[Position]],
    prefix_at: Callable[[int, bool], Prefix],
    *,
    limit: int,
    overlap: int,
    delimiters: re.Pattern[bytes],
    kind: str = "text",
    max_units: int = _NO_LIMIT,
) -> list[Draft]:
    """Chunk one run; ``prefix_at(unit, at_unit_start)`` gives the prefix for a chunk starting there."""
    if not texts:
        return []
    run = _Run(texts, limit, delimiters, max_units)
    et = run.et
    size = len(et)
    drafts: list[Draft] = []
    pos = 0
    prev: tuple[int, int] | None = None  # (start, end) of the previous chunk's run bytes
    while pos < size:
        unit = first_unit = run.unit_at(pos)
        prefix = prefix_at(unit, pos == run.starts[unit])
        folded = prefix.skip_to_unit is not None
        if folded:
            assert prefix.skip_to_unit is not None
            pos = run.starts[prefix.skip_to_unit] if prefix.skip_to_unit < len(texts) else size
            if pos >= size:  # headings with nothing after them: the path alone is the chunk
                drafts.append(_draft(et, prefix, size, size, size, kind, unit_positions, run, unit, folded))
                break
            unit = prefix.skip_to_unit
        start = pos
        if overlap and prev is not None and not folded:
            start = _overlap_start(et, prev[0], prev[1], overlap)
        while True:
            max_tokens = et.tokens_before(start) + limit - prefix.tokens
            cut = run.cut(pos, unit, max_tokens)
            while (exact := et.count(start, cut, prefix.text, prefix.tokens)) > limit:
                shrunk = run.cut(pos, unit, et.tokens_before(cut) - (exact - limit))
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
        body = et.decode(pos, cut)
        if body.strip() or folded:
            first_unit = min(first_unit, run.unit_at(start))
            drafts.append(_draft(et, prefix, start, pos, cut, kind, unit_positions, run, first_unit, folded, exact))
            prev = (start, cut)
        pos = cut
        end_unit = run.unit_at(cut - 1) if cut > 0 else 0
        if cut == run.ends[end_unit] and cut < size:
            pos = cut + 1  # the "\n" joining two units belongs to neither chunk
    return drafts


def _draft(
    et: EncodedText,
    prefix: Prefix,
    start: int,
    body: int,
    end: int,
    kind: str,
    unit_positions: Sequence[Sequence[Position]],
    run: _Run,
    first: int,
    folded: bool,
    exact: int | None = None,
) -> Draft:
    text = prefix.text + et.decode(start, end)
    if not text.strip():
        text = prefix.text
    if end <= start:  # prefix-only chunk: drop the trailing newline of the prefix
        text = prefix.text.rstrip("\n")
        exact = None
    if exact is None:
        exact = len(et._enc.encode_ordinary(text))
    meta: dict[str, Any] = {}
    if prefix.text:
        meta["prefix_chars"] = len(prefix.text) if end > start else len(text)
    if start < body:
        meta["overlap_chars"] = len(et.decode(start, body)) - 1 if _joined(run, body) else len(et.decode(start, body))
        meta["overlap_tokens"] = et.count(start, body - 1 if _joined(run, body) else body)
    if folded:
        meta["heading_folded"] = True
    last = run.unit_at(end - 1) if end > start else len(run.starts) - 1
    return Draft(text, exact, list(prefix.heading_path), _positions(unit_positions, first, last), kind, meta)


def _joined(run: _Run, body: int) -> bool:
    """True when ``body`` starts a unit, i.e. the byte before it is the joining newline."""
    i = bisect_left(run.starts, body)
    return i < len(run.starts) and run.starts[i] == body and body > 0
