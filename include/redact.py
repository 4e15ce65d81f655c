"""Secrets scrubbed out of text that is about to be stored or shown (error bodies, messages).

A server's error may echo a credential whole, in another letter case, or in part (OpenAI's 401
shows its ends; a proxy's 500 may dump the request headers), and an excerpt cut before the
scrub keeps whatever piece of the secret straddles the cut. So :func:`redact_secret` runs on
the whole text, before any truncation, and removes every stretch of at least
``min_fragment`` characters that occurs in the secret, in any letter case.
"""

from __future__ import annotations

__all__ = ["MIN_FRAGMENT", "redact_secret"]

# A secret's 8 characters are ~48 bits of an API key's random part: worth hiding; shorter
# pieces turn up in ordinary text by chance and say little.
MIN_FRAGMENT = 8
_MASK = "***"


def _fold(text: str) -> str:
    """``text`` lower-cased one character at a time, keeping every index where it was (a few
    characters lower-case to two, e.g. "İ")."""
    if text.isascii():
        return text.lower()
    return "".join(low if len(low := char.lower()) == 1 else char for char in text)


def _spans(folded: str, secret: str, size: int) -> list[tuple[int, int]]:
    """Where any ``size``-character piece of ``secret`` occurs in ``folded``, overlaps merged."""
    hits: list[tuple[int, int]] = []
    for piece in {secret[i : i + size] for i in range(len(secret) - size + 1)}:
        at = folded.find(piece)
        while at >= 0:
            hits.append((at, at + size))
            at = folded.find(piece, at + 1)
    merged: list[tuple[int, int]] = []
    for start, end in sorted(hits):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def redact_secret(text: str, secret: str | None, *, min_fragment: int = MIN_FRAGMENT) -> str:
    """``text`` with every piece of ``secret`` of ``min_fragment`` characters or more (the whole
    secret when it is shorter), in any letter case, replaced by ``***``."""
    if not secret or not text:
        return text
    folded_secret = _fold(secret)
    size = min(min_fragment, len(folded_secret))
    spans = _spans(_fold(text), folded_secret, size)
    if not spans:
        return text
    parts, last = [], 0
    for start, end in spans:
        parts += [text[last:start], _MASK]
        last = end
    parts.append(text[last:])
    return "".join(parts)
