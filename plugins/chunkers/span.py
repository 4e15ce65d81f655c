"""Exact token counts of slices of a text that was encoded once.

A chunker wants the token count of many candidate slices of the same text. Encoding each slice
again costs as much as the whole job; reusing the slice of the text's token list is free but not
exact: BPE is not slice-stable (``"。中文"`` is one pre-token, cutting it changes its tokens), and
the chunk's own encoding is what the embedding model will see.

The way out is *hard boundaries*: byte offsets where cl100k_base's pre-tokenizer always splits
and where neither side's pre-tokens depend on the other, so ``enc(a + b) == enc(a) + enc(b)``.
Between two hard boundaries the slice of the run's token list is exactly the slice's own
encoding; only the few bytes from a chunk's edge to the nearest hard boundary are encoded again.
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

from bisect import bisect_left, bisect_right
from itertools import accumulate

from plugins.chunkers.tokenizer import get_encoding, token_byte_lengths

__all__ = ["EncodedText", "is_hard_boundary"]

# How many tokens to look at for a hard boundary before re-encoding a whole slice instead.
_SCAN = 48

_ASCII_LETTER = frozenset(range(0x41, 0x5B)) | frozenset(range(0x61, 0x7B))
_ASCII_DIGIT = frozenset(range(0x30, 0x3A))
# Bytes that may start Unicode whitespace (White_Space): C2 (U+0085, U+00A0), E1 (U+1680),
# E2 (U+2000-U+205F), E3 (U+3000); ASCII controls and space; DEL to be safe.
_ASCII_NOT_WS = frozenset(range(0x21, 0x7F))
_ASCII_PUNCT = _ASCII_NOT_WS - _ASCII_LETTER - _ASCII_DIGIT


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


class EncodedText:
    """A text encoded once, with byte offsets of its tokens and exact slice counts.

    Offsets are UTF-8 byte offsets into ``data``; ``ends[k]`` is where token ``k`` ends.
    """

    __slots__ = ("_enc", "data", "ends", "text", "tokens")

    def __init__(self, text: str) -> None:
        self._enc = get_encoding()
        self.text = text
        self.data = text.encode("utf-8")
        self.tokens = self._enc.encode_ordinary(text)
        self.ends = list(accumulate(map(token_byte_lengths().__getitem__, self.tokens)))

    def __len__(self) -> int:
        return len(self.data)

    @property
    def token_total(self) -> int:
        return len(self.tokens)

    def tokens_before(self, off: int) -> int:
        """Number of tokens that end at or before byte ``off``."""
        return bisect_right(self.ends, off)

    def token_start(self, k: int) -> int:
        """Byte offset where token ``k`` starts."""
        return self.ends[k - 1] if k > 0 else 0

    def is_char_start(self, off: int) -> bool:
        return off >= len(self.data) or off <= 0 or self.data[off] & 0xC0 != 0x80

    def hard(self, off: int) -> bool:
        return is_hard_boundary(self.data, off)

    def decode(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8")

    def _encode_len(self, text: str) -> int:
        return len(self._enc.encode_ordinary(text)) if text else 0

    def first_hard_after(self, start: int, end: int) -> int:
        """First hard boundary in ``(start, end)`` at a token end, or ``end`` if none is near."""
        ends = self.ends
        first = bisect_right(ends, start)
        for k in range(first, min(first + _SCAN, len(ends))):
            off = ends[k]
            if off >= end:
                break
            if is_hard_boundary(self.data, off):
                return off
        return end

    def last_hard_before(self, start: int, end: int, scan: int = _SCAN) -> int:
        """Last hard boundary in ``(start, end)`` at a token end, or ``start`` if none is near."""
        ends = self.ends
        last = bisect_left(ends, end) - 1
        for k in range(last, max(last - scan, -1), -1):
            off = ends[k]
            if off <= start:
                break
            if is_hard_boundary(self.data, off):
                return off
        return start

    def count(self, start: int, end: int, prefix: str = "", prefix_tokens: int | None = None) -> int:
        """Exact ``len(encode_ordinary(prefix + text[start:end]))``.

        ``prefix`` must end with a newline (heading paths and table headers do); pass
        ``prefix_tokens`` when its count is already known.
        """
        if prefix_tokens is None:
            prefix_tokens = self._encode_len(prefix)
        if start >= end:
            return prefix_tokens
        data = self.data
        # Head: the slice tokens are reusable from a hard boundary on; with a prefix the junction
        # prefix|slice must be hard too (rule (a): prefix ends with "\n").
        if self.hard(start) and (not prefix or _starts_not_ws(data, start)):
            head, head_tokens = start, prefix_tokens
        else:
            head = self.first_hard_after(start, end)
            if head >= end:
                return self._encode_len(prefix + self.decode(start, end))
            head_tokens = self._encode_len(prefix + self.decode(start, head))
        tail = end if self.hard(end) else self.last_hard_before(head, end)
        if tail <= head:
            return self._encode_len(prefix + self.decode(start, end))
        middle = self.tokens_before(tail) - self.tokens_before(head)
        return head_tokens + middle + self._encode_len(self.decode(tail, end))
