"""A bulk-API simulator on 127.0.0.1 for ``run_bulk``: real HTTP, the official client, no index.

It answers ``POST /_bulk`` the way Elasticsearch 9 does (one item per action, in order, with
``status``, ``result`` and for failures an ``error`` object), from a script keyed by chunk id:
the n-th time an action for that id arrives it gets the script's n-th status (then success).
It can also refuse requests above a size whole (413, as ES does past ``http.max_content_length``),
drop the connection mid-answer on chosen requests, or leave items out of its answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from elasticsearch import Elasticsearch

from include.index._es_client import bulk_client
from tests.support.server import serve_asgi

__all__ = ["BulkCluster", "bulk_cluster"]

_PRODUCT = (b"x-elastic-product", b"Elasticsearch")
_ERROR_TYPES = {
    429: "es_rejected_execution_exception",
    400: "document_parsing_exception",
    409: "version_conflict_engine_exception",
    503: "unavailable_shards_exception",
}


@dataclass
class BulkCluster:
    script: Mapping[str, list[int]] = field(default_factory=dict)
    max_content_length: int | None = None  # refuse larger request bodies whole with a 413
    drop_requests: set[int] = field(default_factory=set)  # 1-based request numbers to cut off
    answer_items: bool = True  # False: answer without the items (a malformed response)
    seen: dict[str, int] = field(default_factory=dict)
    requests: list[list[str]] = field(default_factory=list)  # chunk ids of each request, in order
    bodies: list[bytes] = field(default_factory=list)  # each request body as received

    def answer(self, body: bytes) -> dict[str, Any]:
        lines = iter(body.splitlines())
        items, ids = [], []
        for line in lines:
            ((action, meta),) = json.loads(line).items()
            if action != "delete":
                next(lines)  # the document line
            cid = meta["_id"]
            ids.append(cid)
            n = self.seen.get(cid, 0)
            self.seen[cid] = n + 1
            statuses = self.script.get(cid, [])
            default = 201 if action == "index" else 200
            items.append(_item(action, meta, statuses[n] if n < len(statuses) else default))
        self.requests.append(ids)
        errors = any("error" in next(iter(i.values())) for i in items)
        return {"took": 1, "errors": errors, "items": items if self.answer_items else []}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http" and scope["path"] == "/_bulk", scope["path"]
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        number = len(self.requests) + 1
        self.bodies.append(body)
        if self.max_content_length is not None and len(body) > self.max_content_length:
            self.requests.append([])
            await _respond(send, 413, b"")
            return
        payload = json.dumps(self.answer(body)).encode()
        if number in self.drop_requests:
            # headers promise a body that never comes: the client sees the connection break
            await send({"type": "http.response.start", "status": 200, "headers": [_PRODUCT]})
            raise ConnectionAbortedError("bulk simulator drops this request")
        await _respond(send, 200, payload)


def _item(action: str, meta: Mapping[str, Any], status: int) -> dict[str, Any]:
    info: dict[str, Any] = {"_index": meta["_index"], "_id": meta["_id"], "status": status}
    if status >= 300 and not (action == "delete" and status == 404):
        error_type = _ERROR_TYPES.get(status, "exception")
        info["error"] = {"type": error_type, "reason": f"{error_type} happened"}
    elif action == "delete":
        info["result"] = "deleted" if status == 200 else "not_found"
    else:
        info["result"] = "updated" if action == "update" else "created"
    return {action: info}


async def _respond(send: Any, status: int, body: bytes) -> None:
    headers = [_PRODUCT, (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@contextmanager
def bulk_cluster(cluster: BulkCluster, *, max_attempts: int = 5) -> Iterator[Elasticsearch]:
    """Serve ``cluster``; yield a client configured as ``ElasticsearchIndex`` configures its bulk client."""
    with serve_asgi(cluster) as url:
        base = Elasticsearch(url).options(max_retries=0, retry_on_timeout=False, request_timeout=10)
        client = bulk_client(base, max_attempts=max_attempts, initial_backoff=0.01, max_backoff=0.05)
        try:
            yield client
        finally:
            base.close()
