"""Chunks within the embedding model's input limit.

The chunker counts cl100k_base tokens; an embedding model counts its own, and e5's XLM-RoBERTa
tokenizer counts 12-17 % more on prose and up to 80 % more on SQL, code and option tables
(``plugins/embedders/registry.py``). Chunked at 512 cl100k tokens, 15 % of the PostgreSQL
manual's chunks were over the model's 512 and lost their tails. A source with an embedding
model is therefore chunked in two deterministic steps (a chunk's id stays a function of the
document and the configuration):

1. the chunker's ``chunk_token_num`` is lowered to the model's starting budget
   (:attr:`~plugins.embedders.registry.ChunkBudget.cl100k_tokens`) when the source asks for
   more; ``overlap_tokens`` and ``max_prefix_tokens`` are lowered with it to stay within the
   shares the chunker allows them (half, a quarter);
2. when the model's tokenizer is at hand, every chunk is counted with it, and a document with
   a chunk still over the limit is chunked again, the budget scaled by the limit over that
   worst chunk's count and rounded down to a multiple of 32 (so a small edit rarely moves it),
   at most :data:`MAX_RECHUNKS` times (one is the rule on real text; the last chunks are counted
   again by the embedder).

What is still over after that is cut by the embedder and recorded as a truncation (the run's
``chunks_truncated``): the rare exception. The chunker itself is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from include.config import SourceConfig
from include.contract import Chunk, ParsedDocument
from plugins.chunkers.registry import DEFAULT_CHUNK_TOKEN_NUM, chunk_document
from plugins.embedders.registry import ChunkBudget, chunk_budget

__all__ = ["BUDGET_STEP", "MAX_RECHUNKS", "budget_options", "chunk_for_source", "chunk_within", "smaller_budget"]

BUDGET_STEP = 32  # budgets are multiples of this (the chunker's least chunk_token_num too)
MAX_RECHUNKS = 3  # a smaller chunk can count more per cl100k token than the one it came from
_DEFAULT_CHUNK_TOKENS = DEFAULT_CHUNK_TOKEN_NUM


def budget_options(options: Mapping[str, Any], tokens: int) -> dict[str, Any]:
    """``options`` with ``chunk_token_num`` at most ``tokens``, and the options bounded by a share
    of it (``overlap_tokens`` half, ``max_prefix_tokens`` a quarter) lowered to fit."""
    out = dict(options)
    limit = min(int(out.get("chunk_token_num", _DEFAULT_CHUNK_TOKENS)), tokens)
    out["chunk_token_num"] = limit
    if "overlap_tokens" in out:
        out["overlap_tokens"] = min(int(out["overlap_tokens"]), limit // 2)
    if out.get("max_prefix_tokens") is not None:
        out["max_prefix_tokens"] = min(int(out["max_prefix_tokens"]), limit // 4)
    return out


def smaller_budget(tokens: int, limit: int, worst: int) -> int:
    """The budget for a second chunking: ``tokens`` scaled by ``limit / worst`` (the worst chunk's
    model tokens), rounded down to a multiple of :data:`BUDGET_STEP`, at least one step."""
    scaled = tokens * limit // worst
    return max(BUDGET_STEP, min(scaled, tokens - 1) // BUDGET_STEP * BUDGET_STEP)


def chunk_within(
    doc: ParsedDocument, doc_id: str, name: str, options: Mapping[str, Any], budget: ChunkBudget
) -> list[Chunk]:
    """``doc``'s chunks within ``budget`` (the module docstring's two steps)."""
    opts = budget_options(options, budget.cl100k_tokens)
    chunks = chunk_document(doc, doc_id, name, opts)
    if budget.count is None:
        return chunks
    for _ in range(MAX_RECHUNKS):  # bounded: each round's budget is a step smaller at least
        worst = max((budget.count(c.text) for c in chunks), default=0)
        tokens = int(opts["chunk_token_num"])
        if worst <= budget.model_tokens or tokens <= BUDGET_STEP:
            break
        opts = budget_options(opts, smaller_budget(tokens, budget.model_tokens, worst))
        chunks = chunk_document(doc, doc_id, name, opts)
    return chunks


def chunk_for_source(doc: ParsedDocument, doc_id: str, source: SourceConfig) -> list[Chunk]:
    """``doc`` chunked as ``source`` says, within its embedding model's input limit if it has one."""
    budget = chunk_budget(source.embedding)
    if budget is None:
        return chunk_document(doc, doc_id, source.chunker.name, source.chunker.options)
    return chunk_within(doc, doc_id, source.chunker.name, source.chunker.options, budget)
