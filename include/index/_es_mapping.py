"""Elasticsearch index layout for Tributary chunks: names, settings, mapping, index template.

Pure functions only (no client). The mapping carries two vocabularies side by side:

* the chunk fields MemoryBear's downstream retrievers read (its design doc, section 11.3):
  ``docnm_kwd``, ``title_tks``/``title_sm_tks``, ``content_with_weight``,
  ``content_ltks``/``content_sm_ltks``, ``page_num_int``, ``position_int``, ``top_int``,
  ``doc_type_kwd``. Suffixes keep their meaning there: ``_kwd`` keyword, ``_tks``/``_ltks``
  analysed text, ``_int`` integers. MemoryBear fills ``*_tks`` with its own pre-tokenised text;
  here Elasticsearch analyses them: the coarse variants with the ``standard`` analyzer and the
  fine (``_sm_``) ones with the built-in ``cjk`` analyzer (overlapping CJK bigrams), so Chinese
  is searchable without an analysis plugin.
* Tributary's lineage fields: source, document id/version/hash, item key, chunk sequence,
  heading path, the chunk's text hash, run id, chunker name/version/options hash, timestamps.

``content_with_weight`` is kept in ``_source`` but not indexed itself; it is copied into
``content_ltks`` and ``content_sm_ltks`` (``copy_to``) so the text is stored once and searched
through both analyzers, the way MemoryBear's retrievers query it.

Vectors: ``embedding`` (``dense_vector``, cosine) is not in the template, since its ``dims``
are only known once a source writes vectors: ``vector_properties`` maps it on a generation at
its first vector write (or when a scoped rebuild's new generation copies the live one's), with
``index_options`` chosen by size (see there). ``embedding_model`` (keyword) is always mapped.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "LEGACY_TEXT_HASH_FIELD",
    "MAPPED_FIELDS",
    "MAX_VECTOR_DIMS",
    "RENAME_LEGACY_FIELDS",
    "SEARCH_FIELDS",
    "VECTOR_FIELD",
    "index_mappings",
    "index_settings",
    "index_template",
    "physical_index_name",
    "physical_index_pattern",
    "rebuild_alias",
    "template_name",
    "validate_alias",
    "vector_dims_of",
    "vector_properties",
]

# Bumped when the mapping changes incompatibly; stored in the mapping's _meta.
SCHEMA_VERSION = 1

# Fields a query matches, with boosts (the title counts double, as in SQLite FTS's bm25 weights).
SEARCH_FIELDS = ["content_ltks", "content_sm_ltks", "title_tks^2", "title_sm_tks^2"]

_KEYWORD = {"type": "keyword"}
_KEYWORD_NOT_INDEXED = {"type": "keyword", "index": False, "doc_values": False}

_PROPERTIES: dict[str, dict[str, Any]] = {
    # ---- MemoryBear output contract (section 11.3)
    "docnm_kwd": _KEYWORD,
    "title_tks": {"type": "text", "analyzer": "standard"},
    "title_sm_tks": {"type": "text", "analyzer": "cjk"},
    "content_with_weight": {"type": "text", "index": False, "copy_to": ["content_ltks", "content_sm_ltks"]},
    "content_ltks": {"type": "text", "analyzer": "standard"},
    "content_sm_ltks": {"type": "text", "analyzer": "cjk"},
    "page_num_int": {"type": "integer"},
    # (page, x0, x1, top, bottom) tuples; Elasticsearch flattens the inner arrays for search but
    # keeps them intact in _source, which is what MemoryBear's retrievers read back.
    "position_int": {"type": "integer"},
    "top_int": {"type": "integer"},
    "doc_type_kwd": _KEYWORD,
    # ---- Tributary lineage
    "chunk_id": _KEYWORD,
    "doc_id": _KEYWORD,
    "source": _KEYWORD,
    "item_key": _KEYWORD,
    "sequence": {"type": "integer"},
    "kind": _KEYWORD,
    "token_count": {"type": "integer"},
    "text_hash": _KEYWORD,  # the chunk's (Chunk.text_hash); the document's is doc_content_hash
    "doc_content_hash": _KEYWORD,
    "doc_version": _KEYWORD,
    "run_id": _KEYWORD,
    "chunker": _KEYWORD,
    "chunker_version": _KEYWORD,
    "chunker_options_hash": _KEYWORD,
    "title": {"type": "keyword", "ignore_above": 1024},
    "url": {"type": "keyword", "ignore_above": 4096},
    "media_type": _KEYWORD,
    "heading_path": {"type": "keyword", "ignore_above": 1024},
    # Raw positions as the contract's Position dicts (page/bbox/sheet/row/line/slide/path),
    # kept for lineage only; the searchable projections are the *_int fields above.
    "positions": {"type": "object", "enabled": False},
    # Arbitrary connector/parser/chunker metadata: one field in the mapping whatever its keys,
    # so no source can blow up the mapping (mapping explosion), and leaves stay term-searchable.
    "metadata": {"type": "flattened", "ignore_above": 1024},
    "updated_at": {"type": "date", "format": "strict_date_optional_time||epoch_millis"},
    "embedding_model": _KEYWORD,  # the model of the chunk's vector (absent: no vector)
    # ---- access (include.acl): the document's entries, and whether ``public`` is one of them;
    # searches filter on both (``_es_access.access_query``); absent: an unrestricted search only
    "acl": _KEYWORD,
    "public": {"type": "boolean"},
}

VECTOR_FIELD = "embedding"
MAX_VECTOR_DIMS = 4096  # dense_vector's limit for indexed float vectors (ES 8.11+ and 9.x)
# At and above this size Elasticsearch 8.14+ defaults to int8 scalar quantisation (int8_hnsw:
# ~4x less memory, recall close to float); below it plain HNSW on floats costs little anyway.
_QUANTIZE_FROM_DIMS = 384

MAPPED_FIELDS = frozenset(_PROPERTIES) | {VECTOR_FIELD}

# What the chunk's ``text_hash`` field was called in indexes written before the rename (the name
# now means a document's hash only, stored as ``doc_content_hash``). What an old index does:
# ``ensure_index``'s put_mapping adds ``text_hash`` beside the old field (a mapping field cannot
# be removed); a chunk stored without ``text_hash`` has no stamp to match, so the next upsert of
# its document rewrites it whole (its new _source has ``text_hash`` and no old field); readers
# (search hits, ``get_chunk``) take the old field for chunks not rewritten yet; and a rebuild's
# carry-over copies old chunks through ``RENAME_LEGACY_FIELDS``, since a new generation's strict
# mapping no longer has the old field.
LEGACY_TEXT_HASH_FIELD = "content_hash"

# Painless script for ``_reindex`` from a generation that may hold chunks with the old field name.
RENAME_LEGACY_FIELDS = {
    "lang": "painless",
    "source": (
        f"if (ctx._source.containsKey('{LEGACY_TEXT_HASH_FIELD}'))"
        f" {{ ctx._source.text_hash = ctx._source.remove('{LEGACY_TEXT_HASH_FIELD}') }}"
    ),
}

_ALIAS_RE = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,150}$")


def validate_alias(alias: str) -> str:
    """Index names must be lower case and may not contain the separators we use."""
    if not _ALIAS_RE.match(alias) or "__" in alias:
        raise ValueError(
            f"invalid Elasticsearch index name {alias!r}: use lower-case letters, digits, '-' or '_' "
            "(no '__', which separates the physical-index suffix)"
        )
    return alias


def physical_index_name(alias: str, generation: str) -> str:
    """The concrete index behind ``alias``; a full rebuild creates a new generation."""
    return f"{alias}__v{generation}"


def physical_index_pattern(alias: str) -> str:
    return f"{alias}__v*"


def rebuild_alias(alias: str) -> str:
    """Second alias marking the index a rebuild is writing into (visible to every worker)."""
    return f"{alias}__rebuild"


def template_name(alias: str) -> str:
    return f"{alias}__chunks"


def index_mappings() -> dict[str, Any]:
    # "strict": a field the builders forget to map is an error in tests, not a silent guess.
    return {
        "dynamic": "strict",
        "_meta": {"tributary_schema": SCHEMA_VERSION},
        "properties": {name: dict(spec) for name, spec in _PROPERTIES.items()},
    }


def vector_properties(dims: int) -> dict[str, Any]:
    """The ``embedding`` mapping for ``dims``-dimension vectors (put on a generation at its first vector write)."""
    if not 1 <= dims <= MAX_VECTOR_DIMS:
        raise ValueError(f"Elasticsearch indexes dense vectors of 1 to {MAX_VECTOR_DIMS} dimensions, not {dims}")
    index_type = "int8_hnsw" if dims >= _QUANTIZE_FROM_DIMS else "hnsw"
    return {
        VECTOR_FIELD: {
            "type": "dense_vector",
            "element_type": "float",
            "dims": dims,
            "index": True,
            "similarity": "cosine",
            "index_options": {"type": index_type},
        }
    }


def vector_dims_of(get_mapping_body: dict[str, Any]) -> int | None:
    """The ``embedding`` size a ``get_mapping`` answer maps (None: no vector mapped yet)."""
    for index_mapping in get_mapping_body.values():
        spec = (index_mapping.get("mappings") or {}).get("properties", {}).get(VECTOR_FIELD)
        if spec and spec.get("dims") is not None:
            return int(spec["dims"])
    return None


def index_settings(*, shards: int = 1, replicas: int = 0, refresh_interval: str | None = None) -> dict[str, Any]:
    settings: dict[str, Any] = {"number_of_shards": shards, "number_of_replicas": replicas}
    if refresh_interval is not None:
        settings["refresh_interval"] = refresh_interval
    return settings


def index_template(alias: str, *, shards: int = 1, replicas: int = 0, priority: int = 200) -> dict[str, Any]:
    """Keyword arguments for ``client.indices.put_index_template`` covering every generation."""
    validate_alias(alias)
    return {
        "name": template_name(alias),
        "index_patterns": [physical_index_pattern(alias)],
        "priority": priority,
        "template": {
            "settings": index_settings(shards=shards, replicas=replicas),
            "mappings": index_mappings(),
        },
        "meta": {"managed_by": "tributary", "alias": alias, "tributary_schema": SCHEMA_VERSION},
    }
