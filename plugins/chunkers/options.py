"""Options of the built-in chunkers (``chunker_options`` in a source's config).

=========================  =======  ==========================================================
option                     default  meaning
=========================  =======  ==========================================================
``chunk_token_num``        512      hard upper bound on a chunk's cl100k_base token count,
                                    heading prefix, table header and overlap included
``overlap_tokens``         0        tokens repeated from the end of the previous chunk (same
                                    section, never across a table); at most half the limit
``delimiters``             see      where an over-long block may be split, in the seed's
                           below    syntax: every character is a delimiter, a run in backticks
                                    is one multi-character delimiter (`` `\\n\\n` ``); longer
                                    delimiters are tried first. Default ``"\\n。；！？!?;"``
``headings``               false    heading-aware mode: each chunk begins with its heading path
                                    ``A > B > C`` (the ``heading`` chunker turns it on)
``cross_sections``         false    in heading mode, let a chunk run on into the next top-level
                                    section
``max_prefix_tokens``      limit/4  longest heading prefix; outer headings are dropped to fit
``table_rows_per_chunk``   10       rows per table chunk (fewer when they do not fit)
``table_header_line``      true     start every table chunk with the header row ``a | b | c``
=========================  =======  ==========================================================

Unknown options are rejected so that a typo in a source config fails loudly instead of
silently chunking with defaults.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from cachetools import LRUCache
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = [
    "DEFAULT_DELIMITERS",
    "ChunkOptions",
    "delimiter_bytes",
    "delimiter_pattern",
    "options_key",
    "parse_delimiters",
]

DEFAULT_DELIMITERS = "\n。；！？!?;"


OptionsKey = frozenset[tuple[str, type, Any]]


def options_key(options: Mapping[str, Any]) -> OptionsKey | None:
    """A dict key for memoising per options mapping; None when a value is unhashable (a list).

    1 and True are different options (and different JSON), so the key holds the types too.
    """
    try:
        return frozenset((k, type(v), v) for k, v in options.items())
    except TypeError:
        return None


# Validated options by their key: every document of a source comes with the same options, and
# a frozen ChunkOptions can serve them all.
_VALIDATED: LRUCache[OptionsKey, ChunkOptions] = LRUCache(maxsize=256)


class ChunkOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    chunk_token_num: int = Field(512, ge=32, le=1_000_000)
    overlap_tokens: int = Field(0, ge=0)
    delimiters: str = Field(DEFAULT_DELIMITERS, min_length=1)
    headings: bool = False
    cross_sections: bool = False
    max_prefix_tokens: int | None = Field(None, ge=0)
    table_rows_per_chunk: int = Field(10, ge=1)
    table_header_line: bool = True

    @model_validator(mode="after")
    def _check_budget(self) -> ChunkOptions:
        if self.overlap_tokens > self.chunk_token_num // 2:
            raise ValueError(
                f"overlap_tokens={self.overlap_tokens} exceeds half of chunk_token_num={self.chunk_token_num}"
            )
        if self.max_prefix_tokens is not None and self.max_prefix_tokens > self.chunk_token_num // 4:
            raise ValueError(
                f"max_prefix_tokens={self.max_prefix_tokens} exceeds a quarter of chunk_token_num={self.chunk_token_num}"
            )
        if not parse_delimiters(self.delimiters):
            raise ValueError(f"delimiters {self.delimiters!r} define no delimiter")
        return self

    @property
    def prefix_limit(self) -> int:
        return self.chunk_token_num // 4 if self.max_prefix_tokens is None else self.max_prefix_tokens

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None, **overrides: Any) -> ChunkOptions:
        """Validate a source's options; errors become a ``ValueError`` naming the bad option."""
        data = {**dict(options or {}), **overrides}
        key = options_key(data)
        if key is not None and (hit := _VALIDATED.get(key)) is not None:
            return hit
        try:
            opts = cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'options'}: {err['msg']}" for err in exc.errors()
            )
            raise ValueError(f"invalid chunker options: {problems}") from None
        if key is not None:
            _VALIDATED[key] = opts
        return opts


@cache
def parse_delimiters(spec: str) -> tuple[str, ...]:
    """The seed's delimiter syntax -> delimiters, longest first (so ``\\n\\n`` wins over ``\\n``)."""
    found: list[str] = []
    pos = 0
    for match in re.finditer(r"`([^`]+)`", spec):
        found.extend(spec[pos : match.start()])
        found.append(match.group(1))
        pos = match.end()
    found.extend(spec[pos:])
    # YAML written with single quotes keeps "\\n" as two characters; mean the control character.
    found = [d.replace("\\n", "\n").replace("\\t", "\t").replace("\\r", "\r") for d in found]
    unique = list(dict.fromkeys(d for d in found if d))
    return tuple(sorted(unique, key=len, reverse=True))


@cache
def delimiter_bytes(spec: str) -> tuple[bytes, ...]:
    """The delimiters as UTF-8 bytes, longest first."""
    return tuple(d.encode("utf-8") for d in parse_delimiters(spec))


@cache
def delimiter_pattern(spec: str) -> re.Pattern[bytes]:
    """A bytes pattern matching a run of delimiters (a sentence keeps its closing punctuation)."""
    alternatives = b"|".join(re.escape(d.encode("utf-8")) for d in parse_delimiters(spec))
    return re.compile(b"(?:" + alternatives + b")+")
