"""Reciprocal rank fusion (Cormack, Clarke and Büttcher, SIGIR 2009) of several search rankings.

A hit's fused score is ``sum(weight / (rank_constant + rank))`` over the rankings it appears in
(``rank`` 1-based; ``weight`` 1 unless given); a hit missing from a ranking gets nothing from it.
Only ranks count, so BM25 scores and cosine similarities, which live on different scales, need
no normalising.

Hybrid search's rule (:func:`fuse_hybrid`): rank constant ``HYBRID_RANK_CONSTANT`` (10) and the
vector ranking weighted ``DEFAULT_VECTOR_WEIGHT`` (2) times the BM25 ranking. It was chosen by
leave-one-set-out over a grid of 24 RRF rules (k 10/30/60/120, weight 0.5-3) on three sets of the
retrieval benchmark (Python FAQ, Debian FAQ in Chinese, PostgreSQL manual questions written before
any search ran on them): it is the rule with the best worst-set margin over the better of bm25
and vector alone on all three sets, and the one two of the three folds chose with their set held
out (``benchmarks/_retrieval_fusion.py``; figures in benchmarks/README.md, "Retrieval quality").
No rule of the grid keeps hybrid at or above the vector ranking alone on the Python FAQ, where
BM25 is far weaker (recall@5 0.652 against 0.904). Until then the default was k 60, weight 3
(Weaviate's alpha 0.75), picked on the two sets it was reported on. An index option,
``hybrid_vector_weight``, changes the weight (the rank constant stays 10).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # base.py imports this module (its search fuses here): no import back at run time
    from include.index.base import SearchHit

__all__ = [
    "DEFAULT_RANK_CONSTANT",
    "DEFAULT_VECTOR_WEIGHT",
    "HYBRID_RANK_CONSTANT",
    "check_vector_weight",
    "fuse_hybrid",
    "hybrid_depth",
    "reciprocal_rank_fusion",
]

DEFAULT_RANK_CONSTANT = 60  # the paper's k: damps the weight of the very top ranks
HYBRID_RANK_CONSTANT = 10  # hybrid search's (module docstring): the top ranks count more
DEFAULT_VECTOR_WEIGHT = 2.0  # hybrid search's vector weight (module docstring)


def reciprocal_rank_fusion(
    rankings: Mapping[str, Sequence[SearchHit]],
    k: int,
    rank_constant: int = DEFAULT_RANK_CONSTANT,
    weights: Mapping[str, float] | None = None,
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
    weight = dict(weights or {})
    fused = {
        cid: sum(weight.get(name, 1.0) / (rank_constant + r) for name, r in by_name.items())
        for cid, by_name in ranks.items()
    }
    order = sorted(fused, key=lambda cid: (-fused[cid], min(ranks[cid].values()), cid))
    return [dataclasses.replace(first[cid], score=fused[cid], ranks=dict(ranks[cid])) for cid in order[:k]]


def fuse_hybrid(
    bm25: Sequence[SearchHit],
    vector: Sequence[SearchHit],
    k: int,
    vector_weight: float = DEFAULT_VECTOR_WEIGHT,
    rank_constant: int = HYBRID_RANK_CONSTANT,
) -> list[SearchHit]:
    """Hybrid search's fusion of its two rankings (both backends)."""
    return reciprocal_rank_fusion(
        {"bm25": bm25, "vector": vector}, k, rank_constant=rank_constant, weights={"vector": vector_weight}
    )


def check_vector_weight(value: object) -> float:
    """An index's ``hybrid_vector_weight`` option, checked (a positive number)."""
    try:
        weight = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"hybrid_vector_weight must be a number, not {value!r}") from None
    if not weight > 0 or weight == float("inf"):
        raise ValueError(f"hybrid_vector_weight must be a positive number, not {value!r}")
    return weight


def hybrid_depth(k: int) -> int:
    """How deep each ranking is read before fusing ``k`` hybrid hits (fusion needs overlap)."""
    return max(k * 4, 50)
