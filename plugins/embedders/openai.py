"""Provider ``openai``: any OpenAI-compatible ``POST {base}/v1/embeddings`` (OpenAI, vLLM, TEI, Ollama).

**Endpoint and key** come from the Connection the source's ``embedding.conn_id`` names (the
caller hands over its :class:`~include.connections.ConnectionRecord`): the base URL is the
extra ``base_url`` when set, else ``<schema or https>://<host>[:<port>]`` (a host may carry a
path; a base ending in ``/v1`` is not doubled); the key is the password, sent as ``Authorization:
Bearer`` on the client of that one origin. Redirects are not followed (a 3xx is an error), so
the key goes nowhere else; it is never logged, and error messages from the endpoint are scrubbed
of it (OpenAI's 401 echoes part of a wrong key) and left out altogether for 401/403.

**Requests**: ``{"model", "input": [...], "encoding_format": "float"}`` plus ``dimensions``
when configured, ``batch_size`` texts each (OpenAI takes at most 2,048). Each request first takes
a place in the endpoint's budget (``requests_per_minute``; one sliding window per endpoint origin,
in Redis when ``TRIBUTARY_REDIS_URL`` is set, as the connectors' budgets are: every worker shares
it); a 429 also pauses the whole origin's budget for its ``Retry-After``. Transient failures (429,
5xx, connection errors and timeouts) are retried with :class:`include.retry.RetryPolicy`
(backoff with jitter, the server's ``Retry-After`` honoured up to a cap, all attempts within a
deadline of four request timeouts); what is still failing then is a retryable
:class:`~plugins.embedders.base.EmbeddingError` (``unreachable``, ``rate_limited``,
``server_error``): infrastructure, for the task's retries.

**Answers** are read with :func:`include.http_body.read_capped` (cap: room for the batch's
vectors as JSON text) and parsed strictly: one ``data`` entry per input, placed by its
``index``; every vector must have the configured dimension (or, when none is configured, the
size most vectors of the first answer had) and finite values. Bad rows are collected over the whole call and
raised together as a non-retryable error naming them (``bad_dimension``, ``not_finite``,
``bad_response``, ``zero_vector``), so the engine fails those documents and the run goes on. A
400 for a batch (an input the endpoint refuses) is narrowed down by halving the batch until the
refused texts are found (``refused``, with their rows). Vectors are normalised to unit length
(OpenAI's are already; TEI and Ollama may not be).

**Input limit.** With ``max_input_tokens`` set, a longer text is cut before it is sent and
reported as a :class:`~plugins.embedders.base.Truncation`. The endpoint's tokenizer is not
here, so tokens are estimated from characters (:func:`estimate_tokens`): an ASCII character
counts 1/3 token (English averages about 4 characters per token in OpenAI's tokenizers; 3 leaves
room for code and numbers), any other character 1 token (a common CJK character is about one
token in cl100k_base, less in o200k_base). The estimate errs high for prose; a text the endpoint
still refuses comes back as a ``refused`` row.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
import numpy.typing as npt

from include.config import EmbeddingConfig
from include.connections import ConnectionRecord
from include.http_body import ACCEPT_ENCODING, BodyTooLarge, UndecodableBody, UnsupportedEncoding, read_capped
from include.ratelimit import Rate, RateLimiter, RateLimitTimeout
from include.retry import RetryPolicy, parse_retry_after
from include.settings import get_settings
from plugins.embedders.base import EmbeddedTexts, Embedder, EmbeddingError, Truncation
from plugins.embedders.registry import provider_model_id, register_provider

__all__ = ["Endpoint", "OpenAIEmbedder", "endpoint_of", "estimate_tokens", "truncate_estimated"]

log = logging.getLogger(__name__)

_MAX_RETRY_AFTER = 60.0
_MAX_BISECT_REQUESTS = 64  # requests one call may spend finding the refused texts of 400s
_BYTES_PER_FLOAT = 26  # "-1.2345678901234567e-05," is 24
_DEFAULT_DIMENSIONS_GUESS = 3072  # the largest OpenAI model, for the body cap before a vector is seen
# OpenAI's models' native sizes (https://platform.openai.com/docs/guides/embeddings)
_KNOWN_DIMENSIONS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}


@dataclass(frozen=True, slots=True)
class Endpoint:
    url: str  # the embeddings URL
    origin: str  # scheme://host:port: the only place the key is sent, and the budget's scope
    key: str | None

    def __repr__(self) -> str:  # no key
        return f"Endpoint({self.url!r})"


def endpoint_of(conn: ConnectionRecord) -> Endpoint:
    """The embeddings URL and key of a Connection (see the module docstring)."""
    base = str(conn.extra.get("base_url") or "").strip()
    if not base:
        if not conn.host:
            raise ValueError(f"Connection {conn.conn_id!r}: no host and no extra base_url for the embeddings endpoint")
        host = conn.host.strip()
        if "://" not in host:
            port = f":{conn.port}" if conn.port else ""
            head, _, path = host.partition("/")
            host = f"{conn.schema or 'https'}://{head}{port}" + (f"/{path}" if path else "")
        base = host
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"Connection {conn.conn_id!r}: embeddings base URL must be http(s)://host[:port][/path]")
    base = base.rstrip("/")
    url = f"{base}/embeddings" if base.endswith("/v1") else f"{base}/v1/embeddings"
    default_port = 443 if parts.scheme == "https" else 80
    origin = f"{parts.scheme}://{parts.hostname}:{parts.port or default_port}"
    return Endpoint(url=url, origin=origin, key=conn.password or None)


def estimate_tokens(text: str) -> float:
    """Tokens ``text`` is estimated to take (see the module docstring)."""
    ascii_chars = len(text) if text.isascii() else sum(char.isascii() for char in text)
    return ascii_chars / 3 + (len(text) - ascii_chars)


def truncate_estimated(text: str, limit: int) -> tuple[str, int, int]:
    """(the longest prefix estimated within ``limit`` tokens, the text's estimate, the prefix's)."""
    total = math.ceil(estimate_tokens(text))
    if total <= limit:
        return text, total, total
    used, cut = 0.0, 0
    for cut, char in enumerate(text):  # noqa: B007 - cut is read after the loop
        used += 1 / 3 if char.isascii() else 1.0
        if used > limit:
            break
    kept = text[:cut]
    return kept, total, math.ceil(estimate_tokens(kept))


class _Transient(Exception):
    """A failure worth retrying; ``retry_after`` is the server's hint, if any."""

    def __init__(self, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after


@dataclass(slots=True)
class _Call:
    """What one ``embed_documents`` call collects: vectors by row, bad rows by reason, and what
    is left of its allowance of requests for narrowing down refusals."""

    vectors: list[npt.NDArray[np.float32] | None]
    bad: dict[str, list[int]] = field(default_factory=dict)
    bisect_budget: int = _MAX_BISECT_REQUESTS
    refusal: str = ""  # the endpoint's first refusal, for the error message


class _Refused(Exception):
    """The endpoint refused the request's input (400/413/422): some text of it is to blame."""


class OpenAIEmbedder(Embedder):
    def __init__(
        self,
        config: EmbeddingConfig,
        endpoint: Endpoint,
        *,
        model_id: str,
        redis_url: str | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,  # between retries (tests record instead)
        max_attempts: int = 5,
    ) -> None:
        self.config = config
        self.model = str(config.model)
        self.model_id = model_id
        self._dimensions = config.dimensions or _KNOWN_DIMENSIONS.get(self.model, 0)  # 0: not known yet
        self.batch_size = config.batch_size
        self.endpoint = endpoint
        self.stats: dict[str, int] = {"requests": 0}
        headers = {"Accept-Encoding": ACCEPT_ENCODING, "Content-Type": "application/json"}
        if endpoint.key:
            headers["Authorization"] = f"Bearer {endpoint.key}"
        timeout = httpx.Timeout(config.timeout_seconds, connect=min(10.0, config.timeout_seconds))
        self._http = httpx.Client(headers=headers, timeout=timeout, transport=transport, follow_redirects=False)
        self._sleep = sleep
        self._deadline = 4 * config.timeout_seconds
        self.retries = RetryPolicy(
            "embeddings",
            retry_on=lambda exc: isinstance(exc, _Transient),
            max_attempts=max_attempts,
            max_retry_after=_MAX_RETRY_AFTER,
            hint_jitter=0.1,
            deadline=self._deadline,
            patient=lambda exc: isinstance(exc, _Transient) and exc.reason == "rate_limited",
        )
        self.limiter = RateLimiter("embeddings", redis_url=redis_url)
        self._budget_key = f"tributary:embeddings:budget:{endpoint.origin}"
        rpm = config.requests_per_minute
        self._rates = (Rate(rpm, 60.0),) if rpm else ()

    @property
    def dimensions(self) -> int:
        """The vector size: configured, known for OpenAI's models, else asked of the endpoint
        with one short request (the engine needs it before the first batch)."""
        if not self._dimensions:
            self.embed_documents(["dimension probe"])
        return self._dimensions

    @dimensions.setter
    def dimensions(self, value: int) -> None:
        self._dimensions = value

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self.model_id!r}, {self.endpoint.url!r})"

    def close(self) -> None:
        self._http.close()
        self.limiter.close()

    # ---------------------------------------------------------------- the interface

    def embed_documents(self, texts: Sequence[str]) -> EmbeddedTexts:
        sent, truncated = self._prepare(texts)
        call = _Call([None] * len(sent))
        for start in range(0, len(sent), self.batch_size):
            self._embed_rows(sent, list(range(start, min(start + self.batch_size, len(sent)))), call)
        if call.bad:
            raise self._bad_rows_error(call)
        done = [v for v in call.vectors if v is not None]  # every row, once no row is bad
        matrix = np.vstack(done) if done else np.zeros((0, self._dimensions), dtype=np.float32)
        return EmbeddedTexts(matrix.astype(np.float32, copy=False), truncated)

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        vector: npt.NDArray[np.float32] = self.embed_documents([text]).vectors[0]
        return vector

    # ---------------------------------------------------------------- steps

    def _prepare(self, texts: Sequence[str]) -> tuple[list[str], list[Truncation]]:
        empty = [row for row, text in enumerate(texts) if not text.strip()]
        if empty:  # OpenAI refuses an empty input with a 400 for the whole request
            raise EmbeddingError("empty_input", f"empty texts at rows {empty}", retryable=False, rows=empty)
        limit = self.config.max_input_tokens
        if limit is None:
            return list(texts), []
        sent, truncated = [], []
        for row, text in enumerate(texts):
            kept, total, count = truncate_estimated(text, limit)
            if count < total:
                truncated.append(Truncation(row=row, tokens=total, kept=count))
            sent.append(kept)
        return sent, truncated

    def _embed_rows(self, texts: list[str], rows: list[int], call: _Call) -> None:
        """Embed ``rows`` of ``texts`` into ``vectors``; a refused batch is halved to find its culprits."""
        try:
            answer = self._request([texts[r] for r in rows])
        except _Refused as exc:
            if len(rows) == 1 or call.bisect_budget <= 0:
                log.info("embeddings: %d text(s) refused: %s", len(rows), exc)
                call.bad.setdefault("refused", []).extend(rows)
                call.refusal = call.refusal or str(exc)
                return
            call.bisect_budget -= 2
            half = len(rows) // 2
            self._embed_rows(texts, rows[:half], call)
            self._embed_rows(texts, rows[half:], call)
            return
        self._place(answer, rows, call)

    def _request(self, inputs: list[str]) -> Any:
        body: dict[str, Any] = {"model": self.model, "input": inputs, "encoding_format": "float"}
        if self.config.dimensions is not None:
            body["dimensions"] = self.config.dimensions
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        cap = 65536 + len(inputs) * (self._dimensions or _DEFAULT_DIMENSIONS_GUESS) * _BYTES_PER_FLOAT
        try:
            for attempt in self.retries.retrying(sleep=self._sleep):
                with attempt:
                    return self._send(payload, cap)
        except _Transient as exc:
            raise EmbeddingError(exc.reason, f"{self.endpoint.url}: {exc} (after retries)", retryable=True) from None
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    def _send(self, payload: bytes, cap: int) -> Any:
        self._take_budget()
        self.stats["requests"] += 1
        try:
            with self._http.stream("POST", self.endpoint.url, content=payload) as response:
                status = response.status_code
                retry_after = response.headers.get("retry-after")
                body = read_capped(response, cap) if status < 300 else self._error_body(response)
        except httpx.TransportError as exc:  # connect, read, timeouts
            raise _Transient("unreachable", f"{type(exc).__name__} talking to {self.endpoint.origin}") from None
        except (BodyTooLarge, UnsupportedEncoding, UndecodableBody) as exc:
            raise EmbeddingError("bad_response", f"{self.endpoint.url}: {exc}", retryable=False) from None
        if status == 200:
            return self._json(body)
        return self._fail(status, body, retry_after)

    @staticmethod
    def _error_body(response: httpx.Response) -> bytes:
        try:
            return read_capped(response, 65536)
        except (BodyTooLarge, UnsupportedEncoding, UndecodableBody):
            return b""  # the status says what matters; an unreadable error body adds nothing

    def _take_budget(self) -> None:
        try:
            # real sleeps: the budget is shared with other workers on the real clock
            self.limiter.acquire(self._budget_key, self._rates, max_wait=self._deadline)
        except RateLimitTimeout as exc:
            raise EmbeddingError("rate_limited", f"{self.endpoint.origin}: {exc}", retryable=True) from None

    def _fail(self, status: int, body: bytes, retry_after: str | None) -> Any:
        detail = self._error_message(body) if status not in (401, 403) else ""
        where = f"HTTP {status} from {self.endpoint.url}" + (f": {detail}" if detail else "")
        if status == 429:
            hint = parse_retry_after(retry_after, cap=_MAX_RETRY_AFTER)
            self.limiter.penalize(self._budget_key, pause=hint if hint is not None else 1.0, floor=0.0)
            raise _Transient("rate_limited", where, retry_after=hint)
        if status >= 500:
            raise _Transient("server_error", where, retry_after=parse_retry_after(retry_after, cap=_MAX_RETRY_AFTER))
        if status in (400, 413, 422):
            raise _Refused(where)
        reason = {401: "unauthorized", 403: "unauthorized", 404: "not_found"}.get(
            status, "redirected" if status < 400 else "refused"
        )
        raise EmbeddingError(reason, where, retryable=False)

    def _error_message(self, body: bytes) -> str:
        """The ``error.message`` of an OpenAI error body (else the start of the body), key scrubbed."""
        try:
            message = str(json.loads(body)["error"]["message"])
        except (ValueError, KeyError, TypeError):
            message = body[:300].decode("utf-8", "replace")
        if self.endpoint.key:
            message = message.replace(self.endpoint.key, "***")
        return message[:300]

    @staticmethod
    def _json(body: bytes) -> Any:
        try:
            return json.loads(body)
        except ValueError as exc:
            raise EmbeddingError("bad_response", f"answer is not JSON: {exc}", retryable=False) from None

    # ---------------------------------------------------------------- answers

    def _place(self, answer: Any, rows: list[int], call: _Call) -> None:
        """Check every vector of one answer and put it at its row (by ``data[i].index``)."""
        data = answer.get("data") if isinstance(answer, dict) else None
        entries = [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []
        indices = sorted(i for item in entries if isinstance(i := item.get("index"), int) and not isinstance(i, bool))
        if not isinstance(data, list) or len(entries) != len(data) or indices != list(range(len(rows))):
            raise EmbeddingError(
                "bad_response",
                f"{self.endpoint.url}: expected one data entry per input with indices 0..{len(rows) - 1}",
                retryable=False,
                rows=rows,
            )
        if not self._dimensions:  # nothing configured or seen yet: the size most vectors of this answer have
            sizes = Counter(len(item["embedding"]) for item in entries if isinstance(item.get("embedding"), list))
            self._dimensions = sizes.most_common(1)[0][0] if sizes else 0
        for item in data:
            row = rows[item["index"]]
            vector, reason = self._vector(item.get("embedding"))
            if reason:
                call.bad.setdefault(reason, []).append(row)
            else:
                call.vectors[row] = vector

    def _vector(self, raw: Any) -> tuple[npt.NDArray[np.float32] | None, str | None]:
        if not isinstance(raw, list) or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in raw):
            return None, "bad_response"
        vector = np.asarray(raw, dtype=np.float64)
        if vector.size != self._dimensions:
            return None, "bad_dimension"
        if not np.isfinite(vector).all():
            return None, "not_finite"
        norm = float(np.linalg.norm(vector))
        if norm == 0.0 or not math.isfinite(norm):
            return None, "zero_vector"
        return (vector / norm).astype(np.float32), None

    def _bad_rows_error(self, call: _Call) -> EmbeddingError:
        bad = call.bad
        order = ("bad_dimension", "not_finite", "zero_vector", "bad_response", "refused")
        reasons = [r for r in order if r in bad]
        rows = sorted({row for r in reasons for row in bad[r]})
        what = {
            "bad_dimension": f"vectors not of {self._dimensions} dimensions",
            "not_finite": "vectors with NaN or infinite values",
            "zero_vector": "all-zero vectors",
            "bad_response": "entries that are not a list of numbers",
            "refused": "texts the endpoint refused (HTTP 400)",
        }
        message = "; ".join(f"{what[r]} at rows {sorted(bad[r])}" for r in reasons)
        if "refused" in bad:
            message += f" ({call.refusal})"
        return EmbeddingError(reasons[0], f"{self.endpoint.url} ({self.model}): {message}", retryable=False, rows=rows)


@register_provider("openai")
def open_openai(config: EmbeddingConfig, connection: ConnectionRecord | None, redis_url: str | None) -> OpenAIEmbedder:
    if connection is None:
        raise ValueError(f"embedding provider openai needs the Connection {config.conn_id!r}")
    model_id = provider_model_id(config)
    assert model_id is not None  # provider "openai", validated by the registry
    return OpenAIEmbedder(
        config, endpoint_of(connection), model_id=model_id, redis_url=redis_url or get_settings().redis_url
    )
