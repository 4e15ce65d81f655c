"""Part (a) of ``python -m benchmarks acl``: search latency with the access filter vs without.

50,000 chunks (5,000 documents x 10; ``--quick``: 10,000) in the SQLite index, each document
holding one of 400 team groups, 45% of them also a tenant-wide entry, 1% public. Two searchers,
both members of 20 groups: a *narrow* one (an outside collaborator: the 20 groups only, ~6% of
the documents) and a *broad* one (the same groups plus the tenant, ~50%). Each query runs
unfiltered (``access=None``, the peer: what every search did before issue 35) and as each
searcher, interleaved query by query so drift hits both sides alike.

Vectors are random unit vectors of 384 dimensions (the local model's, multilingual-e5-small):
latency does not depend on what the vectors mean; the query vector is another random one.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from include.acl import PUBLIC, group_entry, tenant_entry, user_entry
from include.contract import Chunk, content_chunk_id, document_id, text_hash
from include.index.base import DocumentRecord, DocumentWrite, SearchMode
from include.index.sqlite_fts import SqliteFtsIndex
from include.vectors import VectorSet

DIMS = 384  # multilingual-e5-small, the local provider's model
CHUNKS_PER_DOC = 10
TEAMS = 400
SEARCHER_GROUPS = 20
TENANT_SHARE, PUBLIC_SHARE = 0.45, 0.01
SOURCE = "bench:acl"
MODEL = "bench/random-384"
TENANT = tenant_entry("feishu", "tenant_bench")
_WORDS = [
    "airflow",
    "schedules",
    "incremental",
    "sync",
    "knowledge",
    "sources",
    "search",
    "index",
    "workers",
    "fetch",
    "parse",
    "chunk",
    "upsert",
    "documents",
    "retries",
    "backoff",
    "lineage",
    "content",
    "hashes",
    "reservoir",
    "sluice",
    "weir",
    "towpath",
    "canal",
    "lock",
    "gate",
    "ladder",
]
_RARE = [f"term{i:04d}" for i in range(3000)]  # a rarer word per chunk: queries that are selective too


def _unit(rng: np.random.Generator, n: int) -> npt.NDArray[np.float32]:
    m = rng.standard_normal((n, DIMS)).astype(np.float32)
    unit: npt.NDArray[np.float32] = (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)
    return unit


def _entries(rng: random.Random) -> tuple[str, ...]:
    if rng.random() < PUBLIC_SHARE:
        return (PUBLIC,)
    found = {group_entry("feishu_chat", f"oc_team{rng.randrange(TEAMS):03d}")}
    if rng.random() < TENANT_SHARE:
        found.add(TENANT)
    if rng.random() < 0.3:  # a named person too, as shares often have
        found.add(user_entry("email", f"user{rng.randrange(2000)}@example.com"))
    return tuple(sorted(found))


def _writes(n_docs: int, seed: int) -> list[DocumentWrite]:
    rng, vrng = random.Random(seed), np.random.default_rng(seed)
    writes = []
    for d in range(n_docs):
        key = f"docs/{d:06d}"
        doc_id = document_id(SOURCE, key)
        chunks = []
        for s in range(CHUNKS_PER_DOC):
            text = " ".join([*rng.choices(_WORDS, k=40), rng.choice(_RARE)])
            digest = text_hash(text)
            chunks.append(
                Chunk(
                    chunk_id=content_chunk_id(doc_id, digest), doc_id=doc_id, sequence=s, text=text,
                    token_count=41, text_hash=digest, heading_path=[], metadata={},
                )
            )  # fmt: skip
        doc = DocumentRecord(
            source=SOURCE, doc_id=doc_id, item_key=key, title=f"Doc {d}", url=f"http://127.0.0.1/{key}",
            media_type="text/markdown", doc_version="v1", run_id="bench", access=_entries(rng),
        )  # fmt: skip
        vectors = VectorSet(MODEL, DIMS, [c.chunk_id for c in chunks], _unit(vrng, CHUNKS_PER_DOC))
        writes.append(DocumentWrite(doc, chunks, vectors=vectors))
    return writes


def _searchers() -> dict[str, frozenset[str] | None]:
    groups = {group_entry("feishu_chat", f"oc_team{i:03d}") for i in range(0, TEAMS, TEAMS // SEARCHER_GROUPS)}
    me = user_entry("email", "user7@example.com")
    return {
        "unfiltered": None,
        "narrow (20 groups)": frozenset({PUBLIC, me, *groups}),
        "broad (20 groups + tenant)": frozenset({PUBLIC, me, TENANT, *groups}),
    }


def _share(writes: list[DocumentWrite], access: Collection[str] | None) -> float:
    if access is None:
        return 1.0
    return sum(1 for w in writes if set(w.document.access) & set(access)) / len(writes)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _measure(index: SqliteFtsIndex, mode: SearchMode, queries: int, seed: int) -> dict[str, list[float]]:
    rng, vrng = random.Random(seed), np.random.default_rng(seed)
    searchers = _searchers()
    times: dict[str, list[float]] = {name: [] for name in searchers}
    for i in range(queries + 5):  # the first 5 warm the page cache, not counted
        text = " ".join([*rng.sample(_WORDS, 2), rng.choice(_RARE)])
        vector = _unit(vrng, 1)[0] if mode != "bm25" else None
        for name, access in searchers.items():
            start = time.perf_counter()
            hits = index.search(text, k=10, mode=mode, query_vector=vector, access=access)
            elapsed = time.perf_counter() - start
            assert len(hits) == 10, (mode, name, len(hits))  # k permitted hits exist for everyone
            if i >= 5:
                times[name].append(elapsed * 1000)
    return times


def run_search(workdir: Path, quick: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows per (mode, searcher) and the headline numbers."""
    n_docs, queries = (1_000, 30) if quick else (5_000, 150)
    writes = _writes(n_docs, seed=35)
    index = SqliteFtsIndex(workdir / "acl-search.db", index_name="bench")
    start = time.perf_counter()
    for begin in range(0, len(writes), 100):
        index.upsert(writes[begin : begin + 100])
    load_s = time.perf_counter() - start
    rows: list[dict[str, Any]] = []
    worst = 0.0
    try:
        for mode in ("bm25", "vector", "hybrid"):
            times = _measure(index, mode, queries, seed=len(rows) + 1)
            base95 = _pct(times["unfiltered"], 0.95)
            for name, values in times.items():
                p95 = _pct(values, 0.95)
                ratio = p95 / base95 if base95 else 0.0
                if name != "unfiltered":
                    worst = max(worst, ratio)
                rows.append(
                    {
                        "part": "a. search latency",
                        "case": f"{mode}, {name}",
                        "docs readable": f"{_share(writes, _searchers()[name]):.1%}",
                        "p50 ms": round(statistics.median(values), 2),
                        "p95 ms": round(p95, 2),
                        "p95 / unfiltered": round(ratio, 2),
                    }
                )
    finally:
        index.close()
    facts = {"chunks": n_docs * CHUNKS_PER_DOC, "queries": queries, "load_s": round(load_s, 1), "worst_ratio": worst}
    return rows, facts
