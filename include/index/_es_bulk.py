"""Bulk writes for the Elasticsearch backend: chunk documents, write plans, and their sending.

The builders are pure: ``elasticsearch.py`` feeds them what it read (existing stamps and chunk
ids). ``run_bulk`` hands the resulting ops to ``elasticsearch.helpers.streaming_bulk``, which
chunks them by count and bytes and retries rejected items, and turns its answers into per-document
outcomes.

Write order (the ``IndexBackend`` contract): a document's new chunks go first; its stale chunks
are deleted only once every one of its writes is confirmed. A document with nothing to write
(its text shrank, the kept chunks are unchanged) gets its deletes in the first bulk, so the
common cases need a single round trip.

Vectors ride in the chunk's index op (``embedding``, ``embedding_model``). A kept chunk (same
text and place) is not re-sent: when only its ``sequence`` moved, or its vector is missing or
of another model, a partial ``update`` carries just that (``update_op``); a chunk whose write
has no vector loses its stored one by a script update. Both count as unchanged, not written.

Access: every chunk carries its document's entries (``acl``, keyword) and ``public`` (boolean);
a kept chunk whose stored entries differ from the write's gets them in its partial update (a
re-upsert with other entries updates them even when no chunk text changed).
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from elasticsearch import Elasticsearch
from elasticsearch.helpers import streaming_bulk

from include.contract import Chunk
from include.index._es_acl import access_fields, stored_access, with_access
from include.index._es_mapping import LEGACY_TEXT_HASH_FIELD, VECTOR_FIELD
from include.index._es_vectors import kept_update, vector_json
from include.index._vector_checks import VectorWriteError, document_vectors
from include.index.base import DocumentRecord, DocumentWrite, normalize_entries

__all__ = [
    "STAMP_FIELDS",
    "STATE_FIELDS",
    "BulkOp",
    "BulkReport",
    "ItemOutcome",
    "WritePlan",
    "build_chunk_source",
    "chunk_stamp",
    "classify_item",
    "delete_op",
    "index_op",
    "plan_writes",
    "run_bulk",
    "source_to_record",
    "stored_access",
    "stored_stamp",
    "stored_state",
    "update_op",
]

log = logging.getLogger("include.index.elasticsearch")

# Statuses worth sending again: too many requests (es_rejected_execution_exception: a full
# write thread pool queue) and server-side failures. Everything else (mapping errors, 400s) is
# the document's fault and would fail the same way again.
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
RETRYABLE_ERROR_TYPES = frozenset({"es_rejected_execution_exception", "circuit_breaking_exception"})


# --------------------------------------------------------------------------- documents


def _file_name(doc: DocumentRecord) -> str:
    """MemoryBear's ``docnm_kwd`` is the original file name: take the connector's if it gave one."""
    for key in ("file_name", "filename", "name"):
        value = doc.metadata.get(key)
        if isinstance(value, str) and value:
            return value
    key = doc.item_key.rstrip("/")
    return key.rsplit("/", 1)[-1] or doc.item_key


def _positions(chunk: Chunk) -> tuple[list[int], list[list[int]], list[int]]:
    """Project contract positions onto MemoryBear's page_num_int / position_int / top_int."""
    pages: list[int] = []
    boxes: list[list[int]] = []
    tops: list[int] = []
    for pos in chunk.positions:
        page = pos.page if pos.page is not None else pos.slide
        if page is not None and page not in pages:
            pages.append(page)
        if pos.bbox is not None:
            x0, top, x1, bottom = (round(v) for v in pos.bbox)
            boxes.append([page if page is not None else 0, x0, x1, top, bottom])
            tops.append(top)
    return pages, boxes, tops


def build_chunk_source(
    chunk: Chunk, doc: DocumentRecord, *, updated_at: str, embedding_model: str | None = None
) -> dict[str, Any]:
    """The ``_source`` stored for one chunk (its vector aside: ``index_op`` appends it).

    Every key is a field of ``_es_mapping``."""
    pages, boxes, tops = _positions(chunk)
    meta = {**doc.metadata, **chunk.metadata}
    title = doc.title or ""
    src: dict[str, Any] = {
        # MemoryBear output contract
        "docnm_kwd": _file_name(doc),
        "title_tks": title,
        "title_sm_tks": title,
        "content_with_weight": chunk.text,
        "page_num_int": pages,
        "position_int": boxes,
        "top_int": tops,
        # lineage
        "chunk_id": chunk.chunk_id,
        "doc_id": doc.doc_id,
        "source": doc.source,
        "item_key": doc.item_key,
        "sequence": chunk.sequence,
        "kind": chunk.kind,
        "token_count": chunk.token_count,
        "text_hash": chunk.text_hash,
        "heading_path": list(chunk.heading_path),
        "positions": [p.to_dict() for p in chunk.positions],
        "metadata": _flattenable(meta),
        "updated_at": updated_at,
        **access_fields(doc.access),
    }
    # MemoryBear: "image" for picture chunks, absent otherwise; tables keep their kind visible.
    if chunk.kind != "text":
        src["doc_type_kwd"] = chunk.kind
    optional = {
        "doc_content_hash": doc.content_hash,
        "doc_version": doc.doc_version,
        "run_id": doc.run_id,
        "title": doc.title,
        "url": doc.url,
        "media_type": doc.media_type,
        "chunker": meta.get("chunker"),
        "chunker_version": meta.get("chunker_version"),
        "chunker_options_hash": meta.get("chunker_options_hash"),
        "embedding_model": embedding_model,
    }
    src.update({k: (str(v) if not isinstance(v, str) else v) for k, v in optional.items() if v is not None})
    return src


# What decides that a stored chunk needs no rewrite: its text, and the per-document fields every
# chunk repeats that the SQLite backend compares too. A Yuque slug rename or a TOC move changes
# the URL (a title edit the title) without changing one chunk's text; skipping on the hash alone
# would leave the old place in the index.
# A chunk an older release stored has no ``text_hash`` (see ``_es_mapping.LEGACY_TEXT_HASH_FIELD``):
# its stamp never matches, so it is rewritten once, under the new name.
STAMP_FIELDS = ("text_hash", "url", "title")
# What a kept chunk may need updated without a rewrite: its place in the document (chunk ids
# follow content, so an insertion shifts the chunks after it) and its vector's model.
STATE_FIELDS = ("sequence", "embedding_model")


def stored_stamp(src: Mapping[str, Any]) -> tuple[Any, ...]:
    """The stamp of a stored ``_source`` (fetch it with ``source_includes=STAMP_FIELDS``)."""
    return tuple(src.get(name) for name in STAMP_FIELDS)


def stored_state(src: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """(sequence, embedding model) of a stored ``_source`` (fetched with ``STATE_FIELDS``)."""
    seq = src.get("sequence")
    return (int(seq) if seq is not None else None, src.get("embedding_model"))


def chunk_stamp(chunk: Chunk, doc: DocumentRecord) -> tuple[Any, ...]:
    """The stamp ``build_chunk_source`` would store for ``chunk`` (absent fields read as None)."""
    return (chunk.text_hash, doc.url, doc.title)


def _flattenable(value: Any) -> Any:
    """A ``flattened`` field holds objects of scalar leaves; JSON-normalise everything else."""
    return json.loads(json.dumps(value, default=str, ensure_ascii=False))


def source_to_record(chunk_id: str, src: Mapping[str, Any]) -> dict[str, Any]:
    """A stored ``_source`` as ``get_chunk`` returns it (the SQLite backend's keys, plus ES's)."""
    out = dict(src)
    out["chunk_id"] = chunk_id
    out["text"] = src.get("content_with_weight", "")
    out["seq"] = src.get("sequence")
    legacy = out.pop(LEGACY_TEXT_HASH_FIELD, None)  # a chunk stored before the rename, not rewritten yet
    out.setdefault("text_hash", legacy)
    for key in ("title", "url", "media_type", "doc_version", "doc_content_hash", "run_id"):
        out.setdefault(key, None)
    out.pop(VECTOR_FIELD, None)  # a record, not the vector (``vectors_for`` reads those)
    out.setdefault("embedding_model", None)
    out.setdefault("heading_path", [])
    out.setdefault("positions", [])
    out.setdefault("metadata", {})
    out["access"] = list(stored_access(src) or ())
    return out


# --------------------------------------------------------------------------- bulk operations


@dataclass(slots=True, frozen=True)
class BulkOp:
    """One bulk action: an index of a chunk (its ``_source`` already serialised), a partial
    update of a kept chunk, or a delete."""

    kind: str  # "index" | "update" | "delete"
    doc_id: str
    chunk_id: str
    index: str
    body: bytes | None = None  # the serialised _source or update body; None for a delete
    # an update's body as the helper takes it ({"doc": ...} or {"script": ...}); it serialises
    # it with the client's JSON serializer, which writes what ``_dumps`` wrote into ``body``
    update: Mapping[str, Any] | None = field(default=None, compare=False)

    def action(self) -> dict[str, Any]:
        """The action as ``streaming_bulk`` takes it (its ``expand_action`` builds the header)."""
        action: dict[str, Any] = {"_op_type": self.kind, "_index": self.index, "_id": self.chunk_id}
        if self.update is not None:
            action.update(self.update)
        elif self.body is not None:
            action["_source"] = self.body  # bytes go out as they are: serialised once, here
        return action

    @property
    def payload(self) -> bytes:
        """The NDJSON lines the helper sends for this op (what its byte budget counts)."""
        header = _dumps({self.kind: {"_id": self.chunk_id, "_index": self.index}}) + b"\n"
        return header + (self.body + b"\n" if self.body is not None else b"")

    @property
    def size(self) -> int:
        return len(self.payload)


def _dumps(obj: Any) -> bytes:
    # as the client's JSON serializer writes it: UTF-8 (not \u escapes), no spaces
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def index_op(
    index: str,
    chunk: Chunk,
    doc: DocumentRecord,
    *,
    updated_at: str,
    vector: npt.NDArray[np.float32] | None = None,
    model: str | None = None,
) -> BulkOp:
    body = _dumps(
        build_chunk_source(chunk, doc, updated_at=updated_at, embedding_model=model if vector is not None else None)
    )
    if vector is not None:
        body = body[:-1] + b',"' + VECTOR_FIELD.encode() + b'":' + vector_json(vector) + b"}"
    return BulkOp("index", doc.doc_id, chunk.chunk_id, index, body)


def update_op(index: str, doc_id: str, chunk_id: str, update: Mapping[str, Any]) -> BulkOp:
    """A partial update of a kept chunk (``{"doc": {...}}`` or ``{"script": {...}}``)."""
    return BulkOp("update", doc_id, chunk_id, index, _dumps(update), update)


def delete_op(index: str, doc_id: str, chunk_id: str) -> BulkOp:
    return BulkOp("delete", doc_id, chunk_id, index)


# --------------------------------------------------------------------------- plans


@dataclass(slots=True)
class DocPlan:
    doc_id: str
    index_ops: list[BulkOp] = field(default_factory=list)  # rewrites and partial updates
    delete_ops: list[BulkOp] = field(default_factory=list)
    unchanged: int = 0
    error: str | None = None  # the document cannot be written at all (nothing is sent for it)


@dataclass(slots=True)
class WritePlan:
    docs: list[DocPlan]

    def first_wave(self) -> list[BulkOp]:
        """Every write, plus the deletes of documents that have nothing to write."""
        ops: list[BulkOp] = []
        for d in self.docs:
            ops.extend(d.index_ops)
        for d in self.docs:
            if not d.index_ops:
                ops.extend(d.delete_ops)
        return ops

    def second_wave(self, failed_docs: set[str]) -> list[BulkOp]:
        """Deletes of documents that had writes, once all of those writes landed."""
        return [op for d in self.docs if d.index_ops and d.doc_id not in failed_docs for op in d.delete_ops]


def plan_writes(
    writes: Sequence[DocumentWrite],
    *,
    index: str,
    existing: Mapping[str, tuple[Any, ...]],
    existing_ids: Mapping[str, set[str]] | None = None,
    states: Mapping[str, tuple[int | None, str | None]] | None = None,
    index_dims: int | None = None,
    updated_at: str,
    acls: Mapping[str, tuple[str, ...] | None] | None = None,
) -> WritePlan:
    """Decide, per document, which chunks to (re)write, update or delete.

    ``existing`` maps chunk ids present in the target index to their :func:`stored_stamp`; a
    chunk is skipped only when its :func:`chunk_stamp` is the same (same text, URL and title);
    ``existing_ids`` maps doc ids to the chunk ids the index holds for them (a safety net beside
    the state store's ``stale_chunk_ids``: ids left behind by an earlier failed run go too).
    ``states`` (chunk id -> :func:`stored_state`) lets a kept chunk get a partial update of its
    sequence and vector; ``index_dims`` is the vector size the target maps (a write with vectors
    of another size fails, as does one whose vectors are incomplete or not finite). ``acls``
    (chunk id -> :func:`stored_access`) lets a kept chunk get its document's new entries.
    """
    existing_ids = existing_ids or {}
    plans: list[DocPlan] = []
    for write in writes:
        doc = write.document
        plan = DocPlan(doc.doc_id)
        plans.append(plan)
        try:
            vectors = _checked_vectors(write, index_dims)
        except VectorWriteError as exc:
            plan.error = str(exc)
            continue
        model = write.vectors.model if write.vectors is not None else None
        keep: set[str] = set()
        for chunk in write.chunks:
            keep.add(chunk.chunk_id)
            vector = vectors[chunk.chunk_id] if vectors is not None else None
            if existing.get(chunk.chunk_id) == chunk_stamp(chunk, doc):
                plan.unchanged += 1
                stored = (states or {}).get(chunk.chunk_id)
                update = kept_update(chunk.sequence, stored, model, vector) if stored is not None else None
                if acls is not None and acls.get(chunk.chunk_id) != normalize_entries(doc.access):
                    update = with_access(update, access_fields(doc.access))
                if update is not None:
                    plan.index_ops.append(update_op(index, doc.doc_id, chunk.chunk_id, update))
                continue
            plan.index_ops.append(index_op(index, chunk, doc, updated_at=updated_at, vector=vector, model=model))
        # An id the index never had only costs a 404 item, which counts as done.
        stale = (set(write.stale_chunk_ids) | existing_ids.get(doc.doc_id, set())) - keep
        plan.delete_ops.extend(delete_op(index, doc.doc_id, cid) for cid in sorted(stale))
    return WritePlan(plans)


def _checked_vectors(write: DocumentWrite, index_dims: int | None) -> dict[str, npt.NDArray[np.float32]] | None:
    vectors = document_vectors(write)
    if write.vectors is not None and write.vectors.dimensions != index_dims:
        held = f"holds {index_dims}-dimension vectors" if index_dims else "has no vector mapping"
        raise VectorWriteError(
            f"the index {held}; this document's vectors (model {write.vectors.model!r}) have "
            f"{write.vectors.dimensions}: one index holds one vector size (rebuild it to change models)"
        )
    return vectors


# --------------------------------------------------------------------------- responses


@dataclass(slots=True, frozen=True)
class ItemOutcome:
    ok: bool
    error: str | None = None
    deleted: bool = False  # a delete that removed a document (not a 404)


def classify_item(item: Mapping[str, Any]) -> ItemOutcome:
    """Read one final entry of a bulk response's ``items`` (retries are the helper's, before)."""
    ((action, info),) = item.items()
    status = int(info.get("status", 0))
    if action == "delete" and status == 404:
        return ItemOutcome(ok=True)  # already gone: the goal of a delete
    if 200 <= status < 300:
        return ItemOutcome(ok=True, deleted=action == "delete" and info.get("result") == "deleted")
    # an item's error is an object; a failed request's (the helper's per-item copy) a string
    err = info.get("error") or {}
    err_type = err.get("type", "") if isinstance(err, dict) else str(err)
    reason = err.get("reason", "") if isinstance(err, dict) else ""
    return ItemOutcome(ok=False, error=f"{status} {err_type}: {reason}" if reason else f"{status} {err_type}")


@dataclass(slots=True)
class BulkReport:
    """What became of each op: confirmed ids per kind, and errors per document."""

    written: dict[str, int] = field(default_factory=dict)
    deleted: dict[str, int] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)

    def fail(self, op: BulkOp, error: str) -> None:
        self.errors.setdefault(op.doc_id, []).append(f"{op.kind} {op.chunk_id}: {error}")

    def record(self, op: BulkOp, outcome: ItemOutcome) -> None:
        if not outcome.ok:
            self.fail(op, outcome.error or "failed")
        elif op.kind == "index":  # an update is of a kept chunk: counted unchanged by the plan
            self.written[op.doc_id] = self.written.get(op.doc_id, 0) + 1
        elif outcome.deleted:
            self.deleted[op.doc_id] = self.deleted.get(op.doc_id, 0) + 1


class _Awaiting:
    """Ops sent and not yet answered, found again by (action, ``_id``) from an answer item.

    ``streaming_bulk`` yields an item when it is final, so a retried item comes out after later
    ones: order says nothing, the item's own action and ``_id`` do.
    """

    def __init__(self, ops: Iterable[BulkOp]) -> None:
        self._ops: dict[tuple[str, str], deque[BulkOp]] = {}
        for op in ops:
            self._ops.setdefault((op.kind, op.chunk_id), deque()).append(op)

    def take(self, item: Mapping[str, Any]) -> BulkOp | None:
        ((action, info),) = item.items()
        queue = self._ops.get((action, str(info.get("_id"))))
        return queue.popleft() if queue else None

    def left(self) -> list[BulkOp]:
        return [op for queue in self._ops.values() for op in queue]


def run_bulk(
    client: Elasticsearch,
    ops: Sequence[BulkOp],
    *,
    max_count: int,
    max_bytes: int,
    max_attempts: int = 5,
    initial_backoff: float = 0.5,
    max_backoff: float = 30.0,
    refresh: bool | str = False,
    report: BulkReport | None = None,
) -> BulkReport:
    """Send ``ops`` through ``elasticsearch.helpers.streaming_bulk``; report each op's fate.

    The helper bounds each request by ``max_count`` actions and ``max_bytes`` (an op larger
    than that goes alone rather than vanishing: Elasticsearch answers it, and we report that)
    and re-sends items answered 429 or 5xx, doubling ``initial_backoff`` up to
    ``max_backoff``, until ``max_attempts``. A request Elasticsearch refuses whole (an HTTP
    error) fails that request's items only. A failure below HTTP (connection refused or
    dropped, once the client's transport has retried it) ends the stream: every op not yet
    answered fails with it. Nothing is dropped: an op the answers never mention is reported too.
    """
    report = report or BulkReport()
    if max_count < 1 or max_bytes < 1:
        raise ValueError("max_count and max_bytes must be positive")
    awaiting = _Awaiting(ops)
    answers = streaming_bulk(
        client,
        (op.action() for op in ops),
        chunk_size=max_count,
        max_chunk_bytes=max_bytes,
        raise_on_error=False,  # item failures come back as items, to be reported per document
        raise_on_exception=False,  # so does a request refused whole: its items fail, the rest go on
        max_retries=max_attempts - 1,
        initial_backoff=initial_backoff,
        max_backoff=max_backoff,
        # 429 (es_rejected_execution_exception, circuit_breaking_exception: a full queue or
        # breaker) and 5xx pass; anything else (mapping errors, 400s) is the item's own fault
        retry_on_status=tuple(sorted(RETRYABLE_STATUSES)),
        refresh=refresh,
    )
    unanswered = "no answer for it in the bulk response"
    try:
        for _ok, item in answers:
            op = awaiting.take(item)
            if op is None:
                log.warning("bulk answer for an action that was not sent: %s", item)
                continue
            report.record(op, classify_item(item))
    except Exception as exc:  # the IndexBackend contract: failures are per document, never raised
        unanswered = f"bulk request failed: {type(exc).__name__}: {exc}"
    for op in awaiting.left():
        report.fail(op, unanswered)
    return report
