"""The hard-boundary rules and exact slice counts, checked against the tokenizer itself."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from plugins.chunkers.pack import _block_ends
from plugins.chunkers.span import Run, is_hard_boundary
from plugins.chunkers.tokenizer import get_encoding
from tests.chunkers.strategies import CJK, CJK_PUNCT, ODD, block_text

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Characters around which cl100k's pre-tokenizer behaves differently: letters, digits, the
# contraction apostrophe, punctuation runs, every kind of whitespace, CJK and odd Unicode.
tricky = st.text(
    alphabet=st.sampled_from(list("aZs'tlvrde19 .,!?;:-()[]\n\r\t" + CJK[:12] + CJK_PUNCT + ODD)), max_size=80
)


@SETTINGS
@given(st.one_of(tricky, block_text()))
def test_tokens_split_at_every_hard_boundary(text: str) -> None:
    enc = get_encoding()
    data = text.encode("utf-8")
    whole = enc.encode_ordinary(text)
    for off in range(1, len(data)):
        if is_hard_boundary(data, off):
            left, right = data[:off].decode("utf-8"), data[off:].decode("utf-8")
            assert enc.encode_ordinary(left) + enc.encode_ordinary(right) == whole, (left, right)


def test_known_boundaries() -> None:
    data = "word. next\n中文，更多。好\n  indented".encode()
    hard = {data[:off].decode(errors="ignore") for off in range(1, len(data)) if is_hard_boundary(data, off)}
    assert "word" in hard  # letter | punctuation
    assert "word." in hard  # punctuation | space
    assert "word. next" in hard  # letter | newline
    assert "word. next\n" in hard  # newline | letter
    assert "word. next\n中文" in hard  # CJK letter | CJK punctuation
    assert "word. next\n中文，" not in hard  # "，更多" is one pre-token
    assert "word. next\n中文，更多。好\n" not in hard  # newline | whitespace


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[str], int, int, str]:
    texts = draw(st.lists(st.one_of(tricky, block_text()), min_size=1, max_size=6))
    joined = "\n".join(texts)
    n = len(joined)
    a = draw(st.integers(0, n))
    b = draw(st.integers(a, n))
    prefix = draw(st.sampled_from(["", "A > B\n", "标题 > 小节\n"]))
    return texts, a, b, prefix


@SETTINGS
@given(runs())
def test_run_count_is_exact(case: tuple[list[str], int, int, str]) -> None:
    texts, a, b, prefix = case
    joined = "\n".join(texts)
    run = Run(joined)
    start, end = len(joined[:a].encode()), len(joined[:b].encode())
    expected = len(get_encoding().encode_ordinary(prefix + joined[a:b]))
    assert run.count(start, end, prefix) == expected


@SETTINGS
@given(st.lists(st.one_of(tricky, block_text()), min_size=1, max_size=6), st.data())
def test_run_count_over_texts_glued_with_or_without_newlines(texts: list[str], data: st.DataObject) -> None:
    # Pieces glued directly (no newline) put arbitrary characters on both sides of a junction.
    joined_flags = [data.draw(st.booleans()) for _ in texts]
    text = "".join(
        t + ("\n" if j and i < len(texts) - 1 else "") for i, (t, j) in enumerate(zip(texts, joined_flags, strict=True))
    )
    run = Run(text)
    assert run.data == text.encode()
    a = data.draw(st.integers(0, len(text)))
    b = data.draw(st.integers(a, len(text)))
    start, end = len(text[:a].encode()), len(text[:b].encode())
    assert run.count(start, end) == len(get_encoding().encode_ordinary(text[a:b]))


@SETTINGS
@given(runs(), st.integers(1, 24))
def test_last_start_with_count_matches_counting_every_candidate(
    case: tuple[list[str], int, int, str], want: int
) -> None:
    texts, a, b, _ = case
    joined = "\n".join(texts)
    run = Run(joined)
    lo, end = len(joined[:a].encode()), len(joined[:b].encode())
    assume(lo < end)
    steps = 8 * want + 8
    expected = None
    start = end
    for _ in range(steps):  # the definition: every character start, nearest first
        start -= 1
        while start > lo and not run.is_char_start(start):
            start -= 1
        if start < lo:
            break
        if run.count(start, end) == want:
            expected = start
            break
    assert run.last_start_with_count(lo, end, want, steps) == expected


@SETTINGS
@given(st.lists(st.one_of(tricky, block_text(), st.text(max_size=20)), min_size=1, max_size=12))
def test_block_ends_are_the_utf8_offsets_of_the_joins(texts: list[str]) -> None:
    """The layout's byte offsets, mixing ASCII, CJK and 4-byte characters."""
    joined = "\n".join(texts)
    expected, offset = [], 0
    for t in texts:
        offset += len(t.encode("utf-8"))
        expected.append(offset)
        offset += 1  # the joining "\n"
    byte_ends, chars = _block_ends(texts, joined.isascii())
    assert byte_ends == expected
    assert (chars is None) == joined.isascii()
    # Character ends slice the joined text into the blocks, as byte ends slice its UTF-8.
    char_ends = byte_ends if chars is None else [c + j for j, c in enumerate(chars)]
    starts = [0, *(e + 1 for e in char_ends[:-1])]
    assert [joined[a:b] for a, b in zip(starts, char_ends, strict=True)] == texts
    data = joined.encode("utf-8")
    byte_starts = [0, *(e + 1 for e in byte_ends[:-1])]
    assert [data[a:b].decode("utf-8") for a, b in zip(byte_starts, byte_ends, strict=True)] == texts


@SETTINGS
@given(st.one_of(tricky, block_text()), st.integers(min_value=-2, max_value=200))
def test_end_bound_separates_offsets_by_token_count(text: str, max_tokens: int) -> None:
    run = Run(text)
    bound = run.end_bound(max_tokens)
    for off in range(len(run) + 1):
        assert (run.tokens_before(off) <= max_tokens) == (off < bound)


def test_runs_past_64_kib_keep_exact_offsets_and_counts() -> None:
    """Token ends are stored in the narrowest type that holds the run: 16 bits up to 64 KiB."""
    enc = get_encoding()
    paragraph = "Tokenizer 边界测试，第二句。Another sentence, with digits 12345!\n"
    for size in (2**16 - 1, 2**16, 150_000):
        text = (paragraph * (size // len(paragraph.encode()) + 1)).encode()[:size].decode(errors="ignore")
        text += "x" * (size - len(text.encode()))  # exactly ``size`` bytes
        run = Run(text)
        data = text.encode()
        assert len(data) == size and run.token_ends.itemsize == (2 if size < 2**16 else 4)  # type: ignore[attr-defined]
        assert run.token_ends[run.ntokens - 1] == size == len(run)
        assert run.ntokens == len(enc.encode_ordinary(text))
        for start, end in ((0, len(data)), (len(data) // 3, len(data) - 7), (60_000, min(70_000, len(data)))):
            while not run.is_char_start(start):
                start += 1
            while not run.is_char_start(end):
                end -= 1
            assert run.count(start, end) == len(enc.encode_ordinary(data[start:end].decode())), (size, start, end)


@SETTINGS
@given(st.lists(st.one_of(tricky.filter(bool), block_text()), min_size=1, max_size=5), st.data())
def test_a_run_of_sections_positions_and_counts_like_one_run_per_section(
    sections: list[str], data: st.DataObject
) -> None:
    """``Run.of_sections`` gives every section the token positions of its own run (shifted by
    where the section starts) and exact counts of any slice inside one section."""
    joined = "\n".join(sections)
    run = Run.of_sections(joined, sections)
    assert run.data == joined.encode("utf-8")
    enc = get_encoding()
    base_bytes = base_tokens = 0
    for section in sections:
        alone = Run(section)
        ends = [run.token_ends[base_tokens + k] for k in range(alone.ntokens)]
        assert [e - base_bytes for e in ends] == list(alone.token_ends)
        size = len(alone)
        assert run.tokens_before(base_bytes + size) == base_tokens + alone.ntokens
        if size:
            start = data.draw(st.integers(0, size - 1))
            end = data.draw(st.integers(start, size))
            assume(alone.is_char_start(start) and alone.is_char_start(end))
            piece = section.encode("utf-8")[start:end].decode("utf-8")
            assert run.count(base_bytes + start, base_bytes + end) == len(enc.encode_ordinary(piece))
        base_bytes += size + 1  # the joining newline
        base_tokens += alone.ntokens
    assert run.ntokens == base_tokens
