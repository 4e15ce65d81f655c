"""Elasticsearch index backend (official ``elasticsearch`` 9.x client against an ES 9 server).

Layout: the configured index name is an **alias**; chunks live in a physical index
``<alias>__v<generation>`` created from the index template in ``_es_mapping``. A full rebuild
writes a new generation behind a second alias ``<alias>__rebuild`` (so every Airflow worker,
not just the process that began it, writes there) and swaps the main alias atomically when the
run succeeds; readers never see a half-built index.

Writes follow ``IndexBackend``: content hashes, URLs and titles already stored are looked up
first (``mget`` is real-time, so this holds even with ``refresh=false``) and chunks whose text
and place are unchanged are skipped (a renamed or moved document is rewritten, as in SQLite); new
chunks are bulk-indexed under deterministic ``_id`` (= chunk id) and stale ones deleted by id
after them (see ``_es_bulk``, which sends through ``elasticsearch.helpers.streaming_bulk``).
Rejections (429, ``es_rejected_execution_exception``) and 5xx answers are retried with backoff:
bulk items by the helper, other requests by tenacity (``_es_client``); whatever still fails is
returned per document in ``UpsertResult``, never raised for the batch.

Vectors (``_es_vectors``): a ``dense_vector`` field mapped on a generation at its first vector
write, sized by it; kNN search; hybrid search fused by Tributary (RRF), since ES's own ``rrf``
retriever needs a paid licence. A scoped rebuild's new generation copies the live vector mapping
(the other sources' chunks are carried over with their vectors); a full rebuild takes its size
from its first vector write, so a rebuild can change models.

Connection: ``options.url`` or ``$ELASTICSEARCH_URL`` (credentials may be in the URL; an API key
in ``$ELASTICSEARCH_API_KEY``), else the Airflow connection ``options.conn_id`` (default
``elasticsearch_default``) read through ``include.connections`` (``_es_client``).
Other ``options``: ``refresh`` (``wait_for`` default, ``true``, ``false``), ``shards``,
``replicas``, ``bulk_max_count``, ``bulk_max_bytes``, ``max_attempts``, ``initial_backoff``,
``max_backoff``, ``request_timeout``, ``search_time_limit`` (seconds).

Access (``_es_access``): chunks carry ``acl`` and ``public``; a restricted search filters on
them in the bool query and inside kNN; ``set_access`` updates them by id, no chunk rewritten.

Searches: the query text keeps its first ``MAX_QUERY_TERMS`` distinct terms
(:mod:`include.index.query_text`); every search request carries the search's ``timeout`` (ES
stops collecting at it and says ``timed_out``) and a client request timeout of the time left, and
either one passing is :class:`~include.index.base.SearchTimeout`, not a partial ranking.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from importlib.metadata import version
from typing import Any, Self, TypeVar

import numpy as np
import numpy.typing as npt
from elasticsearch import BadRequestError, ConnectionTimeout, Elasticsearch, NotFoundError

from include.config import IndexConfig
from include.index._es_access import EsAccess
from include.index._es_acl import ACCESS_FIELDS, access_query, stored_access
from include.index._es_bulk import (
    STAMP_FIELDS,
    STATE_FIELDS,
    BulkOp,
    BulkReport,
    plan_writes,
    run_bulk,
    source_to_record,
    stored_stamp,
    stored_state,
    update_op,
)
from include.index._es_client import bulk_client, client_from_options, request_retrying
from include.index._es_generations import Generations
from include.index._es_mapping import (
    MAX_VECTOR_DIMS,
    VECTOR_FIELD,
    index_mappings,
    physical_index_name,
    validate_alias,
    vector_properties,
)
from include.index._es_search import bm25_query, search_hit
from include.index._es_vectors import cache_query, cosine_of_score, knn_clause, vector_source, vector_update
from include.index._vector_checks import query_array
from include.index.base import (
    DEFAULT_SEARCH_TIME_LIMIT,
    DocumentWrite,
    IndexBackend,
    SearchDeadline,
    SearchHit,
    UpsertResult,
    check_time_limit,
)
from include.index.fusion import (
    DEFAULT_VECTOR_WEIGHT,
    check_vector_weight,
)
from include.vectors import VectorSet

__all__ = ["ElasticsearchIndex", "bm25_query", "client_from_options", "request_retrying"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_REFRESH_POLICIES: dict[str, bool | str] = {"false": False, "true": True, "wait_for": "wait_for"}
_CLIENT_VERSION = version("elasticsearch")
_MGET_SLICE = 1000
_PAGE = 5000
_CACHE_BATCH = 500  # text hashes per vector cache lookup
# never returned by a search or get_chunk: analysed copies, position projections, the vector
_HIT_EXCLUDES = ["title_tks", "title_sm_tks", "position_int", "page_num_int", "top_int", "acl", VECTOR_FIELD]


class ElasticsearchIndex(Generations, EsAccess, IndexBackend):
    backend_name = "elasticsearch"

    def __init__(
        self,
        client: Elasticsearch,
        index_name: str = "tributary",
        *,
        refresh: str | bool = "wait_for",
        shards: int = 1,
        replicas: int = 0,
        bulk_max_count: int = 500,
        bulk_max_bytes: int = 5 * 1024 * 1024,
        max_attempts: int = 5,
        initial_backoff: float = 0.5,
        max_backoff: float = 30.0,
        hybrid_vector_weight: float = DEFAULT_VECTOR_WEIGHT,
        request_timeout: float = 30.0,
        search_time_limit: float = DEFAULT_SEARCH_TIME_LIMIT,
        owns_client: bool = True,
    ) -> None:
        self.alias = validate_alias(index_name)
        key = str(refresh).lower()
        if key not in _REFRESH_POLICIES:
            raise ValueError(f"refresh must be one of {sorted(_REFRESH_POLICIES)}, not {refresh!r}")
        self.refresh: bool | str = _REFRESH_POLICIES[key]
        self.shards = shards
        self.replicas = replicas
        self.bulk_max_count = bulk_max_count
        self.bulk_max_bytes = bulk_max_bytes
        self.max_attempts = max_attempts
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.hybrid_vector_weight = check_vector_weight(hybrid_vector_weight)
        self.search_time_limit = check_time_limit(search_time_limit)
        self._client = client
        self._owns_client = owns_client
        self._server_version: tuple[int, ...] = ()
        # Retries are ours (tenacity); the transport's own would multiply them.
        self._es = client.options(max_retries=0, retry_on_timeout=False, request_timeout=request_timeout)
        self._retrying = request_retrying(
            max_attempts=max_attempts, initial_backoff=initial_backoff, max_backoff=max_backoff
        )
        self._bulk_es = bulk_client(
            self._es, max_attempts=max_attempts, initial_backoff=initial_backoff, max_backoff=max_backoff
        )
        self.ensure_index()

    @classmethod
    def from_config(cls, config: IndexConfig) -> Self:
        opts = dict(config.options)
        tuning = {
            k: opts[k]
            for k in (
                "refresh",
                "shards",
                "replicas",
                "bulk_max_count",
                "bulk_max_bytes",
                "max_attempts",
                "initial_backoff",
                "max_backoff",
                "request_timeout",
                "hybrid_vector_weight",
                "search_time_limit",
            )
            if k in opts
        }
        return cls(client_from_options(opts), config.name, **tuning)

    # ------------------------------------------------------------------------------ plumbing
    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return self._retrying.copy()(fn, *args, **kwargs)

    def check_server(self) -> str:
        """The server's version; refuses a server whose major version is not the client's.

        The 9.x client negotiates ``compatible-with=9``: an 8.x server answers every request
        with a 400 ``media_type_header_exception``; say what is wrong instead.
        """
        client_major = _CLIENT_VERSION.split(".")[0]
        try:
            number = str(self._call(self._es.info).body["version"]["number"])
        except BadRequestError as exc:
            if exc.message == "media_type_header_exception":
                raise RuntimeError(
                    f"the Elasticsearch server is not version {client_major}.x (it refused the "
                    f"{client_major}.x client's compatibility header); run Elasticsearch {client_major}"
                ) from exc
            raise
        if number.split(".")[0] != client_major:
            raise RuntimeError(
                f"Elasticsearch server {number} does not match the client's major version "
                f"{_CLIENT_VERSION}; run Elasticsearch {client_major}.x"
            )
        self._server_version = tuple(int(p) for p in number.split("-")[0].split(".") if p.isdigit())
        return number

    def ensure_index(self) -> None:
        """Check the server, create the template and the first generation behind the alias."""
        self.check_server()
        self._put_template()
        if self._call(self._es.indices.exists_alias, name=self.alias):
            # Additive mapping changes (new fields) reach the live index too.
            mappings = index_mappings()
            self._call(self._es.indices.put_mapping, index=self.alias, properties=mappings["properties"])
            return
        if self._call(self._es.indices.exists, index=self.alias):
            raise RuntimeError(
                f"a concrete index named {self.alias!r} exists; Tributary needs that name as an alias "
                "(reindex it elsewhere or configure another index name)"
            )
        self._create(physical_index_name(self.alias, "0"), {self.alias: {"is_write_index": True}})

    # ------------------------------------------------------------------------------ writes
    def upsert(self, writes: Sequence[DocumentWrite]) -> list[UpsertResult]:
        if not writes:
            return []
        try:
            rebuild = self._rebuild_target()
            groups: dict[str, list[DocumentWrite]] = {}
            for w in writes:
                to_new = rebuild is not None and rebuild[1] in (None, w.document.source)
                groups.setdefault(rebuild[0] if to_new and rebuild else self.alias, []).append(w)
        except Exception as exc:  # the cluster is unreachable: every document fails, none raises
            return [UpsertResult(w.document.doc_id, ok=False, error=f"elasticsearch: {exc}") for w in writes]
        by_doc: dict[str, UpsertResult] = {}
        for target, group in groups.items():
            for result in self._upsert_into(target, group):
                by_doc[result.doc_id] = result
        return [by_doc[w.document.doc_id] for w in writes]

    def _upsert_into(self, target: str, writes: list[DocumentWrite]) -> list[UpsertResult]:
        try:
            stamps, states, acls = self._existing_stamps(target, [c.chunk_id for w in writes for c in w.chunks])
            ids = self._existing_ids(target, [w.document.doc_id for w in writes])
            dims = self._ensure_vector_mapping(target, writes)
        except Exception as exc:
            return [UpsertResult(w.document.doc_id, ok=False, error=f"elasticsearch: {exc}") for w in writes]
        now = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        plan = plan_writes(
            writes,
            index=target,
            existing=stamps,
            existing_ids=ids,
            states=states,
            index_dims=dims,
            updated_at=now,
            acls=acls,
        )
        report = BulkReport()
        bulk = functools.partial(self._bulk, report=report)
        bulk(plan.first_wave())
        bulk(plan.second_wave(set(report.errors)))  # stale chunks of documents whose writes all landed
        results = []
        for p in plan.docs:
            errors = [f"elasticsearch: {p.error}"] if p.error else report.errors.get(p.doc_id)
            results.append(
                UpsertResult(
                    doc_id=p.doc_id,
                    ok=not errors,
                    written=report.written.get(p.doc_id, 0),
                    unchanged=p.unchanged,
                    deleted=report.deleted.get(p.doc_id, 0),
                    error="; ".join(errors[:5]) + (f" (+{len(errors) - 5} more)" if len(errors) > 5 else "")
                    if errors
                    else None,
                )
            )
        return results

    def _existing_stamps(
        self, index: str, chunk_ids: list[str]
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """Stored chunk id -> :func:`stored_stamp` (text hash, URL, title), for the skip decision,
        -> :func:`stored_state` (sequence, vector model) and -> :func:`stored_access` (entries),
        for a kept chunk's partial update."""
        stamps: dict[str, tuple[Any, ...]] = {}
        states: dict[str, tuple[int | None, str | None]] = {}
        acls: dict[str, tuple[str, ...] | None] = {}
        for i in range(0, len(chunk_ids), _MGET_SLICE):
            resp = self._call(
                self._es.mget,
                index=index,
                ids=chunk_ids[i : i + _MGET_SLICE],
                source_includes=[*STAMP_FIELDS, *STATE_FIELDS, *ACCESS_FIELDS],
            )
            for d in resp.body["docs"]:
                if d.get("found"):
                    src = d.get("_source") or {}
                    stamps[d["_id"]] = stored_stamp(src)
                    states[d["_id"]] = stored_state(src)
                    acls[d["_id"]] = stored_access(src)
        return stamps, states, acls

    def _ensure_vector_mapping(self, target: str, writes: Sequence[DocumentWrite]) -> int | None:
        """The target's vector size; the first write with vectors maps it when nothing has yet.

        Writes whose vectors have another size then fail in the plan (one index, one size); two
        workers mapping the same size at once is harmless (an identical mapping update).
        """
        sizes = [w.vectors.dimensions for w in writes if w.vectors is not None]
        if not sizes:
            return None
        dims = self._vector_dims(target)
        fits = [d for d in sizes if d <= MAX_VECTOR_DIMS]
        if dims is None and fits:
            dims = fits[0]
            self._call(self._es.indices.put_mapping, index=target, properties=vector_properties(dims))
        return dims

    def _existing_ids(self, index: str, doc_ids: list[str]) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {d: set() for d in doc_ids}
        query = {"terms": {"doc_id": doc_ids}}
        for cid, src in self._scan(index, query, ["doc_id"]):
            out.setdefault(src["doc_id"], set()).add(cid)
        return out

    def _bulk(self, ops: Sequence[BulkOp], report: BulkReport) -> BulkReport:
        """``ops`` through ``streaming_bulk`` with this index's batch sizes and retries."""
        return run_bulk(
            self._bulk_es,
            ops,
            max_count=self.bulk_max_count,
            max_bytes=self.bulk_max_bytes,
            max_attempts=self.max_attempts,
            initial_backoff=self.initial_backoff,
            max_backoff=self.max_backoff,
            refresh=self.refresh,
            report=report,
        )

    def _scan(
        self, index: str, query: Mapping[str, Any], fields: list[str] | None, source: Any = None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """All hits of ``query`` by ``search_after`` on the chunk id (no scroll context to leak).

        ``source`` overrides the ``_source`` option ``fields`` makes (e.g. ``vector_source``)."""
        after: list[Any] | None = None
        while True:
            kwargs: dict[str, Any] = {
                "index": index,
                "query": query,
                "size": _PAGE,
                "sort": [{"chunk_id": "asc"}],
                "source": source if source is not None else (fields if fields else False),
                "track_total_hits": False,
            }
            if after is not None:
                kwargs["search_after"] = after
            hits = self._call(self._es.search, **kwargs).body["hits"]["hits"]
            for h in hits:
                yield h["_id"], h.get("_source") or {}
            if len(hits) < _PAGE:
                return
            after = hits[-1]["sort"]

    def delete_documents(self, source: str, doc_ids: Iterable[str]) -> int:
        ids = list(dict.fromkeys(doc_ids))
        if not ids:
            return 0
        rebuild = self._rebuild_target()
        live = self._delete_by_query(self.alias, source, ids)
        if rebuild is not None:
            # A removed document must not come back when the rebuilt index goes live.
            self._delete_by_query(rebuild[0], source, ids)
        return live

    def _delete_by_query(self, index: str, source: str, doc_ids: list[str]) -> int:
        # delete_by_query only sees refreshed documents; chunks written with refresh=false
        # moments ago must not survive their document's deletion.
        self._call(self._es.indices.refresh, index=index)
        total = 0
        for i in range(0, len(doc_ids), 1000):
            resp = self._call(
                self._es.delete_by_query,
                index=index,
                query={
                    "bool": {"filter": [{"term": {"source": source}}, {"terms": {"doc_id": doc_ids[i : i + 1000]}}]}
                },
                conflicts="proceed",
                refresh=self.refresh is not False,
            )
            total += int(resp.body.get("deleted", 0))
        return total

    # ------------------------------------------------------------------------------ reads
    def _timed_search(self, deadline: SearchDeadline, **request: Any) -> list[Mapping[str, Any]]:
        """One search request's hits, by ``deadline``: the time left goes into the body's
        ``timeout`` (ES "search timeout", best effort per shard) and the client's request
        timeout; a retry starts only while time is left."""

        def attempt() -> Any:
            left = deadline.left()
            if left <= 0:
                raise deadline.timeout(self.backend_name)
            timeout = f"{max(1, int(left * 1000))}ms"
            return self._es.options(request_timeout=left).search(
                index=self.alias, timeout=timeout, source_excludes=_HIT_EXCLUDES, **request
            )

        try:
            resp = self._call(attempt)
        except ConnectionTimeout:
            raise deadline.timeout(self.backend_name) from None
        if resp.body.get("timed_out"):  # partial hits: a ranking of what some shards found in time
            raise deadline.timeout(self.backend_name)
        hits: list[Mapping[str, Any]] = resp.body["hits"]["hits"]
        return hits

    def _bm25(
        self, query: str, k: int, source: str | None, deadline: SearchDeadline, access: tuple[str, ...] | None = None
    ) -> list[SearchHit]:
        if not query.strip():
            return []
        hits = self._timed_search(deadline, query=bm25_query(query, source, access), size=k)
        return [search_hit(h, float(h["_score"] or 0.0)) for h in hits]

    def _nearest(
        self,
        query_vector: npt.NDArray[np.float32],
        k: int,
        source: str | None,
        deadline: SearchDeadline,
        access: tuple[str, ...] | None = None,
    ) -> list[SearchHit]:
        query = query_array(query_vector)
        dims = self._vector_dims(self.alias)
        if dims is None or k <= 0:
            return []  # nothing embedded in this index: the vector ranking is empty
        if dims != query.shape[0]:
            raise ValueError(
                f"the query vector has {query.shape[0]} dimensions but the index {self.alias!r} holds "
                f"{dims}-dimension vectors: embed the query with the model its chunks were embedded with"
            )
        restrict = access_query(access) if access is not None else None
        hits = self._timed_search(deadline, knn=knn_clause(query, k, source, restrict), size=k)
        return [search_hit(h, cosine_of_score(float(h["_score"] or 0.0))) for h in hits]

    def vectors_for(self, model: str, text_hashes: Iterable[str]) -> dict[str, npt.NDArray[np.float32]]:
        hashes = list(dict.fromkeys(text_hashes))
        found: dict[str, npt.NDArray[np.float32]] = {}
        wanted = vector_source(self._server_version, ["text_hash", VECTOR_FIELD])
        for i in range(0, len(hashes), _CACHE_BATCH):
            query = cache_query(model, hashes[i : i + _CACHE_BATCH])
            for _, src in self._scan(self.alias, query, None, source=wanted):
                vector = src.get(VECTOR_FIELD)
                if vector is not None and src.get("text_hash") not in found:
                    found[src["text_hash"]] = np.asarray(vector, dtype=np.float32)
        return found

    def replace_vectors(self, source: str, vectors: Mapping[str, VectorSet]) -> dict[str, str]:
        # partial updates of the stored chunks; the first vectors written map the index's size
        try:
            dims, sizes = self._vector_dims(self.alias), {v.dimensions for v in vectors.values()}
            if dims is None and len(sizes) == 1 and next(iter(sizes)) <= MAX_VECTOR_DIMS:
                dims = next(iter(sizes))
                self._call(self._es.indices.put_mapping, index=self.alias, properties=vector_properties(dims))
        except Exception as exc:  # the cluster is unreachable: every document fails, none raises
            return dict.fromkeys(vectors, f"elasticsearch: {exc}")
        held = f"the index holds {dims}-dimension vectors"
        wrong = {d: f"{held}, not {v.dimensions}" for d, v in vectors.items() if v.dimensions != dims}
        ops = [
            update_op(self.alias, doc_id, chunk_id, vector_update(v.model, row))
            for doc_id, v in vectors.items()
            if doc_id not in wrong
            for chunk_id, row in zip(v.chunk_ids, v.matrix, strict=True)
        ]
        report = self._bulk(ops, BulkReport())
        return {**wrong, **{doc_id: "elasticsearch: " + "; ".join(e[:5]) for doc_id, e in report.errors.items()}}

    @staticmethod
    def _filter(source: str | None, doc_id: str | None) -> dict[str, Any]:
        terms = [{"term": {f: v}} for f, v in (("source", source), ("doc_id", doc_id)) if v]
        return {"bool": {"filter": terms}} if terms else {"match_all": {}}

    def count(self, *, source: str | None = None, doc_id: str | None = None) -> int:
        resp = self._call(self._es.count, index=self.alias, query=self._filter(source, doc_id))
        return int(resp.body["count"])

    def chunk_ids(self, *, source: str | None = None, doc_id: str | None = None) -> set[str]:
        return {cid for cid, _ in self._scan(self.alias, self._filter(source, doc_id), None)}

    def get_chunk(self, chunk_id: str) -> dict[str, Any] | None:
        try:
            resp = self._call(self._es.get, index=self.alias, id=chunk_id, source_excludes=[VECTOR_FIELD])
        except NotFoundError:
            return None
        return source_to_record(chunk_id, resp.body["_source"])

    def refresh_now(self) -> None:
        """Make everything written so far searchable (for refresh=false bulk loads)."""
        self._call(self._es.indices.refresh, index=self.alias)

    def close(self) -> None:
        if self._owns_client:
            self._client.close()
