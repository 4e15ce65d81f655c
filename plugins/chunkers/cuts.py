"""Where a chunk ends: the cut choice over one run of blocks (:mod:`plugins.chunkers.pack`).

Cut classes, best first: block ends (tables: at most ``max_units`` rows); inside a block that
does not fit, delimiter ends; token ends (moved back to a character boundary, and to a nearby
hard boundary when there is one).

Which cut of a class is taken is *content-defined*, so that chunk boundaries resynchronise after
an edit. Of the candidates inside a window, from :data:`MIN_FILL` of the chunk's budget to the
budget (tables: also from :data:`MIN_ROWS_FILL` of ``max_units`` rows), the one whose last
:data:`_SCORE_BYTES` bytes hash highest wins; block ends before a heading come first and the
ends of heading blocks last. An edit moves the cuts of its own chunk: the next chunk's window,
seen from a cut that moved by less than the window's width, usually holds the same best
candidate, and from there on the chunks are the old ones. When no candidate lies inside the
window, the furthest one that fits is taken (the greedy rule of chunker version 1, which
``greedy`` keeps everywhere, for the edit-locality benchmark's peer); token ends are always the
furthest.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Sequence

from xxhash import xxh3_64_intdigest

from plugins.chunkers.span import Run

__all__ = ["MIN_FILL", "MIN_ROWS_FILL", "NO_LIMIT", "Cutter", "block_start"]

NO_LIMIT = 1 << 60
# The content-defined window starts at this share of a chunk's budget (tokens, and rows for
# tables). Lower: a wider window, so better resynchronisation, but smaller, more chunks (a chunk
# fills about (1 + MIN_FILL) / 2 of the window's span). Measured (``benchmarks/edit_locality.py``,
# 136 real documents, 512 tokens; chunk counts on the chunker benchmark's corpus, greedy: 2852):
# 0.5: mean 1.02 rewritten chunks per edit, 97.0% of edits <= 2, 3446 chunks; 0.7: 1.11, 95.3%,
# 3120; 0.8: 1.22, 93.6% (p95 3), 2992. 0.7 keeps the p95 at 2 for a tenth more chunks.
MIN_FILL = 0.7
# The same for a table's rows when the row cap binds: rows are what an edit of a table adds or
# removes, and a window of 7-10 rows resynchronised too seldom after one row was inserted.
MIN_ROWS_FILL = 0.5
# A cut's score hashes this many bytes before it: a change inside a paragraph leaves its end,
# and so its score, alone.
_SCORE_BYTES = 16
# Cuts whose last bytes are alike are ranked by a second hash: of the whole block at a block
# end, of this many bytes before a delimiter end.
_TIE_BYTES = 256
# Score classes (added above the 64-bit hash): a block end before a heading, any other block
# end, the end of a heading block (a heading belongs with what follows it).
_BEFORE_HEADING, _BLOCK, _AFTER_HEADING = 2 << 64, 1 << 64, 0


def block_start(block_ends: Sequence[int], block: int) -> int:
    """Byte offset where ``block`` starts: one past the previous block's joining ``"\\n"``."""
    return block_ends[block - 1] + 1 if block else 0


class Cutter:
    """Cut-point choice over a :class:`Run` (see the module docstring); ``greedy``: the furthest
    cut of every class (chunker version 1)."""

    def __init__(
        self,
        run: Run,
        block_ends: Sequence[int],
        delimiters: re.Pattern[bytes],
        delimiter_bytes: tuple[bytes, ...],
        max_units: int,
        isolate_split: bool,
        headings: Sequence[int] = (),
        greedy: bool = False,
    ) -> None:
        self.run = run
        self.block_ends = block_ends
        self.delimiters = delimiters
        self.delimiter_bytes = delimiter_bytes
        self.max_units = max_units
        self.isolate_split = isolate_split
        self.greedy = greedy
        # Fewer rows than this and the row cap does not open the window (tables only).
        self.min_units = max(1, int(max_units * MIN_ROWS_FILL)) if max_units < NO_LIMIT else NO_LIMIT
        self.headings = frozenset(headings)

    def cut(self, pos: int, max_tokens: int, block: int, section_end: int) -> tuple[int, int]:
        """The cut after ``pos`` (in ``block``) whose token position stays within ``max_tokens``,
        and the block the cut ends in (the cut is that block's end, or inside it). The cut stays
        before block ``section_end`` (the next section's first block, or the number of blocks)."""
        block_ends = self.block_ends
        last = min(section_end - 1, block + self.max_units - 1)
        if self.isolate_split and pos > block_start(block_ends, block):
            last = block  # the rest of a split row is not glued to the next rows
        # 1. Block ends: whole blocks (a block end fits when it lies before the end of the run's
        # token number ``max_tokens + 1``); ``j`` is the furthest that fits.
        j = bisect_left(block_ends, self.run.end_bound(max_tokens), block, last + 1) - 1
        if j >= block and block_ends[j] > pos:
            if not self.greedy and j > block and j != section_end - 1:
                j = self._block_choice(pos, max_tokens, block, j)
            return block_ends[j], j
        # 2. The block does not fit: delimiter ends, then token ends within it.
        bend = block_ends[block]
        if not self.greedy:
            sentence = self._content_sentence_cut(pos, bend, max_tokens)
            if sentence > pos:
                return sentence, block
        sentence = self._sentence_cut(pos, bend, max_tokens)
        if sentence > pos:
            return sentence, block
        return self._token_cut(pos, bend, max_tokens), block

    def _floor(self, pos: int, max_tokens: int) -> int:
        """Byte offset where the content-defined window of a chunk body from ``pos`` starts."""
        run = self.run
        first = run.tokens_before(pos)
        return run.offset_of(first + int((max_tokens - first) * MIN_FILL))

    def _block_choice(self, pos: int, max_tokens: int, block: int, j: int) -> int:
        """Of the block ends ``block..j`` (all fitting), the best-scored inside the window; ``j``
        when the window holds none (``j`` is then the only block end past the window's start
        that fits: the next block is too long)."""
        block_ends = self.block_ends
        first = bisect_left(block_ends, self._floor(pos, max_tokens), block, j + 1)
        first = min(first, block + self.min_units - 1)  # a table's row window
        if first >= j:
            return j
        data, headings = self.run.data, self.headings
        best, best_score = j, -1
        for i in range(first, j + 1):
            end = block_ends[i]
            score = xxh3_64_intdigest(data[max(end - _SCORE_BYTES, 0) : end])
            if headings:
                score += _AFTER_HEADING if i in headings else _BEFORE_HEADING if i + 1 in headings else _BLOCK
            if score > best_score or (score == best_score and self._block_tie(i, best)):
                best, best_score = i, score
        return best

    def _block_tie(self, i: int, best: int) -> bool:
        """Whether block ``i`` outranks ``best``, whose end scored the same: blocks whose ends look
        alike (generated records, "Image" lines) are told apart by their whole text."""
        data, block_ends = self.run.data, self.block_ends
        return xxh3_64_intdigest(data[block_start(block_ends, i) : block_ends[i]]) > xxh3_64_intdigest(
            data[block_start(block_ends, best) : block_ends[best]]
        )

    def _content_sentence_cut(self, pos: int, bound: int, max_tokens: int) -> int:
        """The best-scored delimiter-run end in the window of ``(pos, bound]`` within ``max_tokens``;
        ``pos`` when the window holds none."""
        run = self.run
        data = run.data
        end = min(bound, run.offset_of(max_tokens + 1))
        best, best_score = pos, -1
        for match in self.delimiters.finditer(data, max(pos, self._floor(pos, max_tokens)), end):
            cut = match.end()
            if cut <= pos:
                continue
            if run.tokens_before(cut) > max_tokens:
                break  # the ends only grow from here
            score = xxh3_64_intdigest(data[max(cut - _SCORE_BYTES, 0) : cut])
            if (
                score > best_score
                or (
                    score == best_score  # alike ends (generated lines): told apart by more of the text
                    and xxh3_64_intdigest(data[max(cut - _TIE_BYTES, 0) : cut])
                    > xxh3_64_intdigest(data[max(best - _TIE_BYTES, 0) : best])
                )
            ):
                best, best_score = cut, score
        return best

    def _sentence_cut(self, pos: int, bound: int, max_tokens: int) -> int:
        """End of the delimiter run holding the last delimiter in ``(pos, bound]`` within ``max_tokens``."""
        run = self.run
        data = run.data
        # Look no further than the token where the budget runs out: a huge block without
        # delimiters must not be scanned again for every chunk.
        end = min(bound, run.offset_of(max_tokens + 1))
        while end > pos:
            last = max(data.rfind(d, pos, end) for d in self.delimiter_bytes)
            if last < 0:
                return pos
            match = self.delimiters.match(data, last, end)
            cut = match.end() if match is not None else last
            if cut > pos and run.tokens_before(cut) <= max_tokens:
                return cut
            end = last  # a delimiter cut inside a multi-byte one: look further back
        return pos

    def _token_cut(self, pos: int, bound: int, max_tokens: int) -> int:
        run = self.run
        k = min(max_tokens, run.tokens_before(bound))
        cut = run.offset_of(k)
        while cut > pos and not run.is_char_start(cut):
            k -= 1  # a token that ends inside a multi-byte character
            cut = run.offset_of(k)
        if cut <= pos:
            # Not even one token fits the estimate: take the smallest step that makes progress.
            k = run.tokens_before(pos) + 1
            cut = min(run.offset_of(k), bound)
            while cut < bound and not run.is_char_start(cut):
                k += 1
                cut = min(run.offset_of(k), bound)
            return cut
        hard = run.last_hard_before(pos, cut, scan=8)
        return hard if hard > pos else cut
