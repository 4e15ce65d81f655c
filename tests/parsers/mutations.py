"""Byte mutations of real seeds for the parsers' fuzz tests (as tests/reliability/test_fuzz.py):
flipped bytes, truncation and inserted runs of format-specific junk."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st


@st.composite
def mutated_bytes(draw: st.DrawFn, seeds: Sequence[bytes], junk: Sequence[bytes], max_repeat: int = 100) -> bytes:
    """One of ``seeds`` after one to three mutations; ``junk`` is inserted up to ``max_repeat`` times."""
    data = bytearray(seeds[draw(st.integers(0, len(seeds) - 1))])
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "truncate", "insert"]))
        if op == "flip" and data:
            for _ in range(draw(st.integers(1, 8))):
                data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        elif op == "truncate":
            del data[draw(st.integers(0, len(data))) :]
        else:
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.sampled_from(list(junk))) * draw(st.integers(1, max_repeat))
    return bytes(data)
