"""Chunker registry: name -> pure ``(ParsedDocument, doc_id, options) -> list[Chunk]``."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

from include.contract import Chunk, ParsedDocument, options_hash
from plugins.chunkers.options import ChunkOptions, OptionsKey, options_key

__all__ = [
    "BUILTIN_CHUNKERS",
    "DEFAULT_CHUNK_TOKEN_NUM",
    "ChunkerSpec",
    "chunk_document",
    "get_chunker",
    "load_builtins",
    "register_chunker",
]

# the chunk size a source gets when it names none (engine code reads it here, not from options)
DEFAULT_CHUNK_TOKEN_NUM: int = ChunkOptions.model_fields["chunk_token_num"].default

# The modules that register the built-in chunkers when imported, by dotted path (as Scrapy names
# its components in settings): the registry loads them itself instead of importing a chunker
# module, which imports the registry to register with it.
BUILTIN_CHUNKERS: tuple[str, ...] = ("plugins.chunkers.token_chunker",)  # "token" and "heading"

ChunkerFn = Callable[[ParsedDocument, str, Mapping[str, Any]], list[Chunk]]


@dataclass(frozen=True, slots=True)
class ChunkerSpec:
    name: str
    version: str
    fn: ChunkerFn


_CHUNKERS: dict[str, ChunkerSpec] = {}


def register_chunker(name: str, version: str) -> Callable[[ChunkerFn], ChunkerFn]:
    def deco(fn: ChunkerFn) -> ChunkerFn:
        _CHUNKERS[name] = ChunkerSpec(name, version, fn)
        return fn

    return deco


def load_builtins() -> None:
    """Import every module of :data:`BUILTIN_CHUNKERS` (they register themselves)."""
    for path in BUILTIN_CHUNKERS:
        importlib.import_module(path)


def get_chunker(name: str) -> ChunkerSpec:
    spec = _CHUNKERS.get(name)
    if spec is None:
        load_builtins()  # only on a miss: a name registered already needs no import
        spec = _CHUNKERS.get(name)
        if spec is None:
            raise KeyError(f"unknown chunker {name!r}; known: {sorted(_CHUNKERS)}")
    return spec


def chunk_document(
    doc: ParsedDocument, doc_id: str, name: str = "token", options: Mapping[str, Any] | None = None
) -> list[Chunk]:
    """Chunk ``doc``; every chunk is stamped with the chunker's name and options hash (lineage)."""
    spec = get_chunker(name)
    opts = dict(options or {})
    chunks = spec.fn(doc, doc_id, opts)
    stamp = _stamp(spec, opts)
    for c in chunks:
        c.metadata.update(stamp)
    return chunks


# Lineage stamps by chunker and options: a source chunks every document with the same options,
# so the options are hashed once per source rather than once per document.
_STAMPS: LRUCache[tuple[str, OptionsKey], dict[str, str]] = LRUCache(maxsize=256)


def _stamp(spec: ChunkerSpec, opts: dict[str, Any]) -> dict[str, str]:
    """Lineage fields of every chunk (shared between chunks: copied into each, never changed)."""
    key = options_key(opts)
    stamp = _STAMPS.get((spec.name, key)) if key is not None else None
    if stamp is None:
        stamp = {"chunker": spec.name, "chunker_version": spec.version, "chunker_options_hash": options_hash(opts)}
        if key is not None:  # options with an unhashable value (a list) are hashed every time
            _STAMPS[(spec.name, key)] = stamp
    return stamp
