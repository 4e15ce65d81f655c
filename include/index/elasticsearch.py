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

Connection: ``options.url`` or ``$ELASTICSEARCH_URL`` (credentials may be in the URL; an API key
in ``$ELASTICSEARCH_API_KEY``), else the Airflow connection ``options.conn_id`` (default
``elasticsearch_default``) read through ``include.connections`` (``_es_client``).
Other ``options``: ``refresh`` (``wait_for`` default, ``true``, ``false``), ``shards``,
``replicas``, ``bulk_max_count``, ``bulk_max_bytes``, ``max_attempts``, ``initial_backoff``,
``max_backoff``, ``request_timeout``.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from importlib.metadata import version
from typing import Any, Self, TypeVar

from elasticsearch import BadRequestError, Elasticsearch, NotFoundError

from include.config import IndexConfig
from include.index._es_bulk import (
    STAMP_FIELDS,
    BulkReport,
    plan_writes,
    run_bulk,
    source_to_record,
    stored_stamp,
)
from include.index._es_client import bulk_client, client_from_options, request_retrying
from include.index._es_mapping import (
    LEGACY_TEXT_HASH_FIELD,
    RENAME_LEGACY_FIELDS,
    SEARCH_FIELDS,
    index_mappings,
    index_template,
    physical_index_name,
    rebuild_alias,
    validate_alias,
)
from include.index.base import DocumentWrite, IndexBackend, SearchHit, UpsertResult

__all__ = ["ElasticsearchIndex", "client_from_options", "request_retrying"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_REFRESH_POLICIES: dict[str, bool | str] = {"false": False, "true": True, "wait_for": "wait_for"}
_CLIENT_VERSION = version("elasticsearch")
_MGET_SLICE = 1000
_PAGE = 5000
_REBUILD_META_KEY = "tributary_rebuild_source"


class ElasticsearchIndex(IndexBackend):
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
        request_timeout: float = 30.0,
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
        self._client = client
        self._owns_client = owns_client
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
            )
            if k in opts
        }
        return cls(client_from_options(opts), config.name, **tuning)

    # ------------------------------------------------------------------------------ plumbing
    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return self._retrying.copy()(fn, *args, **kwargs)

    def _put_template(self) -> None:
        self._call(
            self._es.indices.put_index_template,
            **index_template(self.alias, shards=self.shards, replicas=self.replicas),
        )

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

    def _create(self, index: str, aliases: dict[str, Any], meta: dict[str, Any] | None = None) -> None:
        # The template supplies settings and mappings; the explicit mapping _meta marks rebuilds.
        kwargs: dict[str, Any] = {"index": index, "aliases": aliases}
        if meta:
            kwargs["mappings"] = {"_meta": meta}
        try:
            self._call(self._es.indices.create, **kwargs)
        except BadRequestError as exc:
            # Two workers opening a fresh cluster race to create generation 0: both are fine.
            if exc.error != "resource_already_exists_exception":
                raise

    def _rebuild_target(self) -> tuple[str, str | None] | None:
        """(physical index, source it rebuilds or None for all) when a rebuild is in progress."""
        try:
            found = self._call(self._es.indices.get_alias, name=rebuild_alias(self.alias))
        except NotFoundError:
            return None
        index = next(iter(found.body))
        mapping = self._call(self._es.indices.get_mapping, index=index).body
        meta = mapping.get(index, {}).get("mappings", {}).get("_meta", {}) or {}
        return index, meta.get(_REBUILD_META_KEY)

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
            stamps = self._existing_stamps(target, [c.chunk_id for w in writes for c in w.chunks])
            ids = self._existing_ids(target, [w.document.doc_id for w in writes])
        except Exception as exc:
            return [UpsertResult(w.document.doc_id, ok=False, error=f"elasticsearch: {exc}") for w in writes]
        now = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        plan = plan_writes(writes, index=target, existing=stamps, existing_ids=ids, updated_at=now)
        report = BulkReport()
        bulk = functools.partial(
            run_bulk,
            self._bulk_es,
            max_count=self.bulk_max_count,
            max_bytes=self.bulk_max_bytes,
            max_attempts=self.max_attempts,
            initial_backoff=self.initial_backoff,
            max_backoff=self.max_backoff,
            refresh=self.refresh,
            report=report,
        )
        bulk(plan.first_wave())
        bulk(plan.second_wave(set(report.errors)))  # stale chunks of documents whose writes all landed
        results = []
        for p in plan.docs:
            errors = report.errors.get(p.doc_id)
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

    def _existing_stamps(self, index: str, chunk_ids: list[str]) -> dict[str, tuple[Any, ...]]:
        """Stored chunk id -> :func:`stored_stamp` (text hash, URL, title), for the skip decision."""
        found: dict[str, tuple[Any, ...]] = {}
        for i in range(0, len(chunk_ids), _MGET_SLICE):
            resp = self._call(
                self._es.mget, index=index, ids=chunk_ids[i : i + _MGET_SLICE], source_includes=list(STAMP_FIELDS)
            )
            for d in resp.body["docs"]:
                if d.get("found"):
                    found[d["_id"]] = stored_stamp(d.get("_source") or {})
        return found

    def _existing_ids(self, index: str, doc_ids: list[str]) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {d: set() for d in doc_ids}
        query = {"terms": {"doc_id": doc_ids}}
        for cid, src in self._scan(index, query, ["doc_id"]):
            out.setdefault(src["doc_id"], set()).add(cid)
        return out

    def _scan(
        self, index: str, query: Mapping[str, Any], fields: list[str] | None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """All hits of ``query`` by ``search_after`` on the chunk id (no scroll context to leak)."""
        after: list[Any] | None = None
        while True:
            kwargs: dict[str, Any] = {
                "index": index,
                "query": query,
                "size": _PAGE,
                "sort": [{"chunk_id": "asc"}],
                "source": fields if fields else False,
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
    def search(self, query: str, *, k: int = 10, source: str | None = None) -> list[SearchHit]:
        if not query.strip():
            return []
        hits = self._search(query, k, source, "and")
        if not hits:  # nothing has every term: fall back to any term (as the SQLite backend does)
            hits = self._search(query, k, source, "or")
        return hits

    def _search(self, query: str, k: int, source: str | None, operator: str) -> list[SearchHit]:
        q: dict[str, Any] = {
            "bool": {"must": [{"multi_match": {"query": query, "fields": SEARCH_FIELDS, "operator": operator}}]}
        }
        if source:
            q["bool"]["filter"] = [{"term": {"source": source}}]
        resp = self._call(
            self._es.search,
            index=self.alias,
            query=q,
            size=k,
            source_excludes=["title_tks", "title_sm_tks", "position_int", "page_num_int", "top_int"],
        )
        out = []
        for h in resp.body["hits"]["hits"]:
            src = h["_source"]
            out.append(
                SearchHit(
                    chunk_id=h["_id"],
                    doc_id=src["doc_id"],
                    source=src["source"],
                    score=float(h["_score"] or 0.0),
                    text=src.get("content_with_weight", ""),
                    title=src.get("title"),
                    url=src.get("url"),
                    heading_path=list(src.get("heading_path") or []),
                    run_id=src.get("run_id"),
                    doc_version=src.get("doc_version"),
                    # a chunk stored before the rename and not rewritten since has the old field
                    text_hash=src.get("text_hash", src.get(LEGACY_TEXT_HASH_FIELD)),
                    metadata=dict(src.get("metadata") or {}),
                )
            )
        return out

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
            resp = self._call(self._es.get, index=self.alias, id=chunk_id)
        except NotFoundError:
            return None
        return source_to_record(chunk_id, resp.body["_source"])

    def refresh_now(self) -> None:
        """Make everything written so far searchable (for refresh=false bulk loads)."""
        self._call(self._es.indices.refresh, index=self.alias)

    # ------------------------------------------------------------------------------ rebuild
    def begin_rebuild(self, source: str | None = None) -> None:
        """Start writing a new generation; readers keep the live one until ``finish_rebuild``.

        ``source`` scopes the rebuild when several sources share the index: only that source's
        writes go to the new generation, the others keep writing the live index and are copied
        over when it is swapped in. Without it the whole index is rebuilt.
        """
        stale = self._rebuild_target()
        if stale is not None:  # a rebuild that never finished (crashed run): start over
            log.warning("dropping unfinished rebuild index %s", stale[0])
            self._call(self._es.indices.delete, index=stale[0])
        self._put_template()
        generation = dt.datetime.now(dt.UTC).strftime("%Y%m%d%H%M%S%f")
        meta = {_REBUILD_META_KEY: source} if source else None
        self._create(
            physical_index_name(self.alias, generation), {rebuild_alias(self.alias): {"is_write_index": True}}, meta
        )

    def finish_rebuild(self, success: bool) -> None:
        rebuild = self._rebuild_target()
        if rebuild is None:
            return
        new, scoped_source = rebuild
        if not success:
            self._call(self._es.indices.delete, index=new)
            return
        old = list(self._call(self._es.indices.get_alias, name=self.alias).body)
        started = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        if scoped_source is not None:
            self._carry_over(old, new, scoped_source, None)
        self._call(self._es.indices.refresh, index=new)
        actions: list[dict[str, Any]] = [{"remove": {"index": o, "alias": self.alias}} for o in old if o != new]
        actions.append({"add": {"index": new, "alias": self.alias, "is_write_index": True}})
        actions.append({"remove": {"index": new, "alias": rebuild_alias(self.alias)}})
        self._call(self._es.indices.update_aliases, actions=actions)  # one atomic swap
        if scoped_source is not None:
            # Other sources kept writing the old generation until the swap: copy what changed
            # since the first copy started (newer versions win; the swap is already done).
            self._carry_over(old, new, scoped_source, started)
        for o in old:
            if o != new:
                self._call(self._es.indices.delete, index=o)

    def _carry_over(self, old: list[str], new: str, source: str, since: str | None) -> None:
        """Copy the other sources' chunks from the live generation into the rebuilt one."""
        query: dict[str, Any] = {"bool": {"must_not": [{"term": {"source": source}}]}}
        if since is not None:
            query["bool"]["filter"] = [{"range": {"updated_at": {"gte": since}}}]
        for o in old:
            self._call(self._es.indices.refresh, index=o)
            self._call(
                self._es.reindex,
                source={"index": o, "query": query},
                script=RENAME_LEGACY_FIELDS,  # the new generation's strict mapping lacks the old name
                # first pass: the new generation holds only the rebuilt source, so "create"
                # never clobbers; second pass: the old generation holds the newer version
                dest={"index": new, "op_type": "create" if since is None else "index"},
                conflicts="proceed",
                wait_for_completion=True,
                refresh=True,
            )

    def close(self) -> None:
        if self._owns_client:
            self._client.close()
