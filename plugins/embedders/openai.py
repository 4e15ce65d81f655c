"""Provider ``openai``: any OpenAI-compatible ``POST {base}/v1/embeddings`` (OpenAI, vLLM, TEI, Ollama).

**Endpoint and key** come from the Connection the source's ``embedding.conn_id`` names (the
caller hands over its :class:`~include.connections.ConnectionRecord`): the base URL is the
extra ``base_url`` when set, else ``<schema or https>://<host>[:<port>]`` (a host may carry a
path; a base ending in ``/v1`` is not doubled); the key is the password, sent as ``Authorization:
Bearer`` on the client of that one origin. Redirects are not followed (a 3xx is an error), so
the key goes nowhere else; it is never logged, and error messages from the endpoint are scrubbed
of it, whole or in pieces of 8 characters and more, in any letter case, before they are cut to
an excerpt (OpenAI's 401 echoes part of a wrong key; a proxy may echo the request's headers),
and left out altogether for 401/403.

**Address.** The endpoint's host is resolved and every address checked before a socket is
opened, then the connection goes to a checked address (:mod:`include.pinned_http`: no DNS
rebinding in between; no proxy from the environment, which would connect for us). Loopback and
private networks are allowed (a TEI or Ollama next door); link-local and reserved ranges
(169.254/16, fe80::/10, 100.64/10, fc00::/7) only with ``embedding.allow_private_networks``;
cloud metadata addresses (169.254.169.254, fd00:ec2::254, Alibaba's 100.100.100.200) and
non-unicast addresses never, as an error excerpt of theirs would land in the state database.
A refused address is ``blocked_address``, not retried.

**Requests**: ``{"model", "input": [...], "encoding_format": "float"}`` plus ``dimensions``
when configured, ``batch_size`` texts each (OpenAI takes at most 2,048). A call's requests go
``max_in_flight`` at a time (threads on the one client; the next starts when one ends, so nothing
queues beyond them; 1: one after another), their answers placed by row whatever order they come
back in; when one fails, no further request of the call starts, and once the running ones end the
error of the earliest failing request is raised, as one after another would have. Each request first takes
a place in the endpoint's budget (``requests_per_minute``; one sliding window per endpoint origin,
in Redis when ``TRIBUTARY_REDIS_URL`` is set, as the connectors' budgets are: every worker shares
it); a 429 also pauses the whole origin's budget for its ``Retry-After``. Transient failures (429,
5xx, connection errors and timeouts) are retried with :class:`include.retry.RetryPolicy`
(backoff with jitter, the server's ``Retry-After`` honoured up to a cap, all attempts within a
deadline of four request timeouts); what is still failing then is a retryable
:class:`~plugins.embedders.base.EmbeddingError` (``unreachable``, ``rate_limited``,
``server_error``): infrastructure, for the task's retries. ``timeout_seconds`` is the deadline
of each request as a whole (connect, send, headers and body: a body trickling a byte a second
is cut there, not after each read's timeout), and of a whole :meth:`OpenAIEmbedder.embed_query`,
retries included (``query_deadline_seconds`` to set another), so a search is not kept waiting.

**Answers** are read with :func:`include.http_body.read_capped` (cap: room for the batch's
vectors as JSON text) and parsed strictly (:mod:`plugins.embedders._openai_answers`: nesting
bounded before decoding): one ``data`` entry per input, placed by its ``index``; every vector
must have the configured dimension (or, when none is configured, the size most vectors of the
first answer had) and finite values within float range. Bad rows are collected over the whole
call and raised together as a non-retryable error naming them (``bad_dimension``,
``not_finite``, ``bad_response``, ``zero_vector``) and carrying the other rows' vectors
(``partial``), so the engine fails those documents, keeps the rest and the run goes on; an answer that is no JSON at all fails its request's rows as ``bad_response``. A
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

import dataclasses
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
import numpy.typing as npt

from include.addresses import BlockedAddress, IPAddress, is_metadata, unmap, why_blocked
from include.config import EmbeddingConfig
from include.connections import ConnectionRecord
from include.http_body import ACCEPT_ENCODING, BodyTooLarge, UndecodableBody, UnsupportedEncoding, read_capped
from include.pinned_http import AddressCheck, RequestDeadline, guarded_transport
from include.ratelimit import Rate, RateLimiter, RateLimitTimeout
from include.retry import RetryPolicy, parse_retry_after
from include.settings import get_settings
from plugins.embedders._in_flight import Abandoned, run_bounded
from plugins.embedders._openai_answers import CallRows, bad_rows_error, decode_json, error_detail, place_answer
from plugins.embedders.base import EmbeddedTexts, Embedder, EmbeddingError, Truncation
from plugins.embedders.registry import provider_model_id, register_provider

__all__ = [
    "Endpoint",
    "OpenAIEmbedder",
    "endpoint_address_check",
    "endpoint_of",
    "estimate_tokens",
    "truncate_estimated",
]

log = logging.getLogger(__name__)

_MAX_RETRY_AFTER = 60.0
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


def endpoint_address_check(allow_private_networks: bool) -> AddressCheck:
    """The addresses an embeddings endpoint may have (see the module docstring); the check
    raises BlockedAddress for the others."""

    def check(host: str, ip: IPAddress) -> None:
        plain = unmap(ip)
        if is_metadata(plain):
            raise BlockedAddress(host, str(ip), "cloud metadata address")
        if plain.is_unspecified or plain.is_multicast or why_blocked(plain) == "non-unicast":
            raise BlockedAddress(host, str(ip), "not a unicast address")
        if why_blocked(plain) == "link-local/reserved/metadata" and not allow_private_networks:
            raise BlockedAddress(host, str(ip), "link-local or reserved address (embedding.allow_private_networks)")

    return check


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


class _Refused(Exception):
    """The endpoint refused the request's input (400/413/422): some text of it is to blame."""


class _Unreadable(Exception):
    """A 200 whose body is no JSON (or JSON nested past any answer's depth)."""


class OpenAIEmbedder(Embedder):
    def __init__(
        self,
        config: EmbeddingConfig,
        endpoint: Endpoint,
        *,
        model_id: str,
        redis_url: str | None = None,
        sleep: Callable[[float], None] = time.sleep,  # between retries (tests record instead)
        max_attempts: int = 5,
        query_deadline_seconds: float | None = None,  # a whole embed_query; default timeout_seconds
    ) -> None:
        self.config = config
        self.model = str(config.model)
        self.model_id = model_id
        self._dimensions = config.dimensions or _KNOWN_DIMENSIONS.get(self.model, 0)  # 0: not known yet
        self.batch_size = config.batch_size
        self.max_in_flight = config.max_in_flight
        self.endpoint = endpoint
        self.stats: dict[str, int] = {"requests": 0}
        self._stats_lock = threading.Lock()  # requests of one call count from several threads
        headers = {"Accept-Encoding": ACCEPT_ENCODING, "Content-Type": "application/json"}
        if endpoint.key:
            headers["Authorization"] = f"Bearer {endpoint.key}"
        timeout = httpx.Timeout(config.timeout_seconds, connect=min(10.0, config.timeout_seconds))
        self._request_deadline = RequestDeadline()
        transport = guarded_transport(endpoint_address_check(config.allow_private_networks), self._request_deadline)
        # trust_env=False: a proxy from the environment would connect for us, past the address check
        self._http = httpx.Client(
            headers=headers, timeout=timeout, transport=transport, follow_redirects=False, trust_env=False
        )
        self._sleep = sleep
        self._deadline = 4 * config.timeout_seconds
        self.query_deadline = query_deadline_seconds or config.timeout_seconds
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
        return self._embed(texts, math.inf)  # each request's attempts have their own deadline

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        vector: npt.NDArray[np.float32] = self._embed([text], self.query_deadline).vectors[0]
        return vector

    # ---------------------------------------------------------------- steps

    def _embed(self, texts: Sequence[str], seconds: float) -> EmbeddedTexts:
        """Vectors of ``texts``, every request and retry of the call within ``seconds``."""
        sent, truncated = self._prepare(texts)
        call = CallRows([None] * len(sent), ends_at=time.monotonic() + seconds)
        groups = [list(range(at, min(at + self.batch_size, len(sent)))) for at in range(0, len(sent), self.batch_size)]
        tasks = [self._rows_task(sent, rows, call, position) for position, rows in enumerate(groups)]
        run_bounded(tasks, self.max_in_flight, call.failures)
        matrix = np.zeros((len(sent), self._dimensions), dtype=np.float32)
        for row, vector in enumerate(call.vectors):
            if vector is not None:  # (every row, once no row is bad)
                matrix[row] = vector
        if call.bad:
            error = bad_rows_error(call, self._dimensions, f"{self.endpoint.url} ({self.model})")
            error.partial = EmbeddedTexts(matrix, truncated)  # the good rows: not to be sent again
            raise error
        return EmbeddedTexts(matrix, truncated)

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

    def _rows_task(self, texts: list[str], rows: list[int], call: CallRows, position: int) -> Callable[[], None]:
        return lambda: self._embed_rows(texts, rows, call, position)

    def _embed_rows(self, texts: list[str], rows: list[int], call: CallRows, position: int) -> None:
        """Embed ``rows`` of ``texts`` into ``vectors``; a refused batch is halved to find its culprits.
        ``position``: the request group's in the call (a group past a failed one gives up)."""
        try:
            answer = self._request([texts[r] for r in rows], call, position)
        except _Refused as exc:
            with call.lock:
                narrow = len(rows) > 1 and call.bisect_budget > 0
                if narrow:
                    call.bisect_budget -= 2
                else:
                    log.info("embeddings: %d text(s) refused: %s", len(rows), exc)
                    call.bad.setdefault("refused", []).extend(rows)
                    call.refusal = call.refusal or str(exc)
            if narrow:
                half = len(rows) // 2
                self._embed_rows(texts, rows[:half], call, position)
                self._embed_rows(texts, rows[half:], call, position)
            return
        except _Unreadable as exc:  # no JSON at all: every row of this request
            log.info("embeddings: %d text(s) got an unreadable answer: %s", len(rows), exc)
            with call.lock:
                call.bad.setdefault("bad_response", []).extend(rows)
            return
        with call.lock:  # the first answer may fix the dimension the others are checked against
            self._dimensions = place_answer(answer, rows, call, self._dimensions, self.endpoint.url)

    def _request(self, inputs: list[str], call: CallRows, position: int) -> Any:
        body: dict[str, Any] = {"model": self.model, "input": inputs, "encoding_format": "float"}
        if self.config.dimensions is not None:
            body["dimensions"] = self.config.dimensions
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        cap = 65536 + len(inputs) * (self._dimensions or _DEFAULT_DIMENSIONS_GUESS) * _BYTES_PER_FLOAT
        # the attempts' deadline: four request timeouts, or what is left of a query's own
        ends_at = min(call.ends_at, time.monotonic() + self._deadline)
        policy = dataclasses.replace(self.retries, deadline=lambda: ends_at - time.monotonic())
        try:
            for attempt in policy.retrying(sleep=self._sleep):
                with attempt:
                    if call.failures.abandons(position):  # an earlier request failed: the call's error
                        raise Abandoned
                    return self._send(payload, cap, ends_at)
        except _Transient as exc:
            raise EmbeddingError(exc.reason, f"{self.endpoint.url}: {exc} (after retries)", retryable=True) from None
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    def _send(self, payload: bytes, cap: int, ends_at: float) -> Any:
        self._take_budget(ends_at)
        with self._stats_lock:
            self.stats["requests"] += 1
        # one deadline for the whole request (waiting for the budget above is our own pacing)
        seconds = min(self.config.timeout_seconds, ends_at - time.monotonic())
        try:
            with (
                self._request_deadline.within(seconds),
                self._http.stream("POST", self.endpoint.url, content=payload) as response,
            ):
                status = response.status_code
                retry_after = response.headers.get("retry-after")
                body = read_capped(response, cap) if status < 300 else self._error_body(response)
        except httpx.TimeoutException as exc:
            what = f"{type(exc).__name__}: no complete answer from {self.endpoint.origin}"
            raise _Transient("unreachable", f"{what} within the request's deadline ({seconds:.3g} s)") from None
        except httpx.TransportError as exc:  # connect, read
            raise _Transient("unreachable", f"{type(exc).__name__} talking to {self.endpoint.origin}") from None
        except (BodyTooLarge, UnsupportedEncoding, UndecodableBody) as exc:
            raise EmbeddingError("bad_response", f"{self.endpoint.url}: {exc}", retryable=False) from None
        except BlockedAddress as exc:
            raise EmbeddingError("blocked_address", f"{self.endpoint.url}: {exc}", retryable=False) from None
        if status == 200:
            try:
                return decode_json(body)
            except ValueError as exc:
                raise _Unreadable(f"answer is not JSON: {str(exc)[:200]}") from None
        return self._fail(status, body, retry_after)

    @staticmethod
    def _error_body(response: httpx.Response) -> bytes:
        try:
            return read_capped(response, 65536)
        except (BodyTooLarge, UnsupportedEncoding, UndecodableBody):
            return b""  # the status says what matters; an unreadable error body adds nothing

    def _take_budget(self, ends_at: float) -> None:
        try:
            # real sleeps: the budget is shared with other workers on the real clock
            self.limiter.acquire(self._budget_key, self._rates, max_wait=max(0.0, ends_at - time.monotonic()))
        except RateLimitTimeout as exc:
            raise EmbeddingError("rate_limited", f"{self.endpoint.origin}: {exc}", retryable=True) from None

    def _fail(self, status: int, body: bytes, retry_after: str | None) -> Any:
        detail = error_detail(body, self.endpoint.key) if status not in (401, 403) else ""
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


@register_provider("openai")
def open_openai(config: EmbeddingConfig, connection: ConnectionRecord | None, redis_url: str | None) -> OpenAIEmbedder:
    if connection is None:
        raise ValueError(f"embedding provider openai needs the Connection {config.conn_id!r}")
    model_id = provider_model_id(config)
    assert model_id is not None  # provider "openai", validated by the registry
    return OpenAIEmbedder(
        config, endpoint_of(connection), model_id=model_id, redis_url=redis_url or get_settings().redis_url
    )
