"""Choosing hybrid search's fusion rule by leave-one-set-out, for the retrieval benchmark.

A rule is reciprocal rank fusion with a rank constant and a vector weight
(:func:`include.index.fusion.fuse_hybrid`); the candidates are a small grid around plain RRF
(weight 1, k 60; Cormack et al. 2009). A rule is judged on a set by its *margin*: hybrid's
recall@5 and MRR@10 minus the better of bm25 and vector alone on that metric, the smaller of the
two (hybrid must be at least as good as the better of its inputs on both). For each set in turn,
the rule is chosen on the *other* sets (the best worst-set margin; then the best mean margin; then
the rule nearest plain RRF) and reported on the held-out set, which it never saw. The default
the index ships is the rule chosen on all sets, when every fold agrees with it.

Rankings are read once per query from the index (bm25 and vector, as deep as hybrid search
reads them: :func:`~include.index.fusion.hybrid_depth`), so trying a rule costs no search.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from include.index.base import SearchHit
from include.index.fusion import DEFAULT_VECTOR_WEIGHT, HYBRID_RANK_CONSTANT, fuse_hybrid

__all__ = [
    "PREVIOUS",
    "RULES",
    "SHIPPED",
    "FoldResult",
    "FusionRule",
    "ScoreTable",
    "SetRankings",
    "choose_rule",
    "leave_one_set_out",
    "set_scores",
]

Metric = Callable[[Sequence[str], frozenset[str]], float]  # (document ranking, relevant ids) -> score


@dataclass(frozen=True, slots=True)
class FusionRule:
    rank_constant: int
    vector_weight: float

    @property
    def label(self) -> str:
        return f"RRF k={self.rank_constant}, vector weight {self.vector_weight:g}"

    def distance_from_plain_rrf(self) -> float:
        """How far from weight 1, k 60 (ties between equally good rules go to the plainer one)."""
        return abs(self.vector_weight - 1.0) + abs(self.rank_constant - 60) / 60


RULES: tuple[FusionRule, ...] = tuple(
    FusionRule(k, w) for k in (10, 30, 60, 120) for w in (0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
)
PREVIOUS = FusionRule(60, 3.0)  # the default until issue 32, picked on the sets it was reported on
SHIPPED = FusionRule(HYBRID_RANK_CONSTANT, DEFAULT_VECTOR_WEIGHT)  # the index's default now


@dataclass(slots=True)
class SetRankings:
    """One set's queries: the relevant documents and both rankings' chunk hits, best first."""

    name: str
    doc_of: dict[str, str]  # chunk id -> document id
    relevant: list[frozenset[str]] = field(default_factory=list)
    bm25: list[list[SearchHit]] = field(default_factory=list)
    vector: list[list[SearchHit]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Scores:
    recall: float
    mrr: float


def set_scores(
    rankings: SetRankings,
    mode: str | FusionRule,
    candidates: int,
    to_documents: Callable[[Sequence[str]], list[str]],
    recall: Metric,
    mrr: Metric,
) -> Scores:
    """Mean recall and MRR of ``mode`` (``"bm25"``, ``"vector"`` or a fusion rule) over the set."""
    recalls, rrs = [], []
    for relevant, bm25, vector in zip(rankings.relevant, rankings.bm25, rankings.vector, strict=True):
        if mode == "bm25":
            hits = bm25[:candidates]
        elif mode == "vector":
            hits = vector[:candidates]
        else:
            assert isinstance(mode, FusionRule)
            hits = fuse_hybrid(bm25, vector, candidates, mode.vector_weight, mode.rank_constant)
        ranking = to_documents([rankings.doc_of[h.chunk_id] for h in hits])
        recalls.append(recall(ranking, relevant))
        rrs.append(mrr(ranking, relevant))
    return Scores(statistics.fmean(recalls), statistics.fmean(rrs))


@dataclass(frozen=True, slots=True)
class FoldResult:
    held_out: str
    rule: FusionRule  # chosen on the other sets
    bm25: Scores
    vector: Scores
    hybrid: Scores  # the chosen rule on the held-out set
    previous: Scores  # the default before this choice, on the held-out set

    @property
    def margin(self) -> float:
        return _margin(self.bm25, self.vector, self.hybrid)


def _margin(bm25: Scores, vector: Scores, hybrid: Scores) -> float:
    return min(hybrid.recall - max(bm25.recall, vector.recall), hybrid.mrr - max(bm25.mrr, vector.mrr))


ScoreTable = dict[str, dict[str | FusionRule, Scores]]  # set name -> mode or rule -> scores


def choose_rule(table: ScoreTable, sets: Sequence[str], rules: Sequence[FusionRule] = RULES) -> FusionRule:
    """The rule with the best worst margin over ``sets``, then the best mean margin, then plain-RRF-nearest."""

    def key(rule: FusionRule) -> tuple[float, float, float]:
        margins = [_margin(table[s]["bm25"], table[s]["vector"], table[s][rule]) for s in sets]
        # rounded: a difference below one query in a thousand is no reason to leave plain RRF
        return (round(min(margins), 3), round(statistics.fmean(margins), 3), -rule.distance_from_plain_rrf())

    return max(rules, key=key)


def leave_one_set_out(table: ScoreTable, rules: Sequence[FusionRule] = RULES) -> list[FoldResult]:
    """For each set: the rule chosen on the others, scored on it."""
    folds = []
    for held_out in table:
        rule = choose_rule(table, [s for s in table if s != held_out], rules)
        row = table[held_out]
        folds.append(FoldResult(held_out, rule, row["bm25"], row["vector"], row[rule], row[PREVIOUS]))
    return folds


def score_table(
    sets: Sequence[SetRankings],
    candidates: int,
    to_documents: Callable[[Sequence[str]], list[str]],
    recall: Metric,
    mrr: Metric,
    rules: Sequence[FusionRule] = RULES,
) -> ScoreTable:
    """Every set's scores for bm25, vector and every rule (and the previous and shipped defaults)."""
    modes: list[str | FusionRule] = ["bm25", "vector", *dict.fromkeys([*rules, PREVIOUS, SHIPPED])]
    return {s.name: {m: set_scores(s, m, candidates, to_documents, recall, mrr) for m in modes} for s in sets}
