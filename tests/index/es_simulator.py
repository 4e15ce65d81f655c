"""A small Elasticsearch stand-in on 127.0.0.1 for the vector paths of ``ElasticsearchIndex``.

Not an index engine: it keeps documents in a dict and answers the requests the backend makes
(cluster info, template, alias checks, mappings, ``_mget``, ``_search`` by ``doc_id`` terms, by
the vector cache query or by ``knn`` with exact cosine, and ``_bulk`` index/update/delete) in
the shapes the ES 9 docs give, recording every request so tests can check what was asked.
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
            return self._json({"hits": {"hits": self._search(body)}})
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
        query = body["query"]
        if "terms" in query:  # existing chunk ids of documents (the scan)
            ids = set(query["terms"]["doc_id"])
            found = [(cid, 0.0) for cid, d in sorted(self.docs.items()) if d["doc_id"] in ids]
        elif "must" in query.get("bool", {}):
            words = set(re.findall(r"\w+", query["bool"]["must"][0]["multi_match"]["query"].lower()))
            scored = [
                (cid, float(len(words & set(re.findall(r"\w+", d["content_with_weight"].lower())))))
                for cid, d in self.docs.items()
            ]
            sources = {f["term"]["source"] for f in query["bool"].get("filter", [])}
            scored = [(c, s) for c, s in scored if s > 0 and (not sources or self.docs[c]["source"] in sources)]
            found = sorted(scored, key=lambda cs: (-cs[1], cs[0]))[: body.get("size", 10)]
        else:  # the vector cache query: a model term and text hash terms
            model_term, hash_terms = query["bool"]["filter"]
            model, hashes = model_term["term"]["embedding_model"], set(hash_terms["terms"]["text_hash"])
            found = [
                (cid, 0.0)
                for cid, d in sorted(self.docs.items())
                if d.get("embedding_model") == model and d["text_hash"] in hashes
            ]
        return [self._hit(cid, score, source_opt) for cid, score in found]

    def _knn(self, knn: dict[str, Any], source_opt: Any) -> list[dict[str, Any]]:
        q = np.asarray(knn["query_vector"], dtype=np.float32)
        wanted = {f["term"]["source"] for f in knn.get("filter", [])}
        scored = []
        for cid, d in self.docs.items():
            if "embedding" not in d or (wanted and d["source"] not in wanted):
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
                existed = self.docs.pop(cid, None) is not None
                items.append({"delete": {"_id": cid, "status": 200 if existed else 404}})
                continue
            payload = json.loads(next(lines))
            if action == "index":
                self.docs[cid] = payload
            elif "doc" in payload:
                self.docs[cid].update(payload["doc"])
            else:  # the drop-the-vector script
                self.docs[cid].pop("embedding", None)
                self.docs[cid].pop("embedding_model", None)
                self.docs[cid]["sequence"] = payload["script"]["params"]["sequence"]
            items.append({action: {"_id": cid, "status": 201 if action == "index" else 200, "result": "ok"}})
        return {"took": 1, "errors": False, "items": items}


@contextmanager
def es_simulator(alias: str) -> Iterator[tuple[EsSimulator, Elasticsearch]]:
    sim = EsSimulator(alias)
    with serve_asgi(sim) as url:
        client = Elasticsearch(url)
        try:
            yield sim, client
        finally:
            client.close()
