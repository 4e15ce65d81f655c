"""Stages 2-5 for one batch: fetch -> parse -> chunk -> (embed, :mod:`plugins.engine.embed`) -> upsert.

Each function takes the previous stage's manifest path and returns its own manifest path.
One item's failure is recorded in the manifest (with its stage and reason) and never fails
the batch; only infrastructure errors (staging unreadable, index unreachable) raise, so
Airflow's task retries handle them.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from include.acl import ACL_UNKNOWN, AccessControl
from include.config import SourceConfig
from include.contract import (
    Change,
    Chunk,
    ParsedDocument,
    ParseError,
    ParseErrorCode,
    VersionEvidence,
    document_id,
)
from include.index import DocumentRecord, DocumentWrite, IndexBackend, UpsertResult
from include.staging import StagingArea, StagingCorruptError, StagingTooLargeError
from plugins.chunkers.registry import get_chunker
from plugins.connectors.base import AccessRequest, Connector
from plugins.engine.chunk_budget import chunk_for_source
from plugins.engine.lineage import parser_warnings
from plugins.engine.manifests import (
    ItemFailure,
    corrupt_failure,
    load_chunks,
    load_raw,
    load_vectors,
    read_batch,
    read_stage_manifest,
    write_fetched_manifest,
    write_stage_manifest,
)
from plugins.engine.packed import PackedReader, PackedWriter, UnstageableError
from plugins.engine.records import BatchManifest, ChunkOutcome, ItemRecord, ParseOutcome, StagedRef, UpsertOutcome
from plugins.parsers.registry import parse_document

if TYPE_CHECKING:
    from plugins.engine.early import EarlyWork

__all__ = [
    "chunk_outcome",
    "chunk_stage",
    "fetch_stage",
    "parse_outcome",
    "parse_stage",
    "read_batch_access",
    "upsert_stage",
]

log = logging.getLogger("tributary")


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 2)


def _timed(item: ItemRecord, stage: str, start: float, **outcome: Any) -> ItemRecord:
    """The item with one more stage's outcome and its time."""
    return dataclasses.replace(item, stage_ms={**item.stage_ms, stage: _ms(start)}, **outcome)


# ----------------------------------------------------------------------------------- fetch


def fetch_stage(batch_path: str, connector: Connector) -> str:
    """Generic fetch: ``connector.fetch_batch`` over the batch's changes, then the fetched
    items' permissions (one ``read_access`` call for the batch, the connector still open)."""
    changes = read_batch(batch_path)
    fetched, errors = connector.fetch_batch(changes)
    failures = [ItemFailure(key, exc.reason, str(exc), exc.retryable, "fetch") for key, exc in errors]
    got = {raw.item_key for raw in fetched}
    access = read_batch_access(connector, [c for c in changes if c.item_key in got])
    return write_fetched_manifest(batch_path, fetched, failures, access=access)


def read_batch_access(connector: Connector, changes: Sequence[Change]) -> dict[str, dict[str, Any]]:
    """The permissions of a batch's items by key, as ``AccessControl.to_dict()`` (what the
    manifest stores). Fail-closed: a ``read_access`` that raises makes every item of the batch
    unknown (private, ``acl_unknown``) and an item missing from its answer is unknown too;
    nothing here ever makes an item public that the connector did not say is."""
    if not changes:
        return {}
    requests = [AccessRequest(c.item_key, c.url, dict(c.metadata or {})) for c in changes]
    try:
        found = connector.read_access(requests)
    except Exception as exc:  # a connector's failure to read permissions is the items', never the batch's
        warning = f"reading permissions failed: {type(exc).__name__}: {exc}"[:500]
        log.warning("%s: %s", connector.source.source_id, warning)
        found = {c.item_key: AccessControl.unknown(ACL_UNKNOWN, warning) for c in changes}
    missing = AccessControl.unknown(ACL_UNKNOWN, "the connector returned no permissions for this item")
    out: dict[str, dict[str, Any]] = {}
    for change in changes:
        access = found.get(change.item_key)
        out[change.item_key] = (access if isinstance(access, AccessControl) else missing).to_dict()
    return out


# ----------------------------------------------------------------------------------- parse


def _parse_failure(item: ItemRecord, exc: ParseError) -> ItemFailure:
    # Retrying only helps when the bytes may parse next time (a timeout, a corrupt download);
    # an encrypted or unsupported file fails the same way until it changes at the source.
    retryable = exc.code in (ParseErrorCode.TIMEOUT, ParseErrorCode.CORRUPT)
    warnings = parser_warnings(exc.details) or None  # a fully scanned PDF's needs_ocr: to lineage
    return ItemFailure(item.item_key, f"parse:{exc.code.value}", exc.message, retryable, "parse", warnings)


def _fetch_facts(metadata: dict[str, Any]) -> dict[str, Any]:
    """What the connector did to get the bytes that lineage shows beside the parser's warnings:
    a web page rendered in headless Chromium (the crawler's record, not the page's own DOM)."""
    if not metadata.get("rendered"):
        return {}
    return {"rendered": f"chromium {int(metadata.get('render_ms') or 0)} ms"}


def _content_unchanged(item: ItemRecord, digest: str) -> bool:
    """Bytes changed but extracted content did not (timestamps, tokens, CDN rewrites)."""
    prior = item.prior
    return not item.forced and prior is not None and prior.has_version and prior.content_hash == digest


def parse_stage(fetched_path: str, source: SourceConfig, early: EarlyWork | None = None) -> str:
    """Parse every fetched item; drop items whose extracted content did not change.

    ``early``: documents parsed while the crawl fetched (:mod:`plugins.engine.early`), taken
    for exactly the bytes and fields loaded here. Each parsed document is encoded into the batch's current part as soon as it is parsed
    (:class:`~plugins.engine.packed.PackedWriter`), so the stage holds one part and about one
    document, not the batch; a document too large to stage fails alone."""
    manifest = read_stage_manifest(fetched_path)
    out = manifest.next("parsed")
    writer = PackedWriter(StagingArea.of(fetched_path), "parsed", out.batch)
    for item in manifest.items:
        _parse_into(out, item, source, writer, early)
    _point_at_parts(out.items, "parsed", writer.close())
    return write_stage_manifest(fetched_path, out)


def _parse_into(
    out: BatchManifest, item: ItemRecord, source: SourceConfig, writer: PackedWriter, early: EarlyWork | None
) -> None:
    """Parse one item into ``out``: its record (its document into ``writer``), an unchanged one,
    or its failure. A function of its own, so that its bytes and document go when it returns."""
    start = time.perf_counter()
    stage: Callable[[], ItemFailure | None]  # stages the document into the part
    taken = early.parsed(item) if early is not None else None
    if taken is not None:  # parsed from the very bytes and fields the fetched manifest records
        assert item.raw is not None
        outcome, encoded = _with_fetch_facts(taken[0], item, item.raw.metadata), taken[1]
        stage = lambda: _stage_encoded(writer, item.item_key, encoded, "parse")  # noqa: E731
    else:
        try:
            raw = load_raw(item)
            doc = parse_document(raw, source.parser)
        except StagingCorruptError as exc:
            out.failures.append(corrupt_failure(item.item_key, exc))
            return
        except ParseError as exc:
            out.failures.append(_parse_failure(item, exc))
            return
        outcome = _with_fetch_facts(parse_outcome(doc, doc.content_hash()), item, raw.metadata)
        del raw  # its bytes are not needed while the document is encoded
        stage = lambda: _stage_output(writer, item.item_key, doc, "parse")  # noqa: E731
    if _content_unchanged(item, outcome.content_hash):
        out.unchanged.append(_timed(item, "parse", start, parsed=outcome, unchanged_reason="content hash unchanged"))
    elif (failure := stage()) is not None:
        out.failures.append(failure)
    else:
        out.items.append(_timed(item, "parse", start, parsed=outcome))


def parse_outcome(doc: ParsedDocument, digest: str) -> ParseOutcome:
    """What parsing records of ``doc`` itself (``digest``: its content hash); the item's title
    and the fetch's facts are added by :func:`_with_fetch_facts`."""
    return ParseOutcome(
        content_hash=digest,
        parser=doc.parser,
        parser_version=doc.parser_version,
        parser_engine=doc.engine,
        blocks=len(doc.blocks),
        chars=sum(len(b.text) for b in doc.blocks),
        title=doc.title,
        warnings=parser_warnings(doc.metadata),  # needs_ocr ...
    )


def _with_fetch_facts(outcome: ParseOutcome, item: ItemRecord, raw_metadata: dict[str, Any]) -> ParseOutcome:
    return dataclasses.replace(
        outcome,
        title=outcome.title or (item.raw.title if item.raw else None),
        warnings=outcome.warnings | _fetch_facts(raw_metadata),  # rendered ...
    )


def _stage_output(
    writer: PackedWriter, item_key: str, value: ParsedDocument | list[Chunk], stage: str
) -> ItemFailure | None:
    """Encode one item's output into the batch's part; the item's failure when staging refuses it
    (over the backend's cap per object, or not representable): as large next time, not retried."""
    try:
        writer.add(item_key, value)
    except (StagingTooLargeError, UnstageableError) as exc:
        return ItemFailure(item_key, exc.reason, str(exc), False, stage)
    return None


def _stage_encoded(writer: PackedWriter, item_key: str, encoded: bytes, stage: str) -> ItemFailure | None:
    """:func:`_stage_output` of an output encoded already (a worker's, ``plugins.engine.early``)."""
    try:
        writer.add_encoded(item_key, encoded)
    except StagingTooLargeError as exc:
        return ItemFailure(item_key, exc.reason, str(exc), False, stage)
    return None


def _point_at_parts(items: list[ItemRecord], stage: str, refs: dict[str, StagedRef]) -> None:
    """Point every staged item at the part holding its output (``parsed`` or ``chunked``)."""
    for item in items:
        outcome = getattr(item, stage)
        outcome.file = refs[item.item_key]


# ----------------------------------------------------------------------------------- chunk


def _chunks_of(item: ItemRecord, doc_id: str, source: SourceConfig, reader: PackedReader) -> list[Chunk]:
    parsed = item.parsed.file if item.parsed else None
    if parsed is None:
        raise ValueError(f"item {item.item_key!r} reached chunking without a staged parsed document")
    doc = reader.parsed(parsed, item.item_key)
    return chunk_for_source(doc, doc_id, source)  # within the embedding model's input limit


def chunk_stage(parsed_path: str, source: SourceConfig, early: EarlyWork | None = None) -> str:
    """Chunk every parsed item (``early``: the chunks of documents the parse stage took from
    there, chunked from the same staged form under the same doc id)."""
    manifest = read_stage_manifest(parsed_path)
    out = manifest.next("chunked")
    reader = PackedReader()
    writer = PackedWriter(StagingArea.of(parsed_path), "chunked", out.batch)
    for item in manifest.items:
        start = time.perf_counter()
        # a renamed item keeps the doc id it was indexed under (its chunk ids follow from it)
        doc_id = (item.prior.doc_id if item.prior else None) or document_id(source.source_id, item.item_key)
        taken = early.chunks(item.item_key, doc_id) if early is not None else None
        if taken is not None:  # chunked by a worker from this very document, under this doc id
            outcome, encoded = taken
            failure = _stage_encoded(writer, item.item_key, encoded, "chunk")
        else:
            try:
                chunks = _chunks_of(item, doc_id, source, reader)
            except StagingCorruptError as exc:
                out.failures.append(corrupt_failure(item.item_key, exc))
                continue
            except Exception as exc:  # a chunker failure is this document's, not the batch's
                out.failures.append(
                    ItemFailure(item.item_key, "chunk_error", f"{type(exc).__name__}: {exc}", True, "chunk")
                )
                continue
            failure = _stage_output(writer, item.item_key, chunks, "chunk")
            outcome = chunk_outcome(chunks, doc_id, source)
        if failure is not None:
            out.failures.append(failure)
            continue
        out.items.append(_timed(item, "chunk", start, chunked=outcome))
    _point_at_parts(out.items, "chunked", writer.close())
    return write_stage_manifest(parsed_path, out)


_UNSTAGED = StagedRef("", 0, "")


def chunk_outcome(chunks: list[Chunk], doc_id: str, source: SourceConfig) -> ChunkOutcome:
    """What chunking records of ``chunks`` (its ``file``: the part holding them, once written)."""
    meta = chunks[0].metadata if chunks else {}
    return ChunkOutcome(
        doc_id=doc_id,
        file=_UNSTAGED,
        chunk_ids=[c.chunk_id for c in chunks],
        chunker=str(meta.get("chunker", source.chunker.name)),
        chunker_options_hash=meta.get("chunker_options_hash"),
        chunker_version=str(meta.get("chunker_version") or get_chunker(source.chunker.name).version),
    )


# ----------------------------------------------------------------------------------- upsert


def _doc_version(version: VersionEvidence) -> str | None:
    for key in ("revision", "etag", "modified_time", "last_modified"):
        if value := getattr(version, key):
            return f"{key}:{value}"
    return None


_INDEXED_METADATA = ("breadcrumbs", "language", "description", "author", "modified_time", "repo", "folder")


def _doc_metadata(raw_metadata: dict[str, Any]) -> dict[str, Any]:
    """The few source metadata fields worth storing beside every chunk (small, searchable context)."""
    return {k: raw_metadata[k] for k in _INDEXED_METADATA if raw_metadata.get(k) not in (None, "", [])}


def _document_write(item: ItemRecord, source: SourceConfig, run_id: str, reader: PackedReader) -> DocumentWrite:
    """The index write of one chunked item, with its vectors when it was embedded
    (:class:`StagingCorruptError` if its chunks or vectors changed in staging)."""
    raw, parsed, chunked = item.raw, item.parsed, item.chunked
    if raw is None or parsed is None or chunked is None:
        raise ValueError(f"item {item.item_key!r} reached the upsert without being fetched, parsed and chunked")
    chunks = load_chunks(item, reader)
    prior_ids = set(item.prior.chunk_ids if item.prior else ())
    record = DocumentRecord(
        source=source.source_id,
        doc_id=chunked.doc_id,
        item_key=item.item_key,
        title=parsed.title,
        url=raw.url or item.change.url,
        media_type=raw.media_type,
        doc_version=_doc_version(item.observed_version),
        content_hash=parsed.content_hash,
        run_id=run_id,
        metadata=_doc_metadata(raw.metadata),
        # unknown (no entries: an unrestricted search only) when fetch did not read them
        access=AccessControl.from_dict(item.access).entries(),
    )
    stale = sorted(prior_ids - {c.chunk_id for c in chunks})
    return DocumentWrite(record, chunks, stale, vectors=load_vectors(item, chunks))


def _upsert_outcome(item: ItemRecord, write: DocumentWrite, result: UpsertResult) -> UpsertOutcome:
    prior_ids = set(item.prior.chunk_ids if item.prior else ())
    new_ids = [c.chunk_id for c in write.chunks]
    return UpsertOutcome(
        written=result.written,
        unchanged_chunks=result.unchanged,
        deleted_chunks=result.deleted,
        chunks_added=[i for i in new_ids if i not in prior_ids],
        chunks_kept=[i for i in new_ids if i in prior_ids],
        chunks_removed=write.stale_chunk_ids,
    )


def upsert_stage(chunked_path: str, source: SourceConfig, index_factory: Callable[[], IndexBackend]) -> str:
    """Write a batch's documents to the index; ``chunked_path`` is the batch's ``chunked``
    manifest, or its ``embedded`` one for a source with embedding enabled. The documents of one
    chunk part are written together, so the stage holds one part's chunks, not the batch's."""
    manifest = read_stage_manifest(chunked_path)
    out = manifest.next("upserted")
    index: IndexBackend | None = None
    try:
        for group in _writes_by_part(manifest, source, PackedReader(), out.failures):
            index = index or index_factory()
            _index_group(index, group, out)
    finally:
        if index is not None:
            index.close()
    return write_stage_manifest(chunked_path, out)


def _writes_by_part(
    manifest: BatchManifest, source: SourceConfig, reader: PackedReader, failures: list[ItemFailure]
) -> Iterator[list[tuple[ItemRecord, DocumentWrite]]]:
    """The batch's index writes, one list per chunk part (items come in part order); an item
    whose staged chunks or vectors fail their check is a failure instead."""
    group: list[tuple[ItemRecord, DocumentWrite]] = []
    part = None
    for item in manifest.items:
        try:
            write = _document_write(item, source, manifest.run_id, reader)
        except StagingCorruptError as exc:
            failures.append(corrupt_failure(item.item_key, exc))
            continue
        where = item.chunked.file.path if item.chunked else None
        if group and where != part:
            yield group
            group = []
        group.append((item, write))
        part = where
    if group:
        yield group


def _index_group(index: IndexBackend, group: list[tuple[ItemRecord, DocumentWrite]], out: BatchManifest) -> None:
    start = time.perf_counter()
    results = index.upsert([write for _, write in group])
    elapsed = _ms(start) / len(group)
    for (item, write), result in zip(group, results, strict=True):
        if not result.ok:
            error = result.error or "index write failed"
            out.failures.append(ItemFailure(item.item_key, "index_error", error, True, "upsert"))
            continue
        upserted = _upsert_outcome(item, write, result)
        out.items.append(dataclasses.replace(item, upserted=upserted, stage_ms={**item.stage_ms, "upsert": elapsed}))
