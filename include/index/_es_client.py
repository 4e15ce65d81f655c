"""Connection and retry policy for the Elasticsearch backend.

``client_from_options``: ``options.url`` or ``$ELASTICSEARCH_URL`` (an API key only from
``$ELASTICSEARCH_API_KEY``: source configs refuse credentials, see ``include.config``), else the
Airflow connection ``options.conn_id`` (default ``elasticsearch_default``) through the
Elasticsearch provider's hook, which is where credentials belong.
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

from include.index._es_bulk import RETRYABLE_ERROR_TYPES, RETRYABLE_STATUSES

__all__ = ["bulk_client", "client_from_options", "request_retrying"]

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
    # The provider's hook resolves the connection through Airflow (metadata DB, env
    # AIRFLOW_CONN_*, or a secrets backend) and applies its ES-version compatibility shim.
    from airflow.providers.elasticsearch.hooks.elasticsearch import ElasticsearchSQLHook

    conn_id = options.get("conn_id") or "elasticsearch_default"
    return ElasticsearchSQLHook(elasticsearch_conn_id=conn_id).get_conn().es
