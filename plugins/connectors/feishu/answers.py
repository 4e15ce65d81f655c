"""Feishu answers read as streams and capped after their content-coding, then decoded.

A server controls the size of every body, so none is read whole: a JSON answer is counted
while it streams, after every content-coding layer (``include.http_body``: httpx
would inflate a whole network chunk of ``gzip, gzip`` before any cap could count it), up to
``max_response_bytes`` (a Connection extra, 64 MiB by default); a download up to the file size
cap. An error answer only needs its ``code``/``msg``, so it is cut at 64 KiB and, past that,
typed by its HTTP status alone. A body over its cap is the final :class:`FeishuResponseTooLarge`
naming the endpoint and the limit: the same request would get the same body.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from include.http_body import BodyTooLarge, UndecodableBody, UnsupportedEncoding, aread_capped, read_capped
from plugins.connectors.feishu.errors import FeishuDataError, FeishuResponseTooLarge, error_from_response

__all__ = ["DEFAULT_MAX_RESPONSE_BYTES", "ERROR_BODY_BYTES", "Answer", "aread_answer", "decode_json", "read_answer"]

# The largest JSON answer read: a raw_content answer carries a whole document's text, and the
# file size cap (max_file_bytes) defaults to 100 MiB of a binary format; 64 MiB of JSON is ample.
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
# An error answer is {"code", "msg", "error": {"log_id", ...}}: what is past this is never read.
ERROR_BODY_BYTES = 64 * 1024
_BODY_ERRORS = (BodyTooLarge, UndecodableBody, UnsupportedEncoding)


@dataclass(frozen=True, slots=True)
class Answer:
    """One response, its body read (decoded, capped); ``endpoint`` is the API path asked."""

    status: int
    headers: httpx.Headers
    body: bytes
    endpoint: str

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def _cap(response: httpx.Response, limit: int) -> int:
    return limit if 200 <= response.status_code < 300 else min(limit, ERROR_BODY_BYTES)


def _refused(response: httpx.Response, endpoint: str, cap: int, exc: Exception) -> Answer:
    """What an unreadable body means: an error answer is typed by its status alone; a body
    over the cap is final; one that does not decode is a data error."""
    status = response.status_code
    if not 200 <= status < 300:
        return Answer(status, response.headers, b"", endpoint)
    if isinstance(exc, BodyTooLarge):
        raise FeishuResponseTooLarge(
            f"{endpoint} answered a body over the {cap}-byte limit; not read further",
            endpoint=endpoint,
            limit=cap,
            status=status,
        ) from exc
    raise FeishuDataError(f"{endpoint}: {exc}", status=status) from exc


def read_answer(response: httpx.Response, endpoint: str, limit: int) -> Answer:
    """The answer of a streamed ``response`` (``client.stream(...)``), its body at most ``limit``
    bytes after decoding (an error answer's at most 64 KiB)."""
    cap = _cap(response, limit)
    try:
        body = read_capped(response, cap)
    except _BODY_ERRORS as exc:
        return _refused(response, endpoint, cap, exc)
    return Answer(response.status_code, response.headers, body, endpoint)


async def aread_answer(response: httpx.Response, endpoint: str, limit: int) -> Answer:
    """:func:`read_answer` for an ``httpx.AsyncClient`` stream."""
    cap = _cap(response, limit)
    try:
        body = await aread_capped(response, cap)
    except _BODY_ERRORS as exc:
        return _refused(response, endpoint, cap, exc)
    return Answer(response.status_code, response.headers, body, endpoint)


def decode_json(answer: Answer) -> dict[str, Any]:
    """Return the envelope of a successful call, or raise the matching :class:`FeishuError`."""
    try:
        body = json.loads(answer.body)
    except ValueError:  # also UnicodeDecodeError
        body = None
    if not isinstance(body, dict):
        if answer.status >= 400:
            raise error_from_response(answer.status, None, answer.headers)
        raise FeishuDataError(f"non-JSON response from {answer.endpoint}", status=answer.status)
    if answer.status >= 400 or body.get("code", 0) != 0:
        raise error_from_response(answer.status, body, answer.headers)
    return body
