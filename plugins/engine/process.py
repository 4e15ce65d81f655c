"""Stages 2-5 for one batch: fetch -> parse -> chunk -> upsert.

Each function takes the previous stage's manifest path and returns its own manifest path.
One item's failure is recorded in the manifest (with its stage and reason) and never fails
the batch; only infrastructure errors (staging unreadable, index unreachable) raise, so
Airflow's task retries handle them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from include.config import SourceConfig
from include.contract import Chunk, ParsedDocument, ParseError, ParseErrorCode, document_id
from include.index import DocumentRecord, DocumentWrite, IndexBackend
from include.staging import StagingArea, StagingCorruptError
from plugins.chunkers.registry import chunk_document
from plugins.connectors.base import Connector
from plugins.engine.lineage import parser_warnings
from plugins.engine.manifests import (
    ItemFailure,
    corrupt_failure,
    load_raw,
    read_batch,
    read_manifest,
    write_fetched_manifest,
    write_stage_manifest,
)
from plugins.parsers.registry import parse_document

__all__ = ["chunk_stage", "fetch_stage", "parse_stage", "upsert_stage"]


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 2)


def _carry(manifest: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": manifest["run_id"],
        "source": manifest["source"],
        "batch": manifest["batch"],
        "unchanged": list(manifest.get("unchanged", [])),
        "failures": list(manifest.get("failures", [])),
    }


def _failure(entry: dict[str, Any], stage: str, reason: str, error: str, retryable: bool = True) -> dict[str, Any]:
    return ItemFailure(entry["change"]["item_key"], reason, error, retryable, stage).to_dict()


# ----------------------------------------------------------------------------------- fetch


def fetch_stage(batch_path: str, connector: Connector) -> str:
    """Generic fetch: ``connector.fetch_batch`` over the batch's changes."""
    fetched, errors = connector.fetch_batch(read_batch(batch_path))
    failures = [ItemFailure(key, exc.reason, str(exc), exc.retryable, "fetch") for key, exc in errors]
    return write_fetched_manifest(batch_path, fetched, failures)


# ----------------------------------------------------------------------------------- parse


def parse_stage(fetched_path: str, source: SourceConfig) -> str:
    """Parse every fetched item; drop items whose extracted content did not change."""
    manifest = read_manifest(fetched_path)
    out = _carry(manifest)
    staging = StagingArea.at(Path(fetched_path).parent)
    items = []
    for entry in manifest["items"]:
        start = time.perf_counter()
        try:
            doc = parse_document(load_raw(entry), source.parser)
        except StagingCorruptError as exc:
            out["failures"].append(corrupt_failure(entry["change"]["item_key"], exc).to_dict())
            continue
        except ParseError as exc:
            # Retrying only helps when the bytes may parse next time (a timeout, a corrupt download);
            # an encrypted or unsupported file fails the same way until it changes at the source.
            retryable = exc.code in (ParseErrorCode.TIMEOUT, ParseErrorCode.CORRUPT)
            failure = _failure(entry, "parse", f"parse:{exc.code.value}", exc.message, retryable)
            if warnings := parser_warnings(exc.details):  # a fully scanned PDF's needs_ocr: to lineage
                failure["warnings"] = warnings
            out["failures"].append(failure)
            continue
        digest = doc.content_hash()
        entry = {
            **entry,
            "content_hash": digest,
            "parser": doc.parser,
            "parser_version": doc.parser_version,
            "blocks": len(doc.blocks),
            "chars": sum(len(b.text) for b in doc.blocks),
            "title": doc.title or entry["raw"].get("title"),
            "warnings": parser_warnings(doc.metadata),  # needs_ocr, truncated ...: to lineage
            "stage_ms": {**entry.get("stage_ms", {}), "parse": _ms(start)},
        }
        prior = entry.get("prior") or {}
        if not entry.get("forced") and prior.get("version") and prior.get("content_hash") == digest:
            # Bytes changed but extracted content did not (timestamps, tokens, CDN rewrites).
            entry["reason"] = "content hash unchanged"
            out["unchanged"].append(entry)
            continue
        key = entry["change"]["item_key"]
        parsed = staging.put_json(f"parsed/{document_id(source.source_id, key)}.json", doc.to_dict())
        entry["parsed_path"], entry["parsed_digest"] = parsed.path, parsed.digest()
        items.append(entry)
    out["items"] = items
    return write_stage_manifest(fetched_path, "parsed", out)


# ----------------------------------------------------------------------------------- chunk


def chunk_stage(parsed_path: str, source: SourceConfig) -> str:
    manifest = read_manifest(parsed_path)
    out = _carry(manifest)
    staging = StagingArea.at(Path(parsed_path).parent)
    items = []
    for entry in manifest["items"]:
        start = time.perf_counter()
        # a renamed item keeps the doc id it was indexed under (its chunk ids follow from it)
        doc_id = (entry.get("prior") or {}).get("doc_id") or document_id(source.source_id, entry["change"]["item_key"])
        try:
            doc = ParsedDocument.from_dict(
                StagingArea.read_json_verified(entry["parsed_path"], entry.get("parsed_digest"))
            )
            chunks = chunk_document(doc, doc_id, source.chunker.name, source.chunker.options)
        except StagingCorruptError as exc:
            out["failures"].append(corrupt_failure(entry["change"]["item_key"], exc).to_dict())
            continue
        except Exception as exc:  # a chunker failure is this document's, not the batch's
            out["failures"].append(_failure(entry, "chunk", "chunk_error", f"{type(exc).__name__}: {exc}"))
            continue
        staged = staging.put_json(f"chunks/{doc_id}.json", [c.to_dict() for c in chunks])
        meta = chunks[0].metadata if chunks else {}
        items.append(
            {
                **entry,
                "doc_id": doc_id,
                "chunks_path": staged.path,
                "chunks_digest": staged.digest(),
                "chunk_ids": [c.chunk_id for c in chunks],
                "chunker": meta.get("chunker", source.chunker.name),
                "chunker_options_hash": meta.get("chunker_options_hash"),
                "stage_ms": {**entry.get("stage_ms", {}), "chunk": _ms(start)},
            }
        )
    out["items"] = items
    return write_stage_manifest(parsed_path, "chunked", out)


# ----------------------------------------------------------------------------------- upsert


def _doc_version(version: dict[str, Any]) -> str | None:
    for key in ("revision", "etag", "modified_time", "last_modified"):
        if version.get(key):
            return f"{key}:{version[key]}"
    return None


_INDEXED_METADATA = ("breadcrumbs", "language", "description", "author", "modified_time", "repo", "folder")


def _doc_metadata(raw_metadata: dict[str, Any]) -> dict[str, Any]:
    """The few source metadata fields worth storing beside every chunk (small, searchable context)."""
    return {k: raw_metadata[k] for k in _INDEXED_METADATA if raw_metadata.get(k) not in (None, "", [])}


def upsert_stage(chunked_path: str, source: SourceConfig, index_factory: Callable[[], IndexBackend]) -> str:
    manifest = read_manifest(chunked_path)
    out = _carry(manifest)
    writes: list[DocumentWrite] = []
    entries: list[dict[str, Any]] = []
    for entry in manifest["items"]:
        try:
            staged = StagingArea.read_json_verified(entry["chunks_path"], entry.get("chunks_digest"))
        except StagingCorruptError as exc:
            out["failures"].append(corrupt_failure(entry["change"]["item_key"], exc).to_dict())
            continue
        chunks = [Chunk.from_dict(c) for c in staged]
        prior_ids = set((entry.get("prior") or {}).get("chunk_ids") or [])
        version = entry["raw"].get("version") or entry["change"].get("version") or {}
        record = DocumentRecord(
            source=source.source_id,
            doc_id=entry["doc_id"],
            item_key=entry["change"]["item_key"],
            title=entry.get("title"),
            url=entry["raw"].get("url") or entry["change"].get("url"),
            media_type=entry["raw"].get("media_type"),
            doc_version=_doc_version(version),
            content_hash=entry["content_hash"],
            run_id=manifest["run_id"],
            metadata=_doc_metadata(entry["raw"].get("metadata") or {}),
        )
        writes.append(DocumentWrite(record, chunks, sorted(prior_ids - {c.chunk_id for c in chunks})))
        entries.append(entry)
    items = []
    if writes:
        start = time.perf_counter()
        index = index_factory()
        try:
            results = index.upsert(writes)
        finally:
            index.close()
        elapsed = _ms(start) / len(writes)
        for entry, write, result in zip(entries, writes, results, strict=True):
            if not result.ok:
                out["failures"].append(_failure(entry, "upsert", "index_error", result.error or "index write failed"))
                continue
            prior_ids = set((entry.get("prior") or {}).get("chunk_ids") or [])
            new_ids = [c.chunk_id for c in write.chunks]
            items.append(
                {
                    **entry,
                    "written": result.written,
                    "unchanged_chunks": result.unchanged,
                    "deleted_chunks": result.deleted,
                    "chunks_added": [i for i in new_ids if i not in prior_ids],
                    "chunks_kept": [i for i in new_ids if i in prior_ids],
                    "chunks_removed": write.stale_chunk_ids,
                    "stage_ms": {**entry.get("stage_ms", {}), "upsert": elapsed},
                }
            )
    out["items"] = items
    return write_stage_manifest(chunked_path, "upserted", out)
