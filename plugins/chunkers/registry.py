"""Chunker registry: name -> pure ``(ParsedDocument, doc_id, options) -> list[Chunk]``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from include.contract import Chunk, ParsedDocument, options_hash
from plugins.chunkers.options import OptionsKey, options_key

__all__ = ["ChunkerSpec", "chunk_document", "get_chunker", "register_chunker"]

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


def get_chunker(name: str) -> ChunkerSpec:
    spec = _CHUNKERS.get(name)
    if spec is None:
        import plugins.chunkers  # noqa: F401  (registers the built-ins; not on every call)

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


_STAMPS: dict[tuple[str, OptionsKey], dict[str, str]] = {}


def _stamp(spec: ChunkerSpec, opts: dict[str, Any]) -> dict[str, str]:
    """Lineage fields of every chunk; memoised per chunker and options (hashing is per document)."""
    key = options_key(opts)
    stamp = _STAMPS.get((spec.name, key)) if key is not None else None
    if stamp is None:
        stamp = {"chunker": spec.name, "chunker_version": spec.version, "chunker_options_hash": options_hash(opts)}
        if key is not None:
            if len(_STAMPS) > 256:
                _STAMPS.clear()
            _STAMPS[(spec.name, key)] = stamp
    return stamp
