"""Connection and retry policy for the Elasticsearch backend.

``client_from_options``: ``options.url`` or ``$ELASTICSEARCH_URL`` (an API key only from
``$ELASTICSEARCH_API_KEY``: source configs refuse credentials, see ``include.config``), else the
Airflow connection ``options.conn_id`` (default ``elasticsearch_default``), read through
``include.connections`` (Airflow's secrets backends are where credentials belong) and turned
into a client the way the Elasticsearch provider's hook does it.
``request_retrying``: connection failures, 429 (``es_rejected_execution_exception``) and 5xx
are retried with jittered exponential backoff; anything else is the request's own fault.
``bulk_client``: the client bulk writes go through. ``streaming_bulk`` retries 429 and 5xx
itself, per item; what is left to the transport is a failure below HTTP.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import tenacity
from elasticsearch import ApiError, ConnectionError, ConnectionTimeout, Elasticsearch

from include.connections import ConnectionRecord, get_connection
from include.index._es_bulk import RETRYABLE_ERROR_TYPES, RETRYABLE_STATUSES

__all__ = ["bulk_client", "client_from_connection", "client_from_options", "request_retrying"]

log = logging.getLogger("include.index.elasticsearch")


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, ConnectionError | ConnectionTimeout):
        return True
    if isinstance(exc, ApiError):
        if exc.meta.status in RETRYABLE_STATUSES:
            return True
        body = exc.body if isinstance(exc.body, dict) else {}
        err = body.get("error")
        return isinstance(err, dict) and err.get("type") in RETRYABLE_ERROR_TYPES
    return False


def request_retrying(*, max_attempts: int, initial_backoff: float, max_backoff: float) -> tenacity.Retrying:
    """Retry policy for one request: connection failures, 429 and 5xx, exponential backoff."""
    return tenacity.Retrying(
        retry=tenacity.retry_if_exception(_retryable),
        wait=tenacity.wait_exponential_jitter(initial=initial_backoff, max=max_backoff),
        stop=tenacity.stop_after_attempt(max_attempts),
        before_sleep=lambda rs: log.warning(
            "elasticsearch request failed (attempt %d), retrying: %s",
            rs.attempt_number,
            rs.outcome.exception() if rs.outcome else "?",
        ),
        reraise=True,
    )


def bulk_client(
    client: Elasticsearch, *, max_attempts: int, initial_backoff: float, max_backoff: float
) -> Elasticsearch:
    """``client`` with the transport retrying connection failures and timeouts of a bulk request.

    Statuses are not retried here (``retry_on_status=()``): ``streaming_bulk`` re-sends 429 and
    5xx answers, whole or per item, with its own backoff; both retrying would multiply attempts.
    A timed-out bulk may have been applied, and re-sending it is harmless: ids are deterministic.
    """
    return client.options(
        max_retries=max_attempts - 1,
        retry_on_status=(),
        retry_on_timeout=True,
        # jittered exponential backoff (the transport's "equal jitter"): workers spread out
        retry_backoff_base=initial_backoff,
        retry_backoff_cap=max_backoff,
    )


def client_from_options(options: Mapping[str, Any]) -> Elasticsearch:
    """Build a client from index options, the environment, or an Airflow connection."""
    url = options.get("url") or (None if options.get("conn_id") else os.environ.get("ELASTICSEARCH_URL"))
    timeout = float(options.get("request_timeout", 30))
    if url:
        kwargs: dict[str, Any] = {"request_timeout": timeout}
        api_key = os.environ.get("ELASTICSEARCH_API_KEY")
        if api_key:
            kwargs["api_key"] = api_key
        if options.get("ca_certs"):
            kwargs["ca_certs"] = options["ca_certs"]
        if "verify_certs" in options:
            kwargs["verify_certs"] = bool(options["verify_certs"])
        return Elasticsearch(url, **kwargs)
    return client_from_connection(get_connection(options.get("conn_id") or "elasticsearch_default"))


# extras the provider's hook reads for its SQL cursor, not client arguments
_SQL_CURSOR_EXTRAS = frozenset({"fetch_size", "field_multi_value_leniency"})


def client_from_connection(conn: ConnectionRecord) -> Elasticsearch:
    """A client for an ``elasticsearch`` connection, as the provider's ``ElasticsearchSQLHook``
    builds one: ``schema`` is the URL scheme, login and password basic auth, and the extras
    (``api_key``, ``ca_certs``, ``verify_certs``...) client arguments. The provider's
    ``es_compat_with`` shim is left out: ``ElasticsearchIndex`` runs against a 9.x server only."""
    url = f"{conn.schema or 'http'}://{conn.host or 'localhost'}:{conn.port or 9200}/"
    kwargs = {k: v for k, v in conn.extra.items() if k not in _SQL_CURSOR_EXTRAS}
    if "http_compress" in kwargs:
        kwargs["http_compress"] = bool(kwargs["http_compress"])
    if conn.login and conn.password:
        kwargs["basic_auth"] = (conn.login, conn.password)
    return Elasticsearch(url, **kwargs)
