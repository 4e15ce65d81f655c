"""Exact token counts of slices of a run of texts, each text encoded once.

A chunker wants the token count of many candidate slices of the same run of blocks joined by
``"\n"``. Encoding each slice again costs as much as the whole job; adding up the blocks' own
token lists is free but not exact: BPE is not slice-stable (``"。中文"`` is one pre-token, cutting
it changes its tokens; ``".\n"`` is one token where ``"."`` and ``"\n"`` were two), and the
chunk's own encoding is what the embedding model will see.

The way out is *hard boundaries*: byte offsets where cl100k_base's pre-tokenizer always splits
and where neither side's pre-tokens depend on the other, so ``enc(a + b) == enc(a) + enc(b)``.
Between two hard boundaries a slice of a block's token list is exactly the slice's own encoding;
only the few bytes from a chunk's edge (or a block junction) to the nearest hard boundary are
encoded again, and those short windows (``".\n"``, ``"。\n"``) repeat so often they are cached.
The pre-tokenizer is cl100k's regex (``tokenizer._PAT_STR``); these rules are proved against it
and checked by a property test (``tests/chunkers/test_span.py``):

(a) ``\\n`` | a character that is surely not whitespace: every alternative that can hold a newline
    stops before a non-whitespace character, and ``\\s++$`` at the end of the left part matches
    exactly what ``\\s*[\\r\\n]`` matched in the whole.
(b) letter | surely-not-letter: ``\\p{L}++`` stops there either way, and the regex has no
    look-behind, so the right part is scanned from the same position.
(c) punctuation | ASCII digit, space or tab: the punctuation run ``[^\\s\\p{L}\\p{N}]++[\\r\\n]*+``
    stops there and no letter follows that could make it a ``?\\p{L}++`` prefix.

"Surely" means the byte tests below only accept characters whose class no Unicode version
changes (ASCII, CJK Unified Ideographs U+4E00-U+9FA5, common CJK/fullwidth punctuation);
anything else is treated as "not a hard boundary", which only costs a little re-encoding.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Sequence
from functools import cache

import numpy as np
import numpy.typing as npt

from plugins.chunkers.tokenizer import get_encoding, token_byte_lengths

__all__ = ["Run", "is_hard_boundary"]

_NONE = -1

# How many tokens to look at for a hard boundary before re-encoding a longer window instead.
_SCAN = 48
_WINDOW_CACHE_CHARS = 24
_WINDOW_CACHE_SIZE = 50_000

_ASCII_LETTER = frozenset(range(0x41, 0x5B)) | frozenset(range(0x61, 0x7B))
_ASCII_DIGIT = frozenset(range(0x30, 0x3A))
# Bytes that may start Unicode whitespace (White_Space): C2 (U+0085, U+00A0), E1 (U+1680),
# E2 (U+2000-U+205F), E3 (U+3000); ASCII controls and space; DEL to be safe.
_ASCII_NOT_WS = frozenset(range(0x21, 0x7F))
_ASCII_PUNCT = _ASCII_NOT_WS - _ASCII_LETTER - _ASCII_DIGIT


_EMPTY = np.zeros(0, dtype=np.uint32)


@cache
def _lengths_array() -> npt.NDArray[np.uint8]:
    return np.array(token_byte_lengths(), dtype=np.uint8)  # 100 KB (longest token: 128 bytes)


@cache
def _newline_token() -> npt.NDArray[np.uint32]:
    (token,) = get_encoding().encode_ordinary("\n")
    return np.array([token], dtype=np.uint32)


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
    """Texts ("units": blocks or pieces of blocks) joined by ``"\\n"``; each unit encoded once.

    Offsets are UTF-8 byte offsets into ``data`` (the joined run). Token positions used to pick
    cut points are approximate (the units' own tokens plus one per join); :meth:`count` is exact.

    For exact counts every unit gets, once, its first and last hard boundary (``head``/``tail``,
    usually its own start and end) and the exact token count of the run from its start up to
    each of them (``exact_head``/``exact_tail``). A chunk's count is then a difference of two
    such prefix sums plus two short edge windows encoded again.
    """

    __slots__ = (
        "_enc",
        "_window_cache",
        "cum",
        "data",
        "ends",
        "exact_head",
        "exact_tail",
        "head",
        "head_k",
        "ntok",
        "starts",
        "tail",
        "tail_k",
        "token_ends",
    )

    def __init__(self, texts: Sequence[str], joined: Sequence[bool] | None = None) -> None:
        """``joined[u]``: unit ``u`` is followed by a joining ``"\\n"`` (default: all but the last)
        rather than continuing directly (pieces of one split block)."""
        enc = self._enc = get_encoding()
        # Token arrays straight from tiktoken's buffer: no Python int per token. encode() with
        # nothing allowed or disallowed is encode_ordinary (special-token text stays plain text).
        encode = enc.encode_to_numpy
        tokens = [encode(t, disallowed_special=()) for t in texts]
        self.ntok = ntok = list(map(len, tokens))
        if joined is None:
            joined = [True] * len(texts)
        # tiktoken left each text's UTF-8 cached in the str, so these encodes are copies.
        encoded = [t.encode("utf-8") for t in texts]
        parts: list[bytes] = []
        seq: list[npt.NDArray[np.uint32]] = []
        starts: list[int] = []
        ends: list[int] = []
        cum: list[int] = []
        off = tok = 0
        newline = _newline_token()
        for b, toks, n, nl in zip(encoded, tokens, ntok, joined, strict=True):
            size = len(b)
            parts.append(b)
            seq.append(toks)
            starts.append(off)
            ends.append(off + size)
            cum.append(tok)
            off += size
            tok += n
            if nl:
                parts.append(b"\n")
                seq.append(newline)
                off += 1
                tok += 1
        if parts and joined[-1]:
            parts.pop()
            seq.pop()
        self.data = data = b"".join(parts)
        self.starts, self.ends, self.cum = starts, ends, cum
        # Byte end of every token of the approximate sequence (units' tokens, one per join), in
        # one vectorised pass; a memoryview bisects and indexes like a list of ints.
        lengths = _lengths_array().take(np.concatenate(seq) if seq else _EMPTY).astype(np.int64)
        self.token_ends: Sequence[int] = memoryview(np.cumsum(lengths, out=lengths))
        self._window_cache: dict[str, int] = {}
        self._prefix_sums(data)

    def _prefix_sums(self, data: bytes) -> None:
        n = len(self.starts)
        head, head_k, tail, tail_k = [_NONE] * n, [0] * n, [_NONE] * n, [0] * n
        exact_head, exact_tail = [0] * n, [0] * n
        starts, ends, ntok = self.starts, self.ends, self.ntok
        last_off, last_exact = 0, 0  # the latest hard boundary and the exact count up to it
        for u in range(n):
            s, e = starts[u], ends[u]
            if s >= e:
                continue
            if is_hard_boundary(data, s):
                h, hk = s, 0
            else:
                h = _NONE
                for off, k in self._token_offsets(u, s, e, False, _SCAN):
                    if is_hard_boundary(data, off):
                        h, hk = off, k
                        break
                if h == _NONE:
                    continue  # no hard boundary in this unit: windows run through it
            if is_hard_boundary(data, e):
                t, tk = e, ntok[u]
            else:
                t, tk = h, hk
                for off, k in self._token_offsets(u, h, e, True, _SCAN):
                    if is_hard_boundary(data, off):
                        t, tk = off, k
                        break
            gap = h - last_off
            if gap == 1 and data[last_off] == 0x0A:
                last_exact += 1  # the joining newline between two hard boundaries
            elif gap > 0:
                last_exact += self.encode_len(data[last_off:h].decode("utf-8"))
            head[u], head_k[u], exact_head[u] = h, hk, last_exact
            last_exact += tk - hk
            tail[u], tail_k[u], exact_tail[u] = t, tk, last_exact
            last_off = t
        self.head, self.head_k, self.tail, self.tail_k = head, head_k, tail, tail_k
        self.exact_head, self.exact_tail = exact_head, exact_tail

    def __len__(self) -> int:
        return len(self.data)

    # ------------------------------------------------------------------ positions

    def unit_at(self, off: int) -> int:
        """The unit containing byte ``off`` (a join byte belongs to the unit before it)."""
        return bisect_right(self.starts, off) - 1

    def unit_ends(self, unit: int) -> Sequence[int]:
        """Byte offsets (in ``data``) where the unit's tokens end."""
        c = self.cum[unit]
        return self.token_ends[c : c + self.ntok[unit]]

    def tokens_before(self, off: int) -> int:
        """Approximate run token position of byte ``off``."""
        unit = self.unit_at(off)
        c = self.cum[unit]
        if off <= self.starts[unit]:
            return c
        if off >= self.ends[unit]:
            return c + self.ntok[unit]
        return bisect_right(self.token_ends, off, c, c + self.ntok[unit])

    def offset_of(self, position: int) -> int:
        """Byte offset where approximate run token ``position`` starts (inverse of tokens_before)."""
        unit = max(0, bisect_right(self.cum, position) - 1)
        local = position - self.cum[unit]
        if local <= 0:
            return self.starts[unit]
        if local >= self.ntok[unit]:
            return self.ends[unit]
        return self.token_ends[position - 1]

    def is_char_start(self, off: int) -> bool:
        return off <= 0 or off >= len(self.data) or self.data[off] & 0xC0 != 0x80

    def decode(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8")

    # ------------------------------------------------------------------ hard boundaries

    def _token_offsets(self, unit: int, start: int, end: int, backwards: bool, scan: int) -> Iterator[tuple[int, int]]:
        """Up to ``scan`` (global offset, local token index) token ends in ``(start, end)``, nearest first."""
        c, n = self.cum[unit], self.ntok[unit]
        token_ends = self.token_ends
        if backwards:
            last = bisect_right(token_ends, end - 1, c, c + n) - c - 1
            for k in range(last, max(last - scan, -1), -1):
                off = token_ends[c + k]
                if off <= start:
                    return
                yield off, k + 1
        else:
            first = bisect_right(token_ends, start, c, c + n) - c
            for k in range(first, min(first + scan, n)):
                off = token_ends[c + k]
                if off >= end:
                    return
                yield off, k + 1

    def _local_index(self, unit: int, off: int) -> int:
        if off <= self.starts[unit]:
            return 0
        if off >= self.ends[unit]:
            return self.ntok[unit]
        c = self.cum[unit]
        return bisect_right(self.token_ends, off, c, c + self.ntok[unit]) - c

    def last_hard_before(self, start: int, end: int, scan: int = _SCAN) -> int:
        """Last hard boundary at a token end in ``(start, end)`` of ``end``'s unit, else ``start``."""
        unit = self.unit_at(end - 1)
        lo = max(start, self.starts[unit])
        for off, _ in self._token_offsets(unit, lo, end, True, scan):
            if is_hard_boundary(self.data, off):
                return off
        return start

    # ------------------------------------------------------------------ exact counts

    def encode_len(self, text: str) -> int:
        if not text:
            return 0
        if len(text) > _WINDOW_CACHE_CHARS:
            return len(self._enc.encode_ordinary(text))
        cache = self._window_cache
        n = cache.get(text)
        if n is None:
            if len(cache) > _WINDOW_CACHE_SIZE:
                cache.clear()
            n = cache[text] = len(self._enc.encode_ordinary(text))
        return n

    def _exact_at(self, unit: int, off: int, k: int) -> int:
        """Exact tokens of ``data[:off]`` for a hard boundary ``off`` in ``unit`` at local token ``k``."""
        return self.exact_head[unit] + k - self.head_k[unit]

    def count(self, start: int, end: int, prefix: str = "", prefix_tokens: int | None = None) -> int:
        """Exact ``len(encode_ordinary(prefix + run[start:end]))``; ``prefix`` ends with ``"\\n"``."""
        if prefix_tokens is None:
            prefix_tokens = self.encode_len(prefix)
        if start >= end:
            return prefix_tokens
        first = self.unit_at(start)
        h = self._first_hard(first, start, end, bool(prefix))
        if h is not None:
            last = self.unit_at(end - 1)
            t = self._last_hard(last, end, h[0])
            if t is not None and t[0] >= h[0]:
                hu, hoff, hk = h
                tu, toff, tk = t
                total = self._exact_at(tu, toff, tk) - self._exact_at(hu, hoff, hk)
                head_text = self.data[start:hoff].decode("utf-8")
                total += self.encode_len(prefix + head_text) if head_text else prefix_tokens
                if toff < end:
                    total += self.encode_len(self.data[toff:end].decode("utf-8"))
                return total
        return self.encode_len(prefix + self.data[start:end].decode("utf-8"))

    def _first_hard(self, unit: int, start: int, end: int, has_prefix: bool) -> tuple[int, int, int] | None:
        """First run-wide hard boundary at or after the chunk start: (unit, offset, local token).

        The chunk start itself qualifies only if it is a hard boundary of the run and, after a
        prefix (which ends with a newline), does not start with whitespace.
        """
        data = self.data
        head = self.head
        h = head[unit]
        if h != _NONE:
            if start < h:
                return unit, h, self.head_k[unit]
            if (start == h or is_hard_boundary(data, start)) and (not has_prefix or _starts_not_ws(data, start)):
                return unit, start, self.head_k[unit] if start == h else self._local_index(unit, start)
            for off, k in self._token_offsets(unit, start, min(end, self.ends[unit]), False, _SCAN):
                if is_hard_boundary(data, off):
                    return unit, off, k
            if start < self.tail[unit] <= end:
                return unit, self.tail[unit], self.tail_k[unit]
        for u in range(unit + 1, len(head)):
            if self.starts[u] >= end:
                break
            if head[u] != _NONE:
                return u, head[u], self.head_k[u]
        return None

    def _last_hard(self, unit: int, end: int, floor: int) -> tuple[int, int, int] | None:
        """Last run-wide hard boundary at or before the chunk end and not before ``floor``."""
        data = self.data
        head, tail = self.head, self.tail
        for u in range(unit, -1, -1):
            t = tail[u]
            if t != _NONE:
                if t <= end:
                    return (u, t, self.tail_k[u]) if t >= floor else None
                if head[u] <= end:
                    if is_hard_boundary(data, end):
                        return u, end, self._local_index(u, end)
                    for off, k in self._token_offsets(u, max(head[u], floor), end, True, _SCAN):
                        if is_hard_boundary(data, off):
                            return u, off, k
                    return (u, head[u], self.head_k[u]) if head[u] >= floor else None
            if self.starts[u] <= floor:
                break
        return None
