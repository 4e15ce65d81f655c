"""What each indexed item went through, and why it must go through again (issue 36).

An item's state keeps ``processed_with`` (``ItemState.processed_with``), written by the commit of
the run that indexed it (:func:`processed_record`)::

    {"parser": {"name": "pdf", "version": "2.0", "engine": "auto"},
     "chunker": {"name": "token", "version": "1"},
     "embedding": {"model": "openai:...", "dimensions": 256},   # only when the source embeds
     "options": "<hash of the parser/chunker/embedding options alone>",
     "text_options": "<hash of the parser/chunker options alone>"}

Planning compares it with what the registries hold now (:class:`Processing`,
:func:`reprocess_reason`). The processing hash stored beside it (``SourceConfig.processing_hash``:
options plus chunker version and model) still decides for what is the same for every item of a
source; the record says which part changed. The parser is not one per source (every format has
its own), so its version is not in the hash: a new PDF parser re-processes exactly the items the
PDF parser read. An item stored before records existed (``None``) counts as current: see
docs/architecture.md, section 5.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from include.config import SourceConfig
from include.contract import options_hash
from include.stores import ItemState
from plugins.chunkers.registry import get_chunker
from plugins.embedders.registry import provider_model_id
from plugins.engine.records import ChunkOutcome, EmbedOutcome, ParseOutcome
from plugins.parsers.registry import parser_versions

__all__ = [
    "Processing",
    "current_processing",
    "processed_record",
    "processing_versions",
    "reembed_reason",
    "reprocess_reason",
]


def processing_versions(source: SourceConfig) -> dict[str, Any]:
    """What the processing hash needs beyond the configuration: the chunker's scheme version and
    the embedding model (id and dimensions), so a new chunking scheme or model re-processes
    every document of the source once (one chunker and one model per source)."""
    versions: dict[str, Any] = {"chunker": get_chunker(source.chunker.name).version}
    if source.embedding.enabled:
        versions["embedding_model"] = provider_model_id(source.embedding)
        versions["embedding_dimensions"] = source.embedding.dimensions
    return versions


@dataclass(frozen=True, slots=True)
class Processing:
    """What processing a source's items means now: the hash each item stores, and its parts."""

    hash: str  # SourceConfig.processing_hash(processing_versions): options and versions
    options: str = ""  # the options alone (SourceConfig.processing_hash())
    chunker: Mapping[str, str] = field(default_factory=dict)  # {name, version}
    embedding_model: str | None = None  # None: the source does not embed
    parsers: Mapping[str, str] = field(default_factory=dict)  # registered parser name -> version
    text_options: str = ""  # the parser and chunker options alone: what the chunk texts depend on
    embedding_dimensions: int | None = None


def current_processing(source: SourceConfig) -> Processing:
    versions = processing_versions(source)
    chunker = get_chunker(source.chunker.name)
    return Processing(
        hash=source.processing_hash(versions),
        options=source.processing_hash(),
        chunker={"name": chunker.name, "version": chunker.version},
        embedding_model=versions.get("embedding_model"),
        parsers=parser_versions(),
        text_options=text_options_hash(source),
        embedding_dimensions=versions.get("embedding_dimensions"),
    )


def text_options_hash(source: SourceConfig) -> str:
    """The hash of what the chunk texts depend on (parser and chunker options), without the
    embedding: equal before and after a model change, so such an item is re-embedded only."""
    return options_hash({"parser": source.parser, "chunker": source.chunker.model_dump()})


def _chunker_change(old: Mapping[str, Any], now: Mapping[str, str]) -> str | None:
    """The chunker change, "chunker token 2 -> 3" ("chunker token 2 -> heading 1" for another one)."""
    was, new = (old.get("name"), old.get("version")), (now.get("name"), now.get("version"))
    if was == new:
        return None
    target = f"{new[1]}" if was[0] == new[0] else f"{new[0]} {new[1]}"
    return f"chunker {was[0]} {was[1]} -> {target}"


def _parser_change(parser: Mapping[str, Any], parsers: Mapping[str, str]) -> str | None:
    """The parser that read the item, when it has another version now ("parser pdf 2.0 -> 3.0")
    or is gone (its format now goes to whichever parser has it); else None."""
    name, version = parser.get("name"), parser.get("version")
    if not name or version is None:
        return None  # not recorded (a run staged before records resumed after the deploy): current
    now = parsers.get(str(name))
    if now is None:
        return f"parser {name} {version} no longer registered"
    return f"parser {name} {version} -> {now}" if now != version else None


def _hashed_changes(record: Mapping[str, Any], now: Processing) -> list[str]:
    """What of the hashed parts (chunker, model, options) differs between the record and now
    (nothing known without a record)."""
    changes: list[str] = []
    if not record:
        return changes
    if record.get("chunker") and (chunker := _chunker_change(record["chunker"], now.chunker)) is not None:
        changes.append(chunker)
    model = (record.get("embedding") or {}).get("model")
    if now.embedding_model is not None and model != now.embedding_model:
        changes.append(f"embedding model {model or 'none'} -> {now.embedding_model}")
    # another model or chunker is chosen in the options too: named above, not twice
    if not changes and record.get("options") and record["options"] != now.options:
        changes.append("processing options changed")
    return changes


def reprocess_reason(st: ItemState, now: Processing) -> str | None:
    """Why an indexed item must be processed again although its source did not change, or None.

    A parser version counts only for the items that parser read; the hash counts for all, and the
    record names what changed ("chunker token 1 -> 2"). Without a record (stored before records
    existed) only the hash is compared: such an item is not re-processed for a parser version."""
    record = st.processed_with or {}
    parser = _parser_change(record.get("parser") or {}, now.parsers)
    if st.processing_hash == now.hash:
        return parser
    changes = ([parser] if parser else []) + _hashed_changes(record, now)
    return "; ".join(changes) or "processing options or versions changed"


def reembed_reason(st: ItemState, now: Processing) -> str | None:
    """Why an indexed item needs new vectors only, or None: it is processed otherwise than now
    only in its embedding (model, dimensions or embedding options), its chunk texts being what
    this parser, chunker and their options make (same chunker, parser current, the recorded
    ``text_options`` equal). Its indexed chunk texts are then embedded again: no fetch, no parse.
    An item without ``text_options`` (recorded before them) is re-processed as before."""
    record = st.processed_with or {}
    if now.embedding_model is None or st.processing_hash == now.hash or not st.chunk_ids:
        return None
    text_options = record.get("text_options")
    if not text_options or text_options != now.text_options or not record.get("chunker"):
        return None
    if _chunker_change(record["chunker"], now.chunker) or _parser_change(record.get("parser") or {}, now.parsers):
        return None
    embedding = record.get("embedding") or {}
    model, dims = embedding.get("model"), embedding.get("dimensions")
    if model != now.embedding_model:
        return f"embedding model {model or 'none'} -> {now.embedding_model}"
    if now.embedding_dimensions is not None and dims != now.embedding_dimensions:
        return f"embedding dimensions {dims} -> {now.embedding_dimensions}"
    return "embedding options changed"


def processed_record(
    parsed: ParseOutcome, chunked: ChunkOutcome, embedded: EmbedOutcome | None, options: Mapping[str, str | None]
) -> dict[str, Any]:
    """``processed_with`` of an item this run indexed: what its outcomes say it went through
    (``options``: the plan's ``options`` and ``text_options`` hashes)."""
    record: dict[str, Any] = {
        "parser": {"name": parsed.parser, "version": parsed.parser_version, "engine": parsed.parser_engine},
        "chunker": {"name": chunked.chunker, "version": chunked.chunker_version},
    }
    if embedded is not None:
        record["embedding"] = {"model": embedded.model, "dimensions": embedded.dimensions}
    record.update({name: value for name, value in options.items() if value})
    return record
