"""Reciprocal rank fusion (Cormack, Clarke and Büttcher, SIGIR 2009) of several search rankings.

A hit's fused score is ``sum(1 / (rank_constant + rank))`` over the rankings it appears in
(``rank`` 1-based); a hit missing from a ranking gets nothing from it. Only ranks count, so
BM25 scores and cosine similarities, which live on different scales, need no normalising.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from include.index.base import SEARCH_MODES, SearchHit

__all__ = ["DEFAULT_RANK_CONSTANT", "check_search_mode", "hybrid_depth", "reciprocal_rank_fusion"]

DEFAULT_RANK_CONSTANT = 60  # the paper's k: damps the weight of the very top ranks


def reciprocal_rank_fusion(
    rankings: Mapping[str, Sequence[SearchHit]], k: int, rank_constant: int = DEFAULT_RANK_CONSTANT
) -> list[SearchHit]:
    """The best ``k`` hits of the fused rankings, keyed by chunk id, best first.

    Each returned hit is a copy of the first one seen for its chunk (rankings in mapping order),
    with ``score`` the fused score and ``ranks`` its 1-based rank in every ranking that holds it
    (``{"bm25": 3, "vector": 1}``). Ties break deterministically: the better best rank first,
    then the chunk id. A chunk listed twice in one ranking counts at its first (best) place.
    """
    if rank_constant < 0:
        raise ValueError(f"rank_constant must be >= 0, not {rank_constant}")
    if k <= 0:
        return []
    first: dict[str, SearchHit] = {}
    ranks: dict[str, dict[str, int]] = {}
    for name, hits in rankings.items():
        for rank, hit in enumerate(hits, start=1):
            first.setdefault(hit.chunk_id, hit)
            ranks.setdefault(hit.chunk_id, {}).setdefault(name, rank)
    fused = {cid: sum(1.0 / (rank_constant + r) for r in by_name.values()) for cid, by_name in ranks.items()}
    order = sorted(fused, key=lambda cid: (-fused[cid], min(ranks[cid].values()), cid))
    return [dataclasses.replace(first[cid], score=fused[cid], ranks=dict(ranks[cid])) for cid in order[:k]]


def hybrid_depth(k: int) -> int:
    """How deep each ranking is read before fusing ``k`` hybrid hits (fusion needs overlap)."""
    return max(k * 4, 50)


def check_search_mode(mode: str, query_vector: object) -> None:
    """Refuse an unknown mode, or a vector/hybrid search without its query vector."""
    if mode not in SEARCH_MODES:
        raise ValueError(f"unknown search mode {mode!r} (known: {', '.join(SEARCH_MODES)})")
    if mode != "bm25" and query_vector is None:
        raise ValueError(f"search mode {mode!r} needs query_vector (the query embedded with the chunks' model)")
