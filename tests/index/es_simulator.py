"""A small Elasticsearch stand-in on 127.0.0.1 for the vector paths of ``ElasticsearchIndex``.

Not an index engine: it keeps documents in a dict and answers the requests the backend makes
(cluster info, template, alias checks, mappings, ``_mget``, ``_refresh``, ``_count``,
``_search`` by a query or by ``knn`` with exact cosine, and ``_bulk`` index/update/delete) in
the shapes the ES 9 docs give, recording every request so tests can check what was asked
(``requests``, and every bulk action with its payload in ``actions``).

Queries are evaluated, not pattern-matched: ``match_all``, ``term``, ``terms``, ``range``
(``gte``/``lte`` by comparison), ``multi_match`` and ``bool`` (``must``, ``filter``,
``must_not``, ``should`` with ``minimum_should_match``: 1 by default without a must or filter
clause, 0 with one, as ES does). A ``knn`` search applies its ``filter`` to the candidates
before taking the ``k`` nearest, as ES's filtered kNN does; a clause it does not know is an
error, so a filter the backend sends is never silently ignored.
It reports version 9.5.1, so ``_source`` leaves vectors out unless ``exclude_vectors`` is false,
as 9.2+ does. Full-text search answers every document containing any query word (score: the
number of such words): enough to see the BM25 ranking reach the fusion, not to rank like ES.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from elasticsearch import Elasticsearch
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.server import serve_asgi

__all__ = ["EsSimulator", "es_simulator"]

_PRODUCT = {"X-Elastic-Product": "Elasticsearch"}
_INFO = {"name": "sim", "cluster_name": "sim", "version": {"number": "9.5.1"}, "tagline": "You Know, for Search"}


@dataclass
class EsSimulator:
    alias: str
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)  # (method, path, JSON body)
    actions: list[tuple[str, str, Any]] = field(default_factory=list)  # bulk (action, _id, payload or None)

    @property
    def physical(self) -> str:
        return f"{self.alias}__v0"

    def bodies(self, method: str, suffix: str) -> list[Any]:
        return [b for m, p, b in self.requests if m == method and p.endswith(suffix)]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await Starlette(routes=[Route("/{path:path}", self._route, methods=["GET", "PUT", "POST", "HEAD"])])(
            scope, receive, send
        )

    async def _route(self, request: Request) -> Response:
        raw = await request.body()
        path, method = "/" + request.path_params["path"], request.method
        body: Any = None
        if raw and not path.endswith("/_bulk"):
            body = json.loads(raw)
        self.requests.append((method, path, body if body is not None else raw.decode() or None))
        if path == "/":
            return self._json(_INFO)
        if path.startswith("/_index_template/"):
            return self._json({"acknowledged": True})
        if path == f"/_alias/{self.alias}" and method == "HEAD":
            return Response(status_code=200, headers=_PRODUCT)
        if path.startswith("/_alias/"):
            return self._json({"error": "alias missing", "status": 404}, 404)
        if path.endswith("/_mapping"):
            if method == "PUT":
                self.properties.update(body["properties"])
                return self._json({"acknowledged": True})
            return self._json({self.physical: {"mappings": {"properties": self.properties}}})
        if "/_doc/" in path:
            cid = path.rsplit("/", 1)[-1]
            if cid not in self.docs:
                return self._json({"_id": cid, "found": False}, 404)
            return self._json(self._hit(cid, 0.0, None) | {"found": True})
        if path.endswith("/_mget"):
            return self._json({"docs": [self._get(i) for i in body["ids"]]})
        if path.endswith("/_search"):
            return self._json({"hits": {"hits": self._search(body)}, "timed_out": False})
        if path.endswith("/_refresh"):
            return self._json({"_shards": {"total": 1, "successful": 1, "failed": 0}})
        if path.endswith("/_count"):
            query = (body or {}).get("query", {"match_all": {}})
            return self._json({"count": sum(self._matches(d, query) for d in self.docs.values())})
        if path == "/_bulk":
            return self._json(self._bulk(raw))
        return self._json({"error": f"simulator: no route for {method} {path}", "status": 400}, 400)

    def _json(self, body: Any, status: int = 200) -> JSONResponse:
        return JSONResponse(body, status_code=status, headers=_PRODUCT)

    def _get(self, cid: str) -> dict[str, Any]:
        src = self.docs.get(cid)
        return {"_id": cid, "found": src is not None, "_source": src or {}}

    def _search(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        source_opt = body.get("_source")
        if "knn" in body:
            return self._knn(body["knn"], source_opt)
        query = body.get("query", {"match_all": {}})
        words = _query_words(query)
        found = [(cid, _score(words, d)) for cid, d in sorted(self.docs.items()) if self._matches(d, query)]
        if words:  # ranked: most query words first (a scan sorts by chunk id, as requested)
            found.sort(key=lambda cs: (-cs[1], cs[0]))
        elif body.get("search_after"):
            found = [(c, s) for c, s in found if c > body["search_after"][0]]
        return [self._hit(cid, score, source_opt) for cid, score in found[: body.get("size", 10)]]

    def _matches(self, doc: dict[str, Any], query: dict[str, Any]) -> bool:
        ((kind, spec),) = query.items()
        if kind == "match_all":
            return True
        if kind in ("term", "terms"):
            ((name, wanted),) = spec.items()
            if kind == "term":
                wanted = [wanted["value"] if isinstance(wanted, dict) else wanted]
            return any(_same(v, w) for v in _values(doc, name) for w in wanted)
        if kind == "range":
            ((name, bounds),) = spec.items()
            values = _values(doc, name)
            return any(
                all(_compare(op, v, bound) for op, bound in bounds.items() if op in ("gte", "gt", "lte", "lt"))
                for v in values
            )
        if kind == "multi_match":
            return _score(set(re.findall(r"\w+", spec["query"].lower())), doc) > 0
        if kind == "bool":
            return self._bool(doc, spec)
        raise ValueError(f"simulator: no support for the {kind!r} query")

    def _bool(self, doc: dict[str, Any], spec: dict[str, Any]) -> bool:
        required = _clauses(spec, "must") + _clauses(spec, "filter")
        if not all(self._matches(doc, c) for c in required):
            return False
        if any(self._matches(doc, c) for c in _clauses(spec, "must_not")):
            return False
        should = _clauses(spec, "should")
        minimum = int(spec.get("minimum_should_match", 0 if required else 1)) if should else 0
        return sum(self._matches(doc, c) for c in should) >= minimum

    def _knn(self, knn: dict[str, Any], source_opt: Any) -> list[dict[str, Any]]:
        q = np.asarray(knn["query_vector"], dtype=np.float32)
        filters = knn.get("filter", [])
        filters = filters if isinstance(filters, list) else [filters]
        scored = []
        for cid, d in self.docs.items():
            # the filter picks the candidates, before the k nearest are taken (filtered kNN)
            if "embedding" not in d or not all(self._matches(d, f) for f in filters):
                continue
            v = np.asarray(d["embedding"], dtype=np.float32)
            cos = float(q @ v / (np.linalg.norm(q) * np.linalg.norm(v)))
            scored.append((cid, (1.0 + cos) / 2.0))  # ES's cosine score
        scored.sort(key=lambda cs: (-cs[1], cs[0]))
        return [self._hit(cid, score, source_opt) for cid, score in scored[: knn["k"]]]

    def _hit(self, cid: str, score: float, source_opt: Any) -> dict[str, Any]:
        src = dict(self.docs[cid])
        keep_vectors = isinstance(source_opt, dict) and source_opt.get("exclude_vectors") is False
        if not keep_vectors:
            src.pop("embedding", None)
        if isinstance(source_opt, dict | list):
            includes = source_opt["includes"] if isinstance(source_opt, dict) else source_opt
            src = {k: v for k, v in src.items() if k in includes}
        return {"_id": cid, "_score": score, "_source": src, "sort": [cid]}

    def _bulk(self, raw: bytes) -> dict[str, Any]:
        lines = iter(raw.decode().splitlines())
        items = []
        for line in lines:
            ((action, meta),) = json.loads(line).items()
            cid = meta["_id"]
            if action == "delete":
                self.actions.append((action, cid, None))
                existed = self.docs.pop(cid, None) is not None
                items.append({"delete": {"_id": cid, "status": 200 if existed else 404}})
                continue
            payload = json.loads(next(lines))
            self.actions.append((action, cid, payload))
            if action == "index":
                self.docs[cid] = payload
            elif "doc" in payload:
                self.docs[cid].update(payload["doc"])
            else:  # the drop-the-vector script (which may set the access fields too)
                params = payload["script"]["params"]
                self.docs[cid].pop("embedding", None)
                self.docs[cid].pop("embedding_model", None)
                self.docs[cid]["sequence"] = params["sequence"]
                self.docs[cid].update({k: params[k] for k in ("acl", "public") if k in params})
            items.append({action: {"_id": cid, "status": 201 if action == "index" else 200, "result": "ok"}})
        return {"took": 1, "errors": False, "items": items}


def _values(doc: dict[str, Any], name: str) -> list[Any]:
    value = doc.get(name)
    return [] if value is None else list(value) if isinstance(value, list) else [value]


def _same(value: Any, wanted: Any) -> bool:
    # a boolean field matches true/false only (1 == True in Python, not in ES)
    if isinstance(value, bool) or isinstance(wanted, bool):
        return isinstance(value, bool) and isinstance(wanted, bool) and value is wanted
    return bool(value == wanted)


def _compare(op: str, value: Any, bound: Any) -> bool:
    return bool({"gte": value >= bound, "gt": value > bound, "lte": value <= bound, "lt": value < bound}[op])


def _clauses(spec: dict[str, Any], occur: str) -> list[dict[str, Any]]:
    clauses = spec.get(occur, [])
    return clauses if isinstance(clauses, list) else [clauses]


def _query_words(query: dict[str, Any]) -> set[str]:
    """The words of a bool query's ``multi_match`` (the BM25 search), none for other queries."""
    for clause in _clauses(query.get("bool", {}), "must"):
        if "multi_match" in clause:
            return set(re.findall(r"\w+", clause["multi_match"]["query"].lower()))
    return set()


def _score(words: set[str], doc: dict[str, Any]) -> float:
    return float(len(words & set(re.findall(r"\w+", str(doc.get("content_with_weight", "")).lower()))))


@contextmanager
def es_simulator(alias: str) -> Iterator[tuple[EsSimulator, Elasticsearch]]:
    sim = EsSimulator(alias)
    with serve_asgi(sim) as url:
        client = Elasticsearch(url)
        try:
            yield sim, client
        finally:
            client.close()
