"""Index upsert throughput: ``python -m benchmarks index [--quick]``.

Corpus: 10,000 documents x 10 chunks = 100,000 chunks (``--quick``: 1,000 x 10) of mixed
English/Chinese text (~60 words each), upserted in engine-sized batches of 50 documents.

Rows, per backend:
* ``initial``: every chunk new;
* ``no-change``: the same writes again; the hash check must skip every chunk (the row shows
  what was written: it must be 0);
* ``1% changed``: one chunk in every tenth document edited (new text, so a new content-derived
  id: the old one is stale), plus one more stale chunk removed.

Peer: "delete + reinsert" on the same SQLite backend, what an index without per-chunk content
hashes has to do to resync a document (drop its chunks, write them all again). Elasticsearch
rows are added when ``ELASTICSEARCH_URL`` is set (``refresh=false`` during the load, one
refresh at the end, a scratch alias removed afterwards).
"""

from __future__ import annotations

import os
import random
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from include.contract import Chunk, content_chunk_id, document_id, text_hash
from include.index.base import DocumentRecord, DocumentWrite, IndexBackend

BATCH_DOCS = 50
CHUNKS_PER_DOC = 10

_EN = [
    "airflow",
    "schedules",
    "incremental",
    "sync",
    "of",
    "knowledge",
    "sources",
    "into",
    "a",
    "search",
    "index",
    "while",
    "workers",
    "fetch",
    "parse",
    "chunk",
    "and",
    "upsert",
    "documents",
    "with",
    "retries",
    "backoff",
    "lineage",
    "and",
    "content",
    "hashes",
]
_ZH = list("知识库增量同步调度器文档解析分块索引检索向量标题段落表格版本哈希重试")


def _text(rng: random.Random, words: int = 60) -> str:
    parts = []
    for _ in range(words):
        if rng.random() < 0.25:
            parts.append("".join(rng.choice(_ZH) for _ in range(rng.randint(2, 4))))
        else:
            parts.append(rng.choice(_EN))
    return " ".join(parts)


def _corpus(n_docs: int, seed: int = 7) -> list[DocumentWrite]:
    rng = random.Random(seed)
    writes = []
    for d in range(n_docs):
        source, key = "bench:corpus", f"docs/{d:06d}.html"
        doc_id = document_id(source, key)
        chunks = []
        for s in range(CHUNKS_PER_DOC):
            text = _text(rng)
            chunks.append(
                Chunk(
                    chunk_id=content_chunk_id(doc_id, text_hash(text)),
                    doc_id=doc_id,
                    sequence=s,
                    text=text,
                    token_count=len(text.split()),
                    text_hash=text_hash(text),
                    heading_path=[f"Section {s // 3}"],
                    metadata={"chunker": "token", "chunker_version": "1", "chunker_options_hash": "bench"},
                )
            )
        doc = DocumentRecord(
            source=source,
            doc_id=doc_id,
            item_key=key,
            title=f"Document {d}",
            url=f"http://127.0.0.1/{key}",
            media_type="text/html",
            doc_version="v1",
            run_id="bench-1",
        )
        writes.append(DocumentWrite(doc, chunks))
    return writes


def _edited(writes: Sequence[DocumentWrite]) -> list[DocumentWrite]:
    """Every tenth document: chunk 0 rewritten (a new text, so a new id) and the last chunk dropped
    (both old ids stale)."""
    out = []
    for i, w in enumerate(writes):
        if i % 10:
            out.append(w)
            continue
        first = w.chunks[0]
        text = first.text + " edited"
        digest = text_hash(text)
        changed = Chunk(
            **{
                **first.to_dict(),
                "chunk_id": content_chunk_id(first.doc_id, digest),
                "positions": [],
                "text": text,
                "text_hash": digest,
            }
        )
        stale = [first.chunk_id, w.chunks[-1].chunk_id]
        out.append(DocumentWrite(w.document, [changed, *w.chunks[1:-1]], stale_chunk_ids=stale))
    return out


def _batches(writes: Sequence[DocumentWrite]) -> list[list[DocumentWrite]]:
    return [list(writes[i : i + BATCH_DOCS]) for i in range(0, len(writes), BATCH_DOCS)]


def _timed(upsert: Callable[[list[DocumentWrite]], list[Any]], writes: Sequence[DocumentWrite]) -> dict[str, Any]:
    written = unchanged = deleted = failed = 0
    start = time.perf_counter()
    for batch in _batches(writes):
        for r in upsert(batch):
            written += r.written
            unchanged += r.unchanged
            deleted += r.deleted
            failed += 0 if r.ok else 1
    seconds = time.perf_counter() - start
    chunks = sum(len(w.chunks) for w in writes)
    return {
        "seconds": round(seconds, 3),
        "chunks/s": round(chunks / seconds) if seconds else 0,
        "written": written,
        "unchanged": unchanged,
        "deleted": deleted,
        "failed_docs": failed,
    }


def _naive(index: IndexBackend) -> Callable[[list[DocumentWrite]], list[Any]]:
    """The peer: resync a document by deleting all its chunks and writing every chunk again."""

    def upsert(batch: list[DocumentWrite]) -> list[Any]:
        for w in batch:
            index.delete_documents(w.document.source, [w.document.doc_id])
        return index.upsert(batch)

    return upsert


PEER_DOCS = 1_000  # the peer is ~5x slower per chunk: it runs on the first 10,000 chunks


def _sqlite_rows(writes: list[DocumentWrite], edited: list[DocumentWrite], workdir: Path) -> list[dict[str, Any]]:
    from include.index.sqlite_fts import SqliteFtsIndex

    rows = []
    ours = SqliteFtsIndex(workdir / "ours.db", index_name="bench")
    for case, data in (("initial", writes), ("no-change", writes), ("1% changed", edited)):
        rows.append(
            {
                "backend": "sqlite (hash skip)",
                "case": case,
                "chunks": sum(len(w.chunks) for w in data),
                **_timed(ours.upsert, data),
            }
        )
    size = (workdir / "ours.db").stat().st_size
    ours.close()
    peer = SqliteFtsIndex(workdir / "peer.db", index_name="bench")
    writes, edited = writes[:PEER_DOCS], edited[:PEER_DOCS]
    rows.append({"backend": "sqlite (delete+reinsert)", "case": "initial", "chunks": 0, **_timed(peer.upsert, writes)})
    rows[-1]["chunks"] = sum(len(w.chunks) for w in writes)
    for case, data in (("no-change", writes), ("1% changed", edited)):
        rows.append(
            {
                "backend": "sqlite (delete+reinsert)",
                "case": case,
                "chunks": sum(len(w.chunks) for w in data),
                **_timed(_naive(peer), data),
            }
        )
    peer.close()
    rows[0]["db_MiB"] = round(size / 2**20, 1)
    return rows


def _es_rows(writes: list[DocumentWrite], edited: list[DocumentWrite], url: str) -> list[dict[str, Any]]:
    from elasticsearch import Elasticsearch

    from include.index._es_mapping import physical_index_pattern, template_name
    from include.index.elasticsearch import ElasticsearchIndex

    alias = f"tributary-bench-{uuid.uuid4().hex[:8]}"
    index = ElasticsearchIndex(Elasticsearch(url), alias, refresh="false")
    rows = []
    try:
        for case, data in (("initial", writes), ("no-change", writes), ("1% changed", edited)):
            row = _timed(index.upsert, data)
            start = time.perf_counter()
            index.refresh_now()
            row["refresh_s"] = round(time.perf_counter() - start, 3)
            rows.append({"backend": "elasticsearch", "case": case, "chunks": sum(len(w.chunks) for w in data), **row})
    finally:
        index.close()
        admin = Elasticsearch(url)
        admin.options(ignore_status=404).indices.delete(index=physical_index_pattern(alias))
        admin.options(ignore_status=404).indices.delete_index_template(name=template_name(alias))
        admin.close()
    return rows


def run(quick: bool) -> dict[str, Any]:
    n_docs = 1_000 if quick else 10_000
    writes = _corpus(n_docs)
    edited = _edited(writes)
    with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
        rows = _sqlite_rows(writes, edited, Path(tmp))
    url = os.environ.get("ELASTICSEARCH_URL")
    if url:
        rows += _es_rows(writes, edited, url)
    ours = {r["case"]: r for r in rows if r["backend"] == "sqlite (hash skip)"}
    peer = {r["case"]: r for r in rows if r["backend"] == "sqlite (delete+reinsert)"}
    summary = (
        f"SQLite FTS5: {ours['initial']['chunks/s']:,} chunks/s for the first load of {n_docs * CHUNKS_PER_DOC:,} chunks; "
        f"a no-change re-upsert checks {ours['no-change']['chunks/s']:,} chunks/s and writes "
        f"{ours['no-change']['written']} chunks ({ours['no-change']['chunks/s'] / peer['no-change']['chunks/s']:.0f}x the "
        f"chunks/s of delete+reinsert, which rewrites every chunk; peer measured on the first "
        f"{peer['no-change']['chunks']:,} chunks); 1% changed: "
        f"{ours['1% changed']['written']} written, {ours['1% changed']['deleted']} deleted in {ours['1% changed']['seconds']} s."
    )
    if not url:
        summary += " Elasticsearch: not measured (ELASTICSEARCH_URL not set; no server on this machine)."
    return {
        "title": "Index upsert (SQLite FTS5, Elasticsearch)",
        "peer": "delete+reinsert on SQLite",
        "rows": rows,
        "summary": summary,
    }
