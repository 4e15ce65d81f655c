"""A local OpenAI-compatible embeddings server for tests: ``POST /v1/embeddings`` on 127.0.0.1.

Vectors are deterministic without a model: a hashed bag of words (lower-cased words, and every
CJK character with its bigrams, each hashed to a signed coordinate), normalised, so that texts
sharing words score higher than texts that share none.

What it does like OpenAI's API (https://platform.openai.com/docs/api-reference/embeddings):

- ``Authorization: Bearer <key>`` checked when :attr:`EmbeddingSimulator.api_key` is set; a wrong
  or missing key is a 401 ``invalid_api_key`` whose message echoes the key's ends, as OpenAI's does
  (the client must not log it);
- errors in OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``;
- ``input``: a string or an array of at most 2,048 strings, none empty (400 otherwise); each at
  most 8,192 tokens (400 "maximum context length", the whole request refused);
- ``dimensions``: accepted by the ``text-embedding-3-*`` models only (400 for the others, and above
  the model's native size), the vector is shortened and re-normalised as OpenAI describes;
- ``encoding_format`` ``float`` or ``base64`` (little-endian float32), ``data[i].index``,
  ``usage``; native sizes 1,536 (``text-embedding-3-small``, ``text-embedding-ada-002``) and 3,072
  (``text-embedding-3-large``); any other model name gets :attr:`EmbeddingSimulator.other_dimensions`.

The simulator's "tokens" are its words and CJK characters (not tiktoken's), enough to trip limits.

Faults, queued with :meth:`EmbeddingSimulator.fault` (each served to the next request(s)):
``429`` (with ``Retry-After``), ``500``/``503``, ``wrong_dimension`` / ``nan`` / ``infinity`` /
``not_normalised`` / ``huge_integer`` (a 400-digit integer as the first value; on chosen rows of
the input), ``shuffled`` (data in reverse order, indices right), ``slow`` (sleeps before
answering), ``trickle`` (the answer one byte per ``seconds``), ``redirect`` (a 307 to another
URL), ``raw`` (``status`` and ``body`` as given: non-JSON errors, JSON nested 20,000 deep). A
fault with ``when`` is served only to a request one of whose inputs contains that text (and
corrupts those inputs' rows), so a test aims it at one document of a run. Every request is
recorded (:attr:`EmbeddingSimulator.requests`: body and Authorization header).

Concurrency: :attr:`EmbeddingSimulator.most_in_flight` is the most requests it was answering at
once; with :attr:`EmbeddingSimulator.hold_until_in_flight` set, the first requests are held (at
most 10 s) until that many are in flight together, so a test sees a client's concurrency without
depending on timing; :attr:`EmbeddingSimulator.latency` delays every answer after that.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import json
import re
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from tests.support.leakscan import register_secret

__all__ = ["EmbeddingSimulator", "Fault", "bag_of_words_vector"]

NATIVE_DIMENSIONS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
SHORTENABLE = ("text-embedding-3-small", "text-embedding-3-large")
MAX_INPUTS = 2048
MAX_INPUT_TOKENS = 8192
_WORD = re.compile(r"[\u3400-\u9fff]|[^\W_]+", re.UNICODE)


def _tokens(text: str) -> list[str]:
    return [t.lower() for t in _WORD.findall(text)]


def bag_of_words_vector(text: str, dimensions: int) -> np.ndarray:
    """The deterministic unit vector of ``text`` (see the module docstring)."""
    tokens = _tokens(text)
    features = tokens + [a + b for a, b in itertools.pairwise(tokens) if len(a) == len(b) == 1]
    vector = np.zeros(dimensions, dtype=np.float64)
    for feature in features or [""]:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        number = int.from_bytes(digest, "little")
        vector[number % dimensions] += 1.0 if (number >> 63) & 1 else -1.0
    norm = np.linalg.norm(vector)
    return vector / norm if norm else np.full(dimensions, 1 / np.sqrt(dimensions))


@dataclass
class Fault:
    kind: str
    times: int = 1
    rows: tuple[int, ...] = (0,)
    retry_after: str | None = "1"
    seconds: float = 0.0  # slow, trickle
    location: str = ""  # redirect
    when: str = ""  # served only to a request with an input containing this
    status: int = 200  # raw
    body: bytes = b""  # raw
    media_type: str = "text/plain"  # raw

    def rows_of(self, inputs: list[str]) -> tuple[int, ...]:
        """The rows this fault corrupts in a request of ``inputs``."""
        return tuple(r for r, text in enumerate(inputs) if self.when in text) if self.when else self.rows


@dataclass
class EmbeddingSimulator:
    api_key: str | None = "sk-sim-" + "0" * 24
    other_dimensions: int = 64
    requests: list[dict[str, Any]] = field(default_factory=list)
    latency: float = 0.0  # seconds before every answer
    hold_until_in_flight: int = 0
    in_flight: int = 0  # (one event loop: no lock needed)
    most_in_flight: int = 0
    _faults: list[Fault] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        register_secret("embeddings_api_key", self.api_key)  # the session's leak scan looks for it
        self.app = FastAPI()
        self.app.post("/v1/embeddings")(self._embeddings)

    def fault(self, kind: str, **kw: Any) -> None:
        with self._lock:
            self._faults.append(Fault(kind, **kw))

    def _next_fault(self, inputs: list[str]) -> Fault | None:
        with self._lock:
            fault = next((f for f in self._faults if not f.when or any(f.when in t for t in inputs)), None)
            if fault is None:
                return None
            fault.times -= 1
            if fault.times <= 0:
                self._faults.remove(fault)
            return fault

    @staticmethod
    def error(
        status: int,
        message: str,
        kind: str,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> JSONResponse:
        body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
        return JSONResponse(body, status_code=status, headers=headers)

    def _auth(self, header: str | None) -> JSONResponse | None:
        if self.api_key is None:
            return None
        given = (header or "").removeprefix("Bearer ").strip()
        if given == self.api_key:
            return None
        if not given:
            return self.error(
                401,
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                "invalid_request_error",
            )
        shown = f"{given[:3]}{'*' * 10}{given[-4:]}"
        return self.error(
            401,
            f"Incorrect API key provided: {shown}. You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
            "invalid_request_error",
            "invalid_api_key",
        )

    async def _embeddings(self, request: Request) -> Response:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            for _ in range(1000):  # held until enough are in flight at once (10 s at most)
                if self.most_in_flight >= self.hold_until_in_flight:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(self.latency)
            return await self._answer_request(request)
        finally:
            self.in_flight -= 1

    async def _answer_request(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return self.error(400, "We could not parse the JSON body of your request.", "invalid_request_error")
        self.requests.append({"body": body, "authorization": request.headers.get("authorization")})
        if (refused := self._auth(request.headers.get("authorization"))) is not None:
            return refused
        raw = body.get("input") if isinstance(body, dict) else None
        fault = self._next_fault([raw] if isinstance(raw, str) else [t for t in raw or () if isinstance(t, str)])
        if fault is not None and (early := self._early_fault(fault)) is not None:
            return early
        if fault is not None and fault.kind == "slow":
            await asyncio.sleep(fault.seconds)
        checked = self._check(body)
        if isinstance(checked, JSONResponse):
            return checked
        inputs, dimensions = checked
        vectors = [bag_of_words_vector(text, dimensions) for text in inputs]
        if fault is not None:
            self._corrupt(fault, inputs, vectors)
        # json.dumps writes NaN / Infinity literals (as a broken server's Python would); Starlette's
        # JSONResponse refuses them
        answer = json.dumps(self._answer(body, inputs, vectors, fault)).encode()
        if fault is not None and fault.kind == "trickle":
            return StreamingResponse(self._drip(answer, fault.seconds), media_type="application/json")
        return Response(answer, media_type="application/json")

    @staticmethod
    async def _drip(answer: bytes, seconds: float) -> AsyncIterator[bytes]:
        for at in range(len(answer)):
            yield answer[at : at + 1]
            await asyncio.sleep(seconds)

    def _early_fault(self, fault: Fault) -> Response | None:
        if fault.kind == "429":
            headers = {"retry-after": fault.retry_after} if fault.retry_after is not None else None
            return self.error(
                429, "Rate limit reached for requests", "requests", "rate_limit_exceeded", headers=headers
            )
        if fault.kind in ("500", "503"):
            return self.error(int(fault.kind), "The server had an error while processing your request.", "server_error")
        if fault.kind == "redirect":
            return Response(status_code=307, headers={"location": fault.location})
        if fault.kind == "raw":
            return Response(fault.body, status_code=fault.status, media_type=fault.media_type)
        return None

    def _check(self, body: Any) -> tuple[list[str], int] | JSONResponse:
        model, raw = body.get("model"), body.get("input")
        if not isinstance(model, str) or not model:
            return self.error(400, "you must provide a model parameter", "invalid_request_error")
        inputs = [raw] if isinstance(raw, str) else raw
        if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) and t for t in inputs):
            return self.error(
                400,
                "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.",
                "invalid_request_error",
            )
        if len(inputs) > MAX_INPUTS:
            return self.error(
                400,
                f"'$.input' is too long. Maximum length is {MAX_INPUTS}, but got {len(inputs)} items.",
                "invalid_request_error",
                param="input",
            )
        longest = max(len(_tokens(t)) for t in inputs)
        if longest > MAX_INPUT_TOKENS:
            return self.error(
                400,
                f"This model's maximum context length is {MAX_INPUT_TOKENS} tokens, however you "
                f"requested {longest} tokens ({longest} in your prompt; 0 for the completion). Please "
                "reduce your prompt; or completion length.",
                "invalid_request_error",
            )
        native = NATIVE_DIMENSIONS.get(model, self.other_dimensions)
        dimensions = body.get("dimensions")
        if dimensions is None:
            return inputs, native
        if model not in SHORTENABLE:
            return self.error(
                400, "This model does not support specifying dimensions.", "invalid_request_error", param="dimensions"
            )
        if not isinstance(dimensions, int) or not 1 <= dimensions <= native:
            return self.error(
                400,
                f"Invalid value for 'dimensions' = {dimensions}. Must be between 1 and {native}.",
                "invalid_request_error",
                param="dimensions",
            )
        return inputs, dimensions

    @staticmethod
    def _corrupt(fault: Fault, inputs: list[str], vectors: list[np.ndarray]) -> None:
        for row in fault.rows_of(inputs):
            if row >= len(vectors):
                continue
            if fault.kind == "wrong_dimension":
                vectors[row] = vectors[row][:-1]
            elif fault.kind == "nan":
                vectors[row] = vectors[row].copy()
                vectors[row][0] = np.nan
            elif fault.kind == "infinity":
                vectors[row] = vectors[row].copy()
                vectors[row][0] = np.inf
            elif fault.kind == "not_normalised":
                vectors[row] = vectors[row] * 3.0

    @staticmethod
    def _answer(
        body: dict[str, Any], inputs: list[str], vectors: list[np.ndarray], fault: Fault | None
    ) -> dict[str, Any]:
        as_base64 = body.get("encoding_format") == "base64"
        huge = fault.rows_of(inputs) if fault is not None and fault.kind == "huge_integer" else ()
        data = []
        for index, vector in enumerate(vectors):
            if as_base64:
                embedding: Any = base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
            else:
                embedding = [float(v) for v in vector]
                if index in huge:  # valid JSON, but no float holds it
                    embedding[0] = 10**400
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        if fault is not None and fault.kind == "shuffled":
            data.reverse()
        tokens = sum(len(_tokens(t)) for t in inputs)
        return {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
