"""Search request bodies and hits of the Elasticsearch backend (pure: no client)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from include.index._es_acl import access_query
from include.index._es_mapping import LEGACY_TEXT_HASH_FIELD, SEARCH_FIELDS
from include.index.base import SearchHit
from include.index.query_text import search_terms

__all__ = ["bm25_query", "search_hit"]


def bm25_query(query: str, source: str | None, access: Sequence[str] | None = None) -> dict[str, Any]:
    """The BM25 search body: a ``multi_match`` of any of the query's terms (``operator: or``,
    ranked retrieval as the SQLite backend does), over the ``standard`` fields and the ``cjk``
    ones, whose analyzer queries Chinese as overlapping bigrams; ``source`` and ``access``
    (:func:`~include.index._es_acl.access_query`) filter, unscored. A query of more than
    ``MAX_QUERY_TERMS`` distinct terms is sent as its first ones."""
    terms = search_terms(query)
    if terms.dropped:
        query = " ".join(terms.kept)
    body: dict[str, Any] = {
        "bool": {"must": [{"multi_match": {"query": query, "fields": SEARCH_FIELDS, "operator": "or"}}]}
    }
    filters = ([{"term": {"source": source}}] if source else []) + (
        [access_query(access)] if access is not None else []
    )
    if filters:
        body["bool"]["filter"] = filters
    return body


def search_hit(h: Mapping[str, Any], score: float) -> SearchHit:
    src = h["_source"]
    seq = src.get("sequence")
    return SearchHit(
        chunk_id=h["_id"],
        doc_id=src["doc_id"],
        source=src["source"],
        score=score,
        text=src.get("content_with_weight", ""),
        title=src.get("title"),
        url=src.get("url"),
        heading_path=list(src.get("heading_path") or []),
        run_id=src.get("run_id"),
        doc_version=src.get("doc_version"),
        # a chunk stored before the rename and not rewritten since has the old field
        text_hash=src.get("text_hash", src.get(LEGACY_TEXT_HASH_FIELD)),
        metadata=dict(src.get("metadata") or {}),
        sequence=int(seq) if seq is not None else None,
        embedding_model=src.get("embedding_model"),
    )
