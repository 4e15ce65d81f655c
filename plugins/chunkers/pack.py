"""Packing of one run of blocks (paragraphs, or table rows) into token-bounded chunks.

The blocks are joined by ``"\\n"`` and the run is encoded once, whole (:class:`Run`); the byte
end of every token and the token position of every block end come from vectorised passes, so no
Python code runs per token or per short block, only per chunk.

A chunk is a contiguous byte range of the run, optionally preceded by a prefix (heading path,
table header) and starting with ``overlap`` tokens that end the previous chunk. Cut points, best
first:

1. block ends: whole blocks (tables: at most ``max_units`` rows);
2. inside a block that does not fit: delimiter ends;
3. token ends, moved back to a character boundary (and to a nearby hard boundary when there
   is one, so the next chunk's count needs no re-encoding).

Which cut of a class is taken is content-defined, so that chunk boundaries resynchronise after
an edit (:mod:`plugins.chunkers.cuts`). When the whole rest of a section fits, it is one chunk.

Candidates are chosen on the run's token positions, then the chunk's exact count (prefix and
edges included) is taken with :meth:`Run.count`; if it is over the limit the cut moves back.
So no chunk exceeds the limit, whatever the tokenizer does at the edges.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import add
from typing import Any

from include.contract import Chunk, Position, content_chunk_id, text_hash, utf8_hash
from plugins.chunkers.cuts import NO_LIMIT, Cutter, block_start
from plugins.chunkers.options import delimiter_bytes, delimiter_pattern
from plugins.chunkers.span import Run

__all__ = ["NO_PREFIX", "ChunkSink", "Prefix", "pack_run"]


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

    Chunks are built once, with their final id and sequence (the position in ``chunks``), so no
    draft object has to be made and copied for every chunk. Ids follow content
    (:func:`~include.contract.content_chunk_id`); ``legacy`` restores the rules of chunker
    version 1 (positional ids ``<doc_id>-<seq:05d>``, furthest cuts), for the edit-locality
    benchmark's "today's greedy chunker" row only.
    """

    doc_id: str
    chunks: list[Chunk] = field(default_factory=list)
    legacy: bool = False
    # How many chunks of each text the document has had so far (the occurrence of a repeat).
    _seen: dict[str, int] = field(default_factory=dict)

    def add(
        self,
        text: str,
        token_count: int,
        text_hash: str,
        heading_path: list[str],
        positions: list[Position],
        kind: str,
        metadata: dict[str, Any],
    ) -> None:
        seq = len(self.chunks)
        if self.legacy:
            chunk_id = f"{self.doc_id}-{seq:05d}"
        else:
            occurrence = self._seen.get(text_hash, 0)
            self._seen[text_hash] = occurrence + 1
            chunk_id = content_chunk_id(self.doc_id, text_hash, occurrence)
        self.chunks.append(
            Chunk(
                chunk_id=chunk_id,
                doc_id=self.doc_id,
                sequence=seq,
                text=text,
                token_count=token_count,
                text_hash=text_hash,
                heading_path=heading_path,
                positions=positions,
                kind=kind,
                metadata=metadata,
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


def _block_ends(texts: Sequence[str], ascii_only: bool) -> tuple[list[int], list[int] | None]:
    """Byte offset where every block of the run ends (its joining ``"\\n"``, or the run's end),
    and for a run that is not ASCII, how many characters the blocks up to each one hold (joining
    newlines not counted: block ``j`` ends at character ``chars[j] + j`` of the joined text);
    None for an ASCII run, whose characters are its bytes.

    A block starts one byte after the previous block's end. Only the blocks with non-ASCII text
    are encoded again, for their UTF-8 length. Lists of ints rather than numpy arrays: most runs
    have tens of blocks, too few for numpy to pay off, and ``bisect`` reads a list directly.
    (Mapping offsets through the run's bytes with numpy makes per-byte temporaries that push the
    tokenizer's tables out of the CPU cache, which costs more than it saves.)
    """
    if ascii_only:
        return list(map(add, itertools.accumulate(map(len, texts)), itertools.count())), None
    chars = list(itertools.accumulate(map(len, texts)))
    sizes = [len(t) + 1 if t.isascii() else len(t.encode("utf-8")) + 1 for t in texts]  # with the newline
    return list(itertools.islice(itertools.accumulate(sizes, initial=-1), 1, None)), chars


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
    max_units: int = NO_LIMIT,
    isolate_split: bool = False,
    breaks: Sequence[int] = (),
    headings: Sequence[int] = (),
) -> None:
    """Chunk one run of blocks (``texts``), the blocks joined by ``"\\n"``, into ``sink``.

    ``unit_positions`` holds every block's positions (or is empty when none has any);
    ``prefix_at(block, at_block_start)`` gives the prefix of a chunk whose body starts in that
    block; ``delimiters`` is the option string (seed syntax); ``max_units`` caps blocks per chunk
    and ``isolate_split`` keeps the pieces of a split block out of other blocks' chunks (tables).
    ``breaks`` are the blocks (ascending) that open a new section, ``headings`` the heading
    blocks (they steer the content-defined cuts: see the module docstring). The chunks are exactly those of
    one run per section: every section is encoded on its own (:meth:`Run.of_sections`), no chunk
    spans a break and no overlap reaches back across one; what is shared is everything else a run
    costs (a heading-dense document has hundreds of sections).
    """
    if texts:
        packer = _Packer(texts, unit_positions, sink, kind, breaks)
        cutter = Cutter(
            packer.run,
            packer.block_ends,
            delimiter_pattern(delimiters),
            delimiter_bytes(delimiters),
            max_units,
            isolate_split,
            headings,
            sink.legacy,
        )
        packer.pack(prefix_at, cutter, limit, overlap)


def _encode(joined: str, texts: Sequence[str], breaks: Sequence[int]) -> Run:
    """The run, encoded whole, or section by section when there are breaks."""
    if not breaks:
        return Run(joined)
    bounds = [0, *breaks, len(texts)]
    return Run.of_sections(joined, ["\n".join(texts[a:b]) for a, b in itertools.pairwise(bounds)])


class _Packer:
    """One run being packed: its text, bytes and block layout, and the sink its chunks go to.

    :meth:`pack` walks the run chunk by chunk; every chunk, whatever it holds (a body, a prefix,
    an overlap, or a heading path alone), is built by :meth:`_add`.
    """

    __slots__ = ("block_ends", "breaks", "chars", "joined", "kind", "run", "sink", "unit_positions")

    def __init__(
        self,
        texts: Sequence[str],
        unit_positions: Sequence[Sequence[Position]],
        sink: ChunkSink,
        kind: str,
        breaks: Sequence[int],
    ) -> None:
        self.joined = joined = "\n".join(texts)
        # Block ends before the encode, while the texts are still in the CPU cache: the
        # tokenizer's tables push them out.
        self.block_ends, self.chars = _block_ends(texts, joined.isascii())
        self.run = _encode(joined, texts, breaks)
        self.unit_positions = unit_positions
        self.sink = sink
        self.kind = kind
        self.breaks = breaks

    def pack(self, prefix_at: Callable[[int, bool], Prefix], cutter: Cutter, limit: int, overlap: int) -> None:
        """Cut the whole run into chunks of at most ``limit`` tokens, in order."""
        block_ends, size = self.block_ends, len(self.run)
        pos = block = 0  # where the next chunk's body starts, and the block that byte is in
        at_block_start = True
        previous: tuple[int, int] | None = None  # the last chunk's bytes, while in its section
        section = 0
        while pos < size:
            first_block = block
            in_section, section_end = self._section(block)
            if in_section != section:  # nothing of the previous section overlaps into a new one
                section, previous = in_section, None
            prefix = prefix_at(block, at_block_start)
            folded = prefix.skip_to_unit is not None
            if prefix.skip_to_unit is not None:  # headings folded into the prefix: the body follows them
                block = prefix.skip_to_unit
                pos = block_start(block_ends, block)
                at_block_start = True
                if block >= section_end:  # nothing follows them in the section: the path alone
                    self._add(prefix, size, size, size, size, first_block, block - 1, None, None)
                    continue
            start = pos
            if overlap and previous is not None and not folded:
                start = _overlap_start(self.run, previous[0], previous[1], overlap)
            prefix, start, cut, last_block, tokens = self._fit(cutter, prefix, start, pos, block, section_end, limit)
            if folded or _says_something(self.run, pos, cut):
                overlap_end = previous[1] if previous is not None and start < pos else start
                whole = at_block_start and start == pos and cut == block_ends[last_block]
                self._add(
                    prefix, start, pos, overlap_end, cut, first_block, last_block, tokens, block if whole else None
                )
                previous = (start, cut)
            if cut == block_ends[last_block]:  # the "\n" joining two blocks belongs to neither chunk
                pos, block, at_block_start = cut + 1, last_block + 1, True
            else:
                pos, block, at_block_start = cut, last_block, False

    def _section(self, block: int) -> tuple[int, int]:
        """The section ``block`` is in: its number, and the first block after it."""
        breaks = self.breaks
        if not breaks:
            return 0, len(self.block_ends)
        following = bisect_right(breaks, block)
        return following, breaks[following] if following < len(breaks) else len(self.block_ends)

    def _fit(
        self, cutter: Cutter, prefix: Prefix, start: int, pos: int, block: int, section_end: int, limit: int
    ) -> tuple[Prefix, int, int, int, int]:
        """The chunk with the longest body from ``pos`` (overlap from ``start``) within ``limit``:
        its prefix, start, cut, the block the cut is in, and its exact token count.

        When not even one more character fits, the overlap is dropped first, then the prefix text
        (the heading path stays in the chunk's fields).
        """
        while True:
            found = self._longest_cut(cutter, prefix, start, pos, block, section_end, limit)
            if found is not None:
                return prefix, start, *found
            if start < pos:
                start = pos
            elif prefix.text:
                prefix = Prefix(heading_path=prefix.heading_path)
            else:  # pragma: no cover - options validation keeps limit >= 32 tokens
                raise RuntimeError(f"cannot fit one character at byte {pos} into {limit} tokens")

    def _longest_cut(
        self, cutter: Cutter, prefix: Prefix, start: int, pos: int, block: int, section_end: int, limit: int
    ) -> tuple[int, int, int] | None:
        """Cut, its block and the exact count of the longest body that fits; None if none does.

        The run's own token positions propose a cut; the exact count of the chunk (prefix and
        edges included) either confirms it or says by how much to move back.
        """
        run = self.run
        start_tokens = run.tokens_before(start)
        cut, last_block = cutter.cut(pos, start_tokens + limit - prefix.tokens, block, section_end)
        while (exact := run.count(start, cut, prefix.text, prefix.tokens, start_tokens)) > limit:
            shorter, shorter_block = cutter.cut(pos, run.tokens_before(cut) - (exact - limit), block, section_end)
            if shorter >= cut:
                return None  # one character alone is over the limit
            cut, last_block = shorter, shorter_block
        return cut, last_block, exact

    def _add(
        self,
        prefix: Prefix,
        start: int,
        body_start: int,
        overlap_end: int,
        end: int,
        first_block: int,
        last_block: int,
        tokens: int | None,
        whole_from: int | None,
    ) -> None:
        """Add the chunk ``prefix.text + run[start:end]`` to the sink.

        ``run[start:overlap_end]`` repeats the previous chunk's tail, new text starts at
        ``body_start``; ``whole_from`` is the body's first block when the body is whole blocks
        (from that block's start to a block end), else None. ``tokens`` is the exact count; None
        for a chunk with no body (a heading with nothing under it: its path alone, without the
        trailing newline), which is counted here.
        """
        run = self.run
        if end > start:
            body = memoryview(run.data)[start:end]  # hashed in place, not copied
            text = self._text(start, end, whole_from, last_block)
            if prefix.text:
                text = prefix.text + text
                digest = utf8_hash(prefix.text.encode("utf-8") + body)
            else:
                digest = utf8_hash(body)
        else:
            text = prefix.text.rstrip("\n")
            digest = text_hash(text)
            tokens = None
        metadata: dict[str, Any] = {}
        if prefix.text:
            metadata["prefix_chars"] = min(len(prefix.text), len(text))
        if start < overlap_end:
            metadata["overlap_chars"] = len(run.decode(start, overlap_end))
            metadata["overlap_tokens"] = run.count(start, overlap_end)
        if prefix.folded:
            metadata["heading_folded"] = prefix.folded
        if start < body_start and self.unit_positions:  # the overlap may reach back into earlier blocks
            first_block = min(first_block, bisect_left(self.block_ends, start))
        self.sink.add(
            text,
            run.encode_len(text) if tokens is None else tokens,
            digest,
            list(prefix.heading_path),
            _positions(self.unit_positions, first_block, last_block),
            self.kind,
            metadata,
        )

    def _text(self, start: int, end: int, whole_from: int | None, last_block: int) -> str:
        """``run[start:end]`` as text.

        Slicing the joined text is cheaper than decoding the bytes again, and possible wherever
        the character offsets are known: any range of an ASCII run (characters are bytes), and
        whole blocks of another (``chars`` counts the characters up to every block end).
        """
        chars = self.chars
        if chars is None:
            return self.joined[start:end]
        if whole_from is not None:
            first_char = chars[whole_from - 1] + whole_from if whole_from else 0
            return self.joined[first_char : chars[last_block] + last_block]
        return self.run.decode(start, end)


def _says_something(run: Run, start: int, end: int) -> bool:
    """False for an empty or whitespace-only body."""
    if end <= start:
        return False
    if 0x20 < run.data[start] < 0x7F:  # the usual body starts with a visible ASCII character
        return True
    body = run.data[start:end]
    return bool(body.strip()) and (body.isascii() or not run.decode(start, end).isspace())
