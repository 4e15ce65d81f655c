"""Replacing documents' access entries in the Elasticsearch backend (the fields and the search
filter are ``_es_acl``'s).

``set_access`` (the mixin below) replaces entries by **bulk partial updates by chunk id**
(through ``_es_bulk.run_bulk``, i.e. ``elasticsearch.helpers.streaming_bulk``), not by
``_update_by_query``:

* the generations: during a rebuild the live generation (behind the alias) and the rebuilding
  one (behind ``<alias>__rebuild``) both hold the document; each is scanned and updated by id,
  so a change made mid-rebuild is in the generation that goes live. Each update also stamps
  ``updated_at``, which is what a scoped rebuild's second carry-over pass copies by.
* no silent misses: ``_update_by_query`` on a version conflict (a concurrent upsert) either
  aborts half-way or, with ``conflicts=proceed``, skips the chunk and reports success; a skipped
  revocation is a leak. A bulk update by id retries conflicts (``retry_on_conflict``) and any
  item that still fails is reported, per document, and raised.
* only chunks whose stored entries differ are sent, so an unchanged document costs nothing
  and "documents updated" is exact.
"""

from __future__ import annotations

import abc
import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from elasticsearch import Elasticsearch

from include.index._es_acl import access_fields, stored_access
from include.index._es_bulk import BulkOp, BulkReport, update_op
from include.index.base import normalize_entries

__all__ = ["AccessUpdateError", "EsAccess"]

T = TypeVar("T")

_DOC_BATCH = 1000  # doc ids per scan query (a terms query; ES allows 65,536 terms)
_RETRY_ON_CONFLICT = 3  # a chunk rewritten between the scan and the update: read it again


class AccessUpdateError(RuntimeError):
    """Some documents' entries could not be replaced (their old entries may still be in force)."""

    def __init__(self, errors: Mapping[str, list[str]]) -> None:
        first = "; ".join(f"{doc}: {msgs[0]}" for doc, msgs in list(errors.items())[:5])
        super().__init__(f"elasticsearch: the access of {len(errors)} document(s) was not updated: {first}")
        self.errors = dict(errors)


def _docs_query(source: str, doc_ids: Sequence[str]) -> dict[str, Any]:
    return {"bool": {"filter": [{"term": {"source": source}}, {"terms": {"doc_id": list(doc_ids)}}]}}


class EsAccess(abc.ABC):
    """``set_access`` and ``access_of`` for :class:`~include.index.elasticsearch.ElasticsearchIndex`,
    which provides the client, the retry policy, the scan, the rebuild target and bulk settings."""

    alias: str
    refresh: bool | str
    bulk_max_count: int
    bulk_max_bytes: int
    max_attempts: int
    initial_backoff: float
    max_backoff: float
    _es: Elasticsearch
    _bulk_es: Elasticsearch

    @abc.abstractmethod
    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

    @abc.abstractmethod
    def _scan(
        self, index: str, query: Mapping[str, Any], fields: list[str] | None, source: Any = None
    ) -> Iterator[tuple[str, dict[str, Any]]]: ...

    @abc.abstractmethod
    def _bulk(self, ops: Sequence[BulkOp], report: BulkReport) -> BulkReport: ...

    @abc.abstractmethod
    def _rebuild_target(self) -> tuple[str, str | None] | None: ...

    def _chunks_of(self, index: str, source: str, doc_ids: Sequence[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        for i in range(0, len(doc_ids), _DOC_BATCH):
            yield from self._scan(index, _docs_query(source, doc_ids[i : i + _DOC_BATCH]), ["doc_id", "acl"])

    def set_access(self, source: str, access: Mapping[str, Sequence[str]]) -> int:
        wanted = {doc_id: normalize_entries(entries) for doc_id, entries in access.items()}
        if not wanted:
            return 0
        rebuild = self._rebuild_target()
        targets = [self.alias] + ([rebuild[0]] if rebuild is not None else [])
        now = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        ops: list[BulkOp] = []
        for target in targets:
            # the scan is a search: make chunks written with refresh=false moments ago visible to it
            self._call(self._es.indices.refresh, index=target)
            for chunk_id, src in self._chunks_of(target, source, list(wanted)):
                entries = wanted[src["doc_id"]]
                if stored_access(src) != entries:
                    fields = {**access_fields(entries), "updated_at": now}
                    update = {"doc": fields, "retry_on_conflict": _RETRY_ON_CONFLICT}
                    ops.append(update_op(target, src["doc_id"], chunk_id, update))
        report = self._bulk(ops, BulkReport())
        if report.errors:
            raise AccessUpdateError(report.errors)
        return len({op.doc_id for op in ops})

    def access_of(self, source: str, doc_ids: Iterable[str]) -> dict[str, tuple[str, ...]]:
        """Each indexed document's entries; should its chunks disagree (an update that failed
        half-way), the entries all of them hold: never more than every chunk grants."""
        ids = list(dict.fromkeys(doc_ids))
        found: dict[str, set[str]] = {}
        for _, src in self._chunks_of(self.alias, source, ids):
            entries = set(stored_access(src) or ())
            doc_id = src["doc_id"]
            found[doc_id] = found[doc_id] & entries if doc_id in found else entries
        return {doc_id: tuple(sorted(found[doc_id])) for doc_id in sorted(found)}
