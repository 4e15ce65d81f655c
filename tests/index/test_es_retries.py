"""Request-level retries of the Elasticsearch backend, over real HTTP.

A fault server on 127.0.0.1 answers the first requests with the failures a busy cluster
gives (503, 429 ``es_rejected_execution_exception``) and then succeeds; the official client,
configured as the backend configures it (transport retries off), goes through our tenacity
policy. It is not an index: it only answers ``GET /`` (cluster info) and counts attempts.
"""

from __future__ import annotations

from typing import Any

import pytest
from elasticsearch import ApiError, BadRequestError, Elasticsearch
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from include.index.elasticsearch import request_retrying
from tests.support.server import serve_asgi

_PRODUCT = {"X-Elastic-Product": "Elasticsearch"}
_INFO = {
    "name": "fault",
    "cluster_name": "fault",
    "cluster_uuid": "x",
    "version": {"number": "9.5.1", "build_flavor": "default"},
    "tagline": "You Know, for Search",
}


def _error(status: int, error_type: str) -> JSONResponse:
    body = {
        "error": {"type": error_type, "reason": error_type, "root_cause": [{"type": error_type, "reason": "r"}]},
        "status": status,
    }
    return JSONResponse(body, status_code=status, headers=_PRODUCT)


def _app(script: list[tuple[int, str]]) -> tuple[Starlette, list[int]]:
    seen: list[int] = []

    async def info(request: Request) -> JSONResponse:
        seen.append(len(seen))
        if len(seen) <= len(script):
            return _error(*script[len(seen) - 1])
        return JSONResponse(_INFO, headers=_PRODUCT)

    return Starlette(routes=[Route("/", info)]), seen


def _client(url: str) -> Elasticsearch:
    # what ElasticsearchIndex does with any client it is given
    return Elasticsearch(url).options(max_retries=0, retry_on_timeout=False, request_timeout=10)


def _policy(attempts: int) -> Any:
    return request_retrying(max_attempts=attempts, initial_backoff=0.01, max_backoff=0.05)


def test_busy_cluster_answers_are_retried_until_success() -> None:
    app, seen = _app(
        [(503, "unavailable_shards_exception"), (429, "es_rejected_execution_exception"), (502, "bad_gateway")]
    )
    with serve_asgi(app) as url:
        es = _client(url)
        info = _policy(5)(es.info)
        assert info.body["version"]["number"] == "9.5.1"
        assert len(seen) == 4  # three failures, then the answer
        es.close()


def test_retries_stop_after_max_attempts_with_the_last_error() -> None:
    app, seen = _app([(429, "es_rejected_execution_exception")] * 10)
    with serve_asgi(app) as url:
        es = _client(url)
        with pytest.raises(ApiError) as err:
            _policy(3)(es.info)
        assert err.value.meta.status == 429 and err.value.message == "es_rejected_execution_exception"
        assert len(seen) == 3
        es.close()


def test_a_bad_request_is_not_retried() -> None:
    app, seen = _app([(400, "illegal_argument_exception")])
    with serve_asgi(app) as url:
        es = _client(url)
        with pytest.raises(BadRequestError):
            _policy(5)(es.info)
        assert len(seen) == 1
        es.close()


def test_an_unreachable_server_is_retried_then_reported() -> None:
    from elasticsearch import ConnectionError

    from tests.support.server import free_port

    es = _client(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    attempts: list[int] = []
    policy = _policy(3)
    policy.before_sleep = lambda rs: attempts.append(rs.attempt_number)
    with pytest.raises(ConnectionError):
        policy(es.info)
    assert attempts == [1, 2]
    es.close()


def _info_app(status: int, body: dict[str, Any]) -> Starlette:
    async def info(request: Request) -> JSONResponse:
        return JSONResponse(body, status_code=status, headers=_PRODUCT)

    return Starlette(routes=[Route("/", info)])


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (200, {**_INFO, "version": {"number": "10.0.0"}}, "server 10.0.0 does not match"),
        (
            400,
            {"error": {"type": "media_type_header_exception", "reason": "Invalid media-type value"}, "status": 400},
            "not version 9.x",
        ),
    ],
)
def test_a_server_of_another_major_version_is_refused_with_a_clear_message(
    status: int, body: dict[str, Any], message: str
) -> None:
    from include.index.elasticsearch import ElasticsearchIndex

    with serve_asgi(_info_app(status, body)) as url, pytest.raises(RuntimeError, match=message):
        ElasticsearchIndex(Elasticsearch(url), "tributary", max_attempts=1)
