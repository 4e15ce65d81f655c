"""Reciprocal rank fusion (include.index.fusion)."""

from __future__ import annotations

from pathlib import Path

import pytest

from include.config import IndexConfig
from include.index.base import SearchHit, check_search_mode
from include.index.fusion import (
    DEFAULT_RANK_CONSTANT,
    DEFAULT_VECTOR_WEIGHT,
    HYBRID_RANK_CONSTANT,
    check_vector_weight,
    fuse_hybrid,
    hybrid_depth,
    reciprocal_rank_fusion,
)
from include.index.sqlite_fts import SqliteFtsIndex


def _hits(*ids: str, score: float = 9.0) -> list[SearchHit]:
    return [SearchHit(chunk_id=i, doc_id="d", source="s", score=score, text=f"text {i}") for i in ids]


def test_scores_are_the_sum_of_reciprocal_ranks_and_ranks_are_recorded() -> None:
    fused = reciprocal_rank_fusion({"bm25": _hits("a", "b", "c"), "vector": _hits("c", "a", "d")}, k=10)
    assert [h.chunk_id for h in fused] == ["a", "c", "b", "d"]
    by_id = {h.chunk_id: h for h in fused}
    assert by_id["a"].score == pytest.approx(1 / 61 + 1 / 62)
    assert by_id["c"].score == pytest.approx(1 / 63 + 1 / 61)
    assert by_id["b"].score == pytest.approx(1 / 62) and by_id["d"].score == pytest.approx(1 / 63)
    assert by_id["a"].ranks == {"bm25": 1, "vector": 2}
    assert by_id["d"].ranks == {"vector": 3}
    assert by_id["b"].text == "text b" and by_id["b"].doc_id == "d"  # the hit's fields travel


def test_k_rank_constant_and_duplicates() -> None:
    rankings = {"bm25": _hits("a", "b", "a"), "vector": _hits("b")}
    assert [h.chunk_id for h in reciprocal_rank_fusion(rankings, k=1)] == ["b"]
    assert reciprocal_rank_fusion(rankings, k=0) == []
    [a, _b] = sorted(reciprocal_rank_fusion(rankings, k=5, rank_constant=0), key=lambda h: h.chunk_id)
    assert a.score == pytest.approx(1.0) and a.ranks == {"bm25": 1}  # its second listing does not count
    with pytest.raises(ValueError):
        reciprocal_rank_fusion(rankings, k=5, rank_constant=-1)
    assert reciprocal_rank_fusion({}, k=5) == [] and reciprocal_rank_fusion({"bm25": []}, k=5) == []


def test_ties_break_by_best_rank_then_chunk_id_whatever_the_input_order() -> None:
    # b and c: rank 1 in one ranking and 3 in the other; a: rank 2 in both (a lower sum)
    one = {"x": _hits("b", "a", "c"), "y": _hits("c", "a", "b")}
    two = {"y": _hits("c", "a", "b"), "x": _hits("b", "a", "c")}
    assert [h.chunk_id for h in reciprocal_rank_fusion(one, 3)] == ["b", "c", "a"]
    assert [h.chunk_id for h in reciprocal_rank_fusion(two, 3)] == ["b", "c", "a"]
    # equal scores, equal best ranks: the chunk id decides
    assert [h.chunk_id for h in reciprocal_rank_fusion({"x": _hits("z"), "y": _hits("m")}, 2)] == ["m", "z"]


def test_the_input_hits_are_not_changed() -> None:
    bm25 = _hits("a")
    reciprocal_rank_fusion({"bm25": bm25}, 1)
    assert bm25[0].score == 9.0 and bm25[0].ranks == {}


def test_hybrid_depth_and_mode_checks() -> None:
    assert [hybrid_depth(k) for k in (1, 12, 13, 100)] == [50, 50, 52, 400]
    check_search_mode("bm25", None)
    check_search_mode("vector", object())
    with pytest.raises(ValueError, match="needs query_vector"):
        check_search_mode("hybrid", None)
    with pytest.raises(ValueError, match="unknown search mode"):
        check_search_mode("dense", object())


def test_weights_scale_a_rankings_share() -> None:
    bm25, vector = _hits("a", "b"), _hits("b", "a")
    # equal weights: a tie broken by the best rank, then the id
    assert [h.chunk_id for h in reciprocal_rank_fusion({"bm25": bm25, "vector": vector}, 2)] == ["a", "b"]
    # the vector ranking weighted 3x: its first hit wins, score 3/61 + 1/62
    fused = fuse_hybrid(bm25, vector, 2, vector_weight=3.0, rank_constant=60)
    assert [h.chunk_id for h in fused] == ["b", "a"]
    assert fused[0].score == pytest.approx(3 / 61 + 1 / 62) and fused[0].ranks == {"bm25": 2, "vector": 1}
    assert [h.chunk_id for h in fuse_hybrid(bm25, vector, 2, vector_weight=1.0, rank_constant=60)] == ["a", "b"]


@pytest.mark.parametrize("bad", [0, -1, "x", None, float("inf"), float("nan")])
def test_vector_weight_must_be_a_positive_number(bad: object) -> None:
    with pytest.raises(ValueError, match="hybrid_vector_weight"):
        check_vector_weight(bad)
    assert check_vector_weight("2.5") == 2.5


def test_sqlite_index_reads_its_vector_weight(tmp_path: Path) -> None:
    opened = SqliteFtsIndex.from_config(
        IndexConfig(options={"path": str(tmp_path / "i.db"), "hybrid_vector_weight": 1})
    )
    assert opened.hybrid_vector_weight == 1.0
    with pytest.raises(ValueError, match="hybrid_vector_weight"):
        SqliteFtsIndex.from_config(IndexConfig(options={"path": str(tmp_path / "j.db"), "hybrid_vector_weight": 0}))


def test_hybrid_search_fuses_by_the_rule_chosen_with_each_benchmark_set_held_out() -> None:
    """k 10, vector weight 2 (module docstring; benchmarks/_retrieval_fusion.py): the top ranks count
    more than under the paper's k 60, and the vector ranking twice the BM25 one (it was 3)."""
    assert (HYBRID_RANK_CONSTANT, DEFAULT_VECTOR_WEIGHT, DEFAULT_RANK_CONSTANT) == (10, 2.0, 60)
    bm25, vector = _hits("a", "b", "c"), _hits("c", "x", "y")
    fused = fuse_hybrid(bm25, vector, 3)
    # c: 1/13 + 2/11; then x (2/12) and y (2/13), both ahead of BM25's first, a (1/11)
    assert [h.chunk_id for h in fused] == ["c", "x", "y"]
    assert fused[0].score == pytest.approx(1 / 13 + 2 / 11)
    assert fuse_hybrid(bm25, vector, 3, 3.0, 60)[0].score == pytest.approx(1 / 63 + 3 / 61)
