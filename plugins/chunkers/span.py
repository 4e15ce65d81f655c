"""Exact token counts of slices of one run of text, the run encoded once.

A chunker wants the token count of many candidate slices of the same run of blocks joined by
``"\n"``. Encoding each slice again costs as much as the whole job; slicing the run's own token
sequence is free but not exact: BPE is not slice-stable (``"。中文"`` is one pre-token, cutting
it changes its tokens; ``".\n"`` is one token where ``"."`` and ``"\n"`` were two), and the
chunk's own encoding is what the embedding model will see.

The way out is *hard boundaries*: byte offsets where cl100k_base's pre-tokenizer always splits
and where neither side's pre-tokens depend on the other, so ``enc(a + b) == enc(a) + enc(b)``.
Between two hard boundaries a slice of the run's token sequence is exactly the slice's own
encoding; only the few bytes from a chunk's edge to the nearest hard boundary are encoded again,
and those short windows (``".\n"``, ``"。\n"``) repeat so often they are cached.
The pre-tokenizer is cl100k's regex (``tokenizer._PAT_STR``); these rules are proved against it
and checked by a property test (``tests/chunkers/test_span.py``):

(a) ``\\n`` | a character that is surely not whitespace: every alternative that can hold a newline
    stops before a non-whitespace character, and ``\\s++$`` at the end of the left part matches
    exactly what ``\\s*[\\r\\n]`` matched in the whole.
(b) letter | surely-not-letter: ``\\p{L}++`` stops there either way, and the regex has no
    look-behind, so the right part is scanned from the same position.
(c) punctuation | ASCII digit, space or tab: the punctuation run ``[^\\s\\p{L}\\p{N}]++[\\r\\n]*+``
    stops there and no letter follows that could make it a ``?\\p{L}++`` prefix.

The rules look only at the bytes on either side, so a hard boundary of the run is one of every
slice of it that contains both sides. "Surely" means the byte tests below only accept characters
whose class no Unicode version changes (ASCII, CJK Unified Ideographs U+4E00-U+9FA5, common
CJK/fullwidth punctuation); anything else is treated as "not a hard boundary", which only costs
a little re-encoding.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from functools import cache, lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from plugins.chunkers.tokenizer import get_encoding, token_byte_lengths

__all__ = ["Run", "is_hard_boundary"]

# How many tokens to look at for a hard boundary before re-encoding a longer window instead.
_SCAN = 48
# Edge windows up to this many characters are counted through the process-wide cache.
_WINDOW_CACHE_CHARS = 24
_NO_SPECIALS: frozenset[str] = frozenset()

_ASCII_LETTER = frozenset(range(0x41, 0x5B)) | frozenset(range(0x61, 0x7B))
_ASCII_DIGIT = frozenset(range(0x30, 0x3A))
# Bytes that may start Unicode whitespace (White_Space): C2 (U+0085, U+00A0), E1 (U+1680),
# E2 (U+2000-U+205F), E3 (U+3000); ASCII controls and space; DEL to be safe.
_ASCII_NOT_WS = frozenset(range(0x21, 0x7F))
_ASCII_PUNCT = _ASCII_NOT_WS - _ASCII_LETTER - _ASCII_DIGIT


def _offset_dtype(size: int) -> type[np.unsignedinteger[Any]] | type[np.signedinteger[Any]]:
    """The narrowest type that holds byte offsets up to ``size``: most runs are under 64 KiB,
    and the chunker's memory traffic competes with the tokenizer's tables for the cache."""
    return np.uint16 if size < 2**16 else np.int32 if size < 2**31 else np.int64


@lru_cache(maxsize=50_000)
def _window_tokens(text: str) -> int:
    """Token count of a short edge window (".", "。\\n", "A > B\\n"): the same few recur in every
    document, so one cache serves all runs of the process (the count depends on the text only)."""
    return len(get_encoding().encode_ordinary(text))


@cache
def _lengths_array() -> npt.NDArray[np.uint8]:
    return np.array(token_byte_lengths(), dtype=np.uint8)  # 100 KB (longest token: 128 bytes)


def _codepoint3(data: bytes, start: int) -> int:
    """Code point of the 3-byte UTF-8 sequence at ``start`` (-1 if there is none)."""
    if start < 0 or start + 3 > len(data):
        return -1
    b0 = data[start]
    if b0 & 0xF0 != 0xE0:
        return -1
    return ((b0 & 0x0F) << 12) | ((data[start + 1] & 0x3F) << 6) | (data[start + 2] & 0x3F)


def _is_cjk_punct(cp: int) -> bool:
    # Ideographic punctuation and brackets, fullwidth ASCII punctuation/digits, general punctuation.
    return (
        0x3000 <= cp <= 0x3003
        or 0x3008 <= cp <= 0x3011
        or 0x3014 <= cp <= 0x301F
        or 0xFF01 <= cp <= 0xFF20
        or 0xFF3B <= cp <= 0xFF40
        or 0xFF5B <= cp <= 0xFF65
        or 0x2010 <= cp <= 0x2027
        or 0x2030 <= cp <= 0x205E
    )


def _starts_not_ws(data: bytes, off: int) -> bool:
    b = data[off]
    if b < 0x80:
        return b in _ASCII_NOT_WS
    if b in (0xC2, 0xE1, 0xE2):
        return False
    if b == 0xE3:
        return data[off + 1 : off + 3] != b"\x80\x80"  # U+3000 IDEOGRAPHIC SPACE
    return b >= 0xC3  # a lead byte (not a continuation byte)


def _starts_not_letter(data: bytes, off: int) -> bool:
    b = data[off]
    if b < 0x80:
        return b not in _ASCII_LETTER
    return _is_cjk_punct(_codepoint3(data, off))


def is_hard_boundary(data: bytes, off: int) -> bool:
    """True if cl100k_base's tokens of ``data`` split at ``off`` into those of both sides."""
    if off <= 0 or off >= len(data):
        return True
    nxt = data[off]
    if nxt & 0xC0 == 0x80:  # inside a character
        return False
    prev = data[off - 1]
    if prev == 0x0A:
        return _starts_not_ws(data, off)
    if prev < 0x80:
        if prev in _ASCII_LETTER:
            return _starts_not_letter(data, off)
        if prev in _ASCII_PUNCT:
            return nxt in _ASCII_DIGIT or nxt == 0x20 or nxt == 0x09
        return False
    cp = _codepoint3(data, off - 3)
    if 0x4E00 <= cp <= 0x9FA5:
        return _starts_not_letter(data, off)
    if _is_cjk_punct(cp) and not (0xFF10 <= cp <= 0xFF19) and cp != 0x3000:
        return nxt in _ASCII_DIGIT or nxt == 0x20 or nxt == 0x09
    return False


class Run:
    """One run of text (blocks joined by ``"\\n"``), encoded once, whole.

    Offsets are UTF-8 byte offsets into ``data``. ``token_ends[k]`` is the byte offset where the
    run's token ``k`` ends, so token positions of the run's own encoding are exact; a chunk's
    exact count (:meth:`count`) is the difference of two such positions at hard boundaries
    inside the chunk plus the short edge windows encoded again.
    """

    __slots__ = ("_enc", "data", "ntokens", "token_ends")

    def __init__(self, text: str) -> None:
        enc = self._enc = get_encoding()
        # One encode of the whole run, straight into a numpy buffer (no Python int per token),
        # with no special tokens allowed: encode_ordinary (special-token text stays plain text).
        tokens = np.frombuffer(enc._core_bpe.encode_to_tiktoken_buffer(text, _NO_SPECIALS), dtype=np.uint32)
        self.ntokens = len(tokens)
        self.data = text.encode("utf-8")  # a copy of the UTF-8 tiktoken left cached in the str
        # A memoryview bisects and indexes like a list of ints, without one Python int per token.
        self.token_ends: Sequence[int] = _lengths_array().take(tokens).cumsum(dtype=_offset_dtype(len(self.data))).data

    @classmethod
    def of_sections(cls, text: str, sections: Sequence[str]) -> Run:
        """A run of ``sections`` joined by ``"\n"`` (``text``), every section encoded on its own.

        Its token positions are those of one run per section: the joining newlines belong to no
        token (the byte is counted into the end of the next section's first token, so
        ``offset_of`` that token is the newline itself). A chunk inside one section therefore
        gets the same cuts and counts as in a run of its own: hard boundaries depend only on the
        bytes on either side, so one inside a section is one of the section alone too. Chunks
        must not span two sections (their count would miss the newline's merges).
        """
        run = cls.__new__(cls)
        run._enc = get_encoding()
        core = run._enc._core_bpe
        parts = [np.frombuffer(core.encode_to_tiktoken_buffer(s, _NO_SPECIALS), dtype=np.uint32) for s in sections]
        tokens = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)
        run.ntokens = len(tokens)
        run.data = text.encode("utf-8")
        lengths = _lengths_array().take(tokens).astype(_offset_dtype(len(run.data)))
        # The first token of every section after the first also covers the newline before it
        # (an empty section passes its newline on to the next one; trailing ones belong to none).
        firsts = np.cumsum([len(p) for p in parts[:-1]], dtype=np.intp)
        np.add.at(lengths, firsts[firsts < run.ntokens], 1)
        run.token_ends = lengths.cumsum(out=lengths).data
        return run

    def __len__(self) -> int:
        return len(self.data)

    # ------------------------------------------------------------------ positions

    def tokens_before(self, off: int) -> int:
        """How many of the run's tokens end at or before byte ``off``."""
        return bisect_right(self.token_ends, off)

    def offset_of(self, position: int) -> int:
        """Byte offset where the run's token ``position`` starts (inverse of tokens_before)."""
        if position <= 0:
            return 0
        if position >= self.ntokens:
            return len(self.data)
        return self.token_ends[position - 1]

    def end_bound(self, max_tokens: int) -> int:
        """Smallest byte offset ``e`` with ``tokens_before(e) > max_tokens`` (past the end if none).

        An offset before it holds at most ``max_tokens`` of the run's tokens.
        """
        if max_tokens < 0:
            return 0
        if max_tokens >= self.ntokens:
            return len(self.data) + 1
        return self.token_ends[max_tokens]

    def is_char_start(self, off: int) -> bool:
        return off <= 0 or off >= len(self.data) or self.data[off] & 0xC0 != 0x80

    def decode(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8")

    # ------------------------------------------------------------------ hard boundaries

    def last_hard_before(self, start: int, end: int, scan: int = _SCAN) -> int:
        """Last hard boundary at a token end in ``(start, end)`` (up to ``scan`` tokens back), else ``start``."""
        found = self._last_hard(end - 1, start + 1, scan)
        return found[0] if found is not None else start

    def _first_hard(self, start: int, end: int, has_prefix: bool) -> tuple[int, int] | None:
        """First hard boundary of the run at or after the chunk start: (offset, token position).

        The chunk start itself qualifies only if it is a hard boundary of the run and, after a
        prefix (which ends with a newline), does not start with whitespace.
        """
        data = self.data
        if is_hard_boundary(data, start) and (not has_prefix or _starts_not_ws(data, start)):
            return start, self.tokens_before(start)
        token_ends = self.token_ends
        first = bisect_right(token_ends, start)
        for k in range(first, min(first + _SCAN, self.ntokens)):
            off = token_ends[k]
            if off > end:
                return None
            if is_hard_boundary(data, off):
                return off, k + 1
        return None

    def _last_hard(self, end: int, floor: int, scan: int = _SCAN) -> tuple[int, int] | None:
        """Last hard boundary of the run at or before ``end`` and not before ``floor``."""
        data = self.data
        if end < len(data) and data[end] == 0x0A and end - 2 >= floor:
            # The usual chunk end, before a newline, without a scan: after an ASCII letter the
            # end itself is hard (rule b); after one ASCII punctuation mark that follows a letter
            # ("word." before the newline) the letter's end is, leaving a one-token window.
            last = data[end - 1]
            if last in _ASCII_LETTER:
                return end, bisect_right(self.token_ends, end)
            if last in _ASCII_PUNCT and data[end - 2] in _ASCII_LETTER:
                return end - 1, bisect_right(self.token_ends, end - 1)
        if is_hard_boundary(data, end):
            return (end, self.tokens_before(end)) if end >= floor else None
        token_ends = self.token_ends
        last_token = bisect_right(token_ends, end) - 1  # the last token ending at or before ``end``
        for k in range(last_token, max(last_token - scan, -1), -1):
            off = token_ends[k]
            if off < floor:
                return None
            if is_hard_boundary(data, off):
                return off, k + 1
        return None

    # ------------------------------------------------------------------ exact counts

    def encode_len(self, text: str) -> int:
        """``len(encode_ordinary(text))``; short texts (edge windows, prefixes) from the cache."""
        if len(text) > _WINDOW_CACHE_CHARS:
            return len(self._enc.encode_ordinary(text))
        return _window_tokens(text)

    def count(
        self, start: int, end: int, prefix: str = "", prefix_tokens: int | None = None, start_tokens: int | None = None
    ) -> int:
        """Exact ``len(encode_ordinary(prefix + run[start:end]))``; ``prefix`` ends with ``"\\n"``.

        ``start_tokens`` is ``tokens_before(start)`` when the caller has it already.
        """
        if prefix_tokens is None:
            prefix_tokens = self.encode_len(prefix)
        if start >= end:
            return prefix_tokens
        data = self.data
        if 0x20 < data[start] < 0x7F and (start == 0 or data[start - 1] == 0x0A):
            # The usual chunk start (a block's first visible ASCII character): a hard boundary
            # by rule (a), also after a prefix; the general test below gives the same answer.
            head: tuple[int, int] | None = (
                start,
                bisect_right(self.token_ends, start) if start_tokens is None else start_tokens,
            )
        else:
            head = self._first_hard(start, end, bool(prefix))
        if head is not None:
            hoff, hk = head
            tail = self._last_hard(end, hoff)
            if tail is not None:
                toff, tk = tail
                # enc(prefix + run[start:end]) splits at both hard boundaries, and between them
                # the chunk's tokens are the run's own.
                total = tk - hk
                total += self.encode_len(prefix + self.decode(start, hoff)) if start < hoff else prefix_tokens
                if toff < end:
                    # One ASCII byte is one token (every byte is in the vocabulary): the usual
                    # tail, the "." of "word.", needs no encoding.
                    total += 1 if toff + 1 == end and data[toff] < 0x80 else self.encode_len(self.decode(toff, end))
                return total
        return self.encode_len(prefix + self.decode(start, end))

    def last_start_with_count(self, lo: int, end: int, want: int, steps: int) -> int | None:
        """The latest character start ``s`` in ``[lo, end)``, at most ``steps`` characters back
        from ``end``, with ``count(s, end) == want``; None if there is none.

        Equivalent to calling :meth:`count` for every candidate (counts are not monotonic in the
        start, so every one is tried), but the tail is found once and each candidate only encodes
        the few bytes up to the nearest hard boundary after it.
        """
        data = self.data
        tail = self._last_hard(end, lo)
        # Without a hard boundary to anchor on, every candidate is "inside the tail window".
        hi, hi_k = toff, tk = tail or (lo, 0)
        tail_tokens = self.encode_len(self.decode(toff, end)) if tail else 0
        start = end
        for _ in range(steps):
            start -= 1
            while start > lo and data[start] & 0xC0 == 0x80:
                start -= 1  # inside a multi-byte character
            if start < lo:
                return None
            if start >= toff:  # inside the tail window: count it whole
                got = self.encode_len(self.decode(start, end))
            else:
                if is_hard_boundary(data, start):
                    hi, hi_k = start, bisect_right(self.token_ends, start)
                got = self.encode_len(self.decode(start, hi)) + (tk - hi_k) + tail_tokens
            if got == want:
                return start
        return None
