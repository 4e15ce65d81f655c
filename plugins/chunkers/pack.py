"""Greedy packing of one run of blocks (paragraphs, or table rows) into token-bounded chunks.

The blocks are joined by ``"\\n"`` and the run is encoded once, whole (:class:`Run`); the byte
end of every token and the token position of every block end come from vectorised passes, so no
Python code runs per token or per short block, only per chunk.

A chunk is a contiguous byte range of the run, optionally preceded by a prefix (heading path,
table header) and starting with ``overlap`` tokens that end the previous chunk. Cut points, best
first:

1. block ends: as many whole blocks as fit (tables: at most ``max_units`` rows);
2. inside a block that does not fit: delimiter ends;
3. token ends, moved back to a character boundary (and to a nearby hard boundary when there
   is one, so the next chunk's count needs no re-encoding).

Candidates are chosen on the run's token positions, then the chunk's exact count (prefix and
edges included) is taken with :meth:`Run.count`; if it is over the limit the cut moves back.
So no chunk exceeds the limit, whatever the tokenizer does at the edges.
"""

from __future__ import annotations

import itertools
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import add
from typing import Any

from include.contract import Chunk, Position, chunk_id, text_hash, utf8_hash
from plugins.chunkers.options import delimiter_bytes, delimiter_pattern
from plugins.chunkers.span import Run

__all__ = ["NO_PREFIX", "ChunkSink", "Prefix", "pack_run"]

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
class ChunkSink:
    """Where :func:`pack_run` puts its chunks: the document's chunk list, numbered in order.

    Chunks are built once, with their final id and sequence (the position in ``chunks``), rather
    than as drafts copied into chunks afterwards: one object (and one garbage-collector-tracked
    allocation) less per chunk.
    """

    doc_id: str
    chunks: list[Chunk] = field(default_factory=list)

    def add(
        self,
        text: str,
        token_count: int,
        content_hash: str,
        heading_path: list[str],
        positions: list[Position],
        kind: str,
        metadata: dict[str, Any],
    ) -> None:
        seq = len(self.chunks)
        doc_id = self.doc_id
        # Positional arguments, in Chunk's field order: a keyword call costs a third more.
        self.chunks.append(
            Chunk(
                chunk_id(doc_id, seq),
                doc_id,
                seq,
                text,
                token_count,
                content_hash,
                heading_path,
                positions,
                kind,
                metadata,
            )
        )


NO_PREFIX = Prefix()  # what a chunk outside any heading starts with


def _positions(units_positions: Sequence[Sequence[Position]], first: int, last: int) -> list[Position]:
    if not units_positions:  # no block of the run has positions
        return []
    spans = [ps for ps in units_positions[first : last + 1] if ps]
    if len(spans) <= 1:
        return list(spans[0]) if spans else []  # one block's positions are distinct already
    seen: set[tuple[Any, ...]] = set()
    out: list[Position] = []
    for ps in spans:
        for p in ps:
            key = (p.page, p.bbox, p.sheet, p.row, p.line, p.slide, p.path)
            if key not in seen:
                seen.add(key)
                out.append(p)
    return out


def _block_start(block_ends: Sequence[int], block: int) -> int:
    """Byte offset where ``block`` starts: one past the previous block's joining ``"\\n"``."""
    return block_ends[block - 1] + 1 if block else 0


def _block_ends(texts: Sequence[str], ascii_only: bool) -> tuple[list[int], list[int] | None]:
    """Byte offset where every block of the run ends (its joining ``"\\n"``, or the run's end),
    and for a run that is not ASCII, how many characters the blocks up to each one hold (joining
    newlines not counted: block ``j`` ends at character ``chars[j] + j`` of the joined text);
    None for an ASCII run, whose characters are its bytes.

    A block starts one byte after the previous block's end. Only the blocks with non-ASCII text
    are encoded again, for their UTF-8 length, each into a short-lived buffer. Lists of ints,
    not numpy arrays: most runs have tens of blocks, where numpy's per-call cost is most of the
    work, and ``bisect`` reads a list without making an int per probe. (Mapping character
    offsets through the run's bytes with numpy was faster alone but made per-byte temporaries
    that pushed the tokenizer's tables out of the cache: the chunker was 4-7% slower end to end
    on the benchmark corpus.)
    """
    if ascii_only:
        return list(map(add, itertools.accumulate(map(len, texts)), itertools.count())), None
    chars = list(itertools.accumulate(map(len, texts)))
    sizes = [len(t) + 1 if t.isascii() else len(t.encode("utf-8")) + 1 for t in texts]  # with the newline
    return list(itertools.islice(itertools.accumulate(sizes, initial=-1), 1, None)), chars


class _Cutter:
    """Cut-point choice over a :class:`Run` (see the module docstring for the order)."""

    def __init__(
        self,
        run: Run,
        block_ends: Sequence[int],
        delimiters: re.Pattern[bytes],
        delimiter_bytes: tuple[bytes, ...],
        max_units: int,
        isolate_split: bool,
    ) -> None:
        self.run = run
        self.block_ends = block_ends
        self.delimiters = delimiters
        self.delimiter_bytes = delimiter_bytes
        self.max_units = max_units
        self.isolate_split = isolate_split

    def cut(self, pos: int, max_tokens: int, block: int, section_end: int) -> tuple[int, int]:
        """Furthest cut after ``pos`` (in ``block``) whose token position stays within ``max_tokens``,
        and the block the cut ends in (the cut is that block's end, or inside it). The cut stays
        before block ``section_end`` (the next section's first block, or the number of blocks)."""
        block_ends = self.block_ends
        last = min(section_end - 1, block + self.max_units - 1)
        if self.isolate_split and pos > _block_start(block_ends, block):
            last = block  # the rest of a split row is not glued to the next rows
        # 1. Block ends: as many whole blocks as fit (a block end fits when it lies before the
        # end of the run's token number ``max_tokens + 1``).
        j = bisect_left(block_ends, self.run.end_bound(max_tokens), block, last + 1) - 1
        if j >= block and block_ends[j] > pos:
            return block_ends[j], j
        # 2. The block does not fit: delimiter ends, then token ends within it.
        bend = block_ends[block]
        sentence = self._sentence_cut(pos, bend, max_tokens)
        if sentence > pos:
            return sentence, block
        return self._token_cut(pos, bend, max_tokens), block

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
    found = run.last_start_with_count(lo, end, want, 8 * want + 8)
    return best if found is None else found


def pack_run(
    texts: Sequence[str],
    unit_positions: Sequence[Sequence[Position]],
    prefix_at: Callable[[int, bool], Prefix],
    sink: ChunkSink,
    *,
    limit: int,
    overlap: int,
    delimiters: str,
    kind: str = "text",
    max_units: int = _NO_LIMIT,
    isolate_split: bool = False,
    breaks: Sequence[int] = (),
) -> None:
    """Chunk one run of blocks (``texts``), the blocks joined by ``"\\n"``, into ``sink``.

    ``unit_positions`` holds every block's positions (or is empty when none has any);
    ``prefix_at(block, at_block_start)`` gives the prefix of a chunk whose body starts in that
    block; ``delimiters`` is the option string (seed syntax); ``max_units`` caps blocks per chunk
    and ``isolate_split`` keeps the pieces of a split block out of other blocks' chunks (tables).
    ``breaks`` are the blocks (ascending) that open a new section. The chunks are exactly those of
    one run per section: every section is encoded on its own (:meth:`Run.of_sections`), no chunk
    spans a break and no overlap reaches back across one; what is shared is everything else a run
    costs (a heading-dense document has hundreds of sections).
    """
    if not texts:
        return
    joined = "\n".join(texts)
    # Block ends first, while the join has the texts in the cache: the tokenizer's tables
    # would push them out (measured: 1-2% of the chunker's time).
    block_ends, chars = _block_ends(texts, joined.isascii())
    if breaks:
        bounds = [0, *breaks, len(texts)]
        run = Run.of_sections(joined, ["\n".join(texts[a:b]) for a, b in itertools.pairwise(bounds)])
    else:
        run = Run(joined)
    cutter = _Cutter(
        run,
        block_ends,
        delimiter_pattern(delimiters),
        delimiter_bytes(delimiters),
        max_units,
        isolate_split,
    )
    size = len(run)
    token_ends = run.token_ends
    count, cut_at = run.count, cutter.cut
    pos = block = 0  # where the next chunk's body starts, and the block that byte is in
    at_block_start = True
    prev_start = prev_end = -1  # the previous chunk's run bytes (none yet)
    section, section_end = 0, len(texts)  # the current section: its number, the block after it
    data = run.data
    while pos < size:
        first_block = block
        if breaks:
            following = bisect_right(breaks, block)
            if following != section:  # a new section: nothing of the previous one overlaps into it
                section, prev_start, prev_end = following, -1, -1
            section_end = breaks[following] if following < len(breaks) else len(texts)
        prefix = prefix_at(block, at_block_start)
        skip_to = prefix.skip_to_unit
        folded = skip_to is not None
        if skip_to is not None:
            if skip_to >= section_end:  # headings with nothing after them: the path alone
                _emit(sink, run, prefix, size, size, size, kind, unit_positions, first_block, skip_to - 1)
                if skip_to >= len(texts):
                    break
                block, at_block_start = skip_to, True
                pos = _block_start(block_ends, block)
                continue
            block = skip_to
            pos = _block_start(block_ends, block)
        start = pos
        if overlap and prev_end >= 0 and not folded:
            start = _overlap_start(run, prev_start, prev_end, overlap)
        while True:
            start_tokens = bisect_right(token_ends, start)
            max_tokens = start_tokens + limit - prefix.tokens
            cut, last_block = cut_at(pos, max_tokens, block, section_end)
            while (exact := count(start, cut, prefix.text, prefix.tokens, start_tokens)) > limit:
                shrunk, shrunk_block = cut_at(pos, bisect_right(token_ends, cut) - (exact - limit), block, section_end)
                if shrunk >= cut:
                    break  # a single character over the limit: handled below
                cut, last_block = shrunk, shrunk_block
            if exact <= limit:
                break
            if start < pos:
                start = pos  # the overlap leaves no room for even one character: drop it
            elif prefix.text:
                prefix = Prefix(heading_path=prefix.heading_path)
            else:  # pragma: no cover - options validation keeps limit >= 32 tokens
                raise RuntimeError(f"cannot fit one character at byte {pos} into {limit} tokens")
        # (The usual body starts with a visible ASCII byte: no call needed to know it says something.)
        if folded or (cut > pos and 0x20 < data[pos] < 0x7F) or _says_something(run, pos, cut):
            if start == pos and not prefix.text and not folded:
                # The usual chunk (no prefix, no overlap): its text is the run's bytes as they are.
                body = memoryview(data)[start:cut]  # no copy: hashed in place
                # A slice of the joined text where its offsets are known (3-6x faster than decoding):
                # any chunk of an ASCII run, whole blocks of another.
                if chars is None:
                    text = joined[start:cut]
                elif at_block_start and cut == block_ends[last_block]:
                    text = joined[chars[block - 1] + block if block else 0 : chars[last_block] + last_block]
                else:
                    text = str(body, "utf-8")
                sink.add(
                    text,
                    exact,
                    utf8_hash(body),
                    list(prefix.heading_path) if prefix.heading_path else [],
                    _positions(unit_positions, first_block, last_block),
                    kind,
                    {},
                )
            else:
                if start < pos and unit_positions:  # the overlap may reach back into earlier blocks
                    first_block = min(first_block, bisect_left(block_ends, start))
                overlap_end = prev_end if prev_end >= 0 and start < pos else start
                _emit(sink, run, prefix, start, overlap_end, cut, kind, unit_positions, first_block, last_block, exact)
            prev_start, prev_end = start, cut
        if cut == block_ends[last_block]:
            # The "\n" joining two blocks belongs to neither chunk.
            pos, block, at_block_start = cut + 1, last_block + 1, True
        else:
            pos, block, at_block_start = cut, last_block, False


def _says_something(run: Run, start: int, end: int) -> bool:
    """False for an empty or whitespace-only body (the usual body starts with a visible ASCII byte)."""
    if end <= start:
        return False
    if 0x20 < run.data[start] < 0x7F:
        return True
    body = run.data[start:end]
    return bool(body.strip()) and (body.isascii() or not run.decode(start, end).isspace())


def _emit(
    sink: ChunkSink,
    run: Run,
    prefix: Prefix,
    start: int,
    overlap_end: int,
    end: int,
    kind: str,
    unit_positions: Sequence[Sequence[Position]],
    first: int,
    last: int,
    exact: int | None = None,
) -> None:
    """Add a chunk with a prefix, an overlap or no body (the usual chunk is added by pack_run)."""
    meta: dict[str, Any] = {}
    if end > start:
        text = prefix.text + run.decode(start, end)
        body = memoryview(run.data)[start:end]
        digest = utf8_hash(prefix.text.encode("utf-8") + body if prefix.text else body)
    else:  # a prefix-only chunk (a heading with nothing under it): no trailing newline
        text = prefix.text.rstrip("\n")
        digest = text_hash(text)
        exact = None
    if exact is None:
        exact = run.encode_len(text)
    if prefix.text:
        meta["prefix_chars"] = min(len(prefix.text), len(text))
    if start < overlap_end:  # the previous chunk's tail, repeated
        meta["overlap_chars"] = len(run.decode(start, overlap_end))
        meta["overlap_tokens"] = run.count(start, overlap_end)
    if prefix.folded:
        meta["heading_folded"] = prefix.folded
    positions = _positions(unit_positions, first, last)
    sink.add(text, exact, digest, list(prefix.heading_path), positions, kind, meta)
