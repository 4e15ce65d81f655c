"""Reading what an OpenAI-compatible endpoint answered: vectors checked row by row, errors scrubbed.

Nothing here trusts the answer. The JSON is refused before decoding when it nests deeper than
an embeddings answer ever does (:data:`MAX_JSON_DEPTH`; 20,000 levels would otherwise end in a
``RecursionError``); a value no float holds (a 400-digit integer: ``OverflowError``) fails its
row as ``not_finite``; the shape is checked entry by entry. An error body is scrubbed of the
key whole, before it is cut to an excerpt, in any letter case and in pieces
(:func:`include.redact.redact_secret`), so no part of it reaches a log or the state database.
"""

from __future__ import annotations

import json
import math
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from include.redact import redact_secret
from plugins.embedders._in_flight import Failures
from plugins.embedders.base import EmbeddingError

__all__ = ["MAX_JSON_DEPTH", "CallRows", "bad_rows_error", "decode_json", "error_detail", "place_answer"]

# {"data": [{"embedding": [...]}]} is 4 deep; the rest is room for a gateway's wrapping.
MAX_JSON_DEPTH = 32
_DETAIL_CHARS = 300
_SCAN_BLOCK = 1 << 20
_OPENING = (ord("["), ord("{"))
_CLOSING = (ord("]"), ord("}"))
_NUMBER_TYPES = frozenset({float, int})  # what json.loads makes of a number
_WHAT = {
    "bad_dimension": "vectors not of {dimensions} dimensions",
    "not_finite": "vectors with NaN, infinite or out-of-range values",
    "zero_vector": "all-zero vectors",
    "bad_response": "answers that are no JSON or entries that are not a list of numbers",
    "refused": "texts the endpoint refused (HTTP 400)",
}


@dataclass(slots=True)
class CallRows:
    """What one embedding call collects: vectors by row, bad rows by reason, what is left of
    its allowance of requests for narrowing down refusals, and when the call must end. The
    call's requests may run in several threads: ``lock`` guards the rest, ``failures`` says
    which of them are past a failed one and start no new request."""

    vectors: list[npt.NDArray[np.float32] | None]
    ends_at: float = math.inf  # time.monotonic() deadline of the whole call, retries included
    bad: dict[str, list[int]] = field(default_factory=dict)
    bisect_budget: int = 64  # requests one call may spend finding the refused texts of 400s
    refusal: str = ""  # the endpoint's first refusal, for the error message
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    failures: Failures = field(default_factory=Failures, repr=False, compare=False)


def _nests_deeper_than(body: bytes, limit: int) -> bool:
    """Whether brackets in ``body`` nest deeper than ``limit`` (linear, a block at a time in numpy).

    Brackets inside strings count too, an over-estimate no embeddings answer comes near (its
    strings are keys and a model name). Only the brackets are summed: an answer of vectors is
    almost all digits, one bracket pair a vector."""
    view = np.frombuffer(body, dtype=np.uint8)
    depth = 0
    for start in range(0, view.size, _SCAN_BLOCK):
        block = view[start : start + _SCAN_BLOCK]
        opening = (block == _OPENING[0]) | (block == _OPENING[1])
        brackets = np.flatnonzero(opening | (block == _CLOSING[0]) | (block == _CLOSING[1]))
        if brackets.size == 0:
            continue
        levels = np.cumsum(np.where(opening[brackets], 1, -1)) + depth
        if int(levels.max()) > limit:
            return True
        depth = int(levels[-1])
    return False


def decode_json(body: bytes) -> Any:
    """``body`` as JSON; ValueError when it is not JSON or nests deeper than MAX_JSON_DEPTH."""
    if _nests_deeper_than(body, MAX_JSON_DEPTH):
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return json.loads(body)


def error_detail(body: bytes, key: str | None) -> str:
    """The ``error.message`` of an OpenAI error body (else the start of the body), with every
    piece of ``key`` scrubbed from the whole body before it is cut to an excerpt."""
    text = redact_secret(body.decode("utf-8", "replace"), key)
    try:
        message = str(decode_json(text.encode("utf-8"))["error"]["message"])
    except (ValueError, KeyError, TypeError):
        message = text
    # again: a JSON escape (\u0073k-...) decodes to the key only now
    return redact_secret(message, key)[:_DETAIL_CHARS]


def vector_of(raw: Any, dimensions: int) -> tuple[npt.NDArray[np.float32] | None, str | None]:
    """One ``embedding`` entry as a unit float32 vector, or why it is refused."""
    if not isinstance(raw, list):
        return None, "bad_response"
    # the types present, in C (a value at a time in Python was most of a 1,536-dimension answer's
    # CPU time); anything but exact floats and ints gets the full check
    if not set(map(type, raw)) <= _NUMBER_TYPES and not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in raw
    ):
        return None, "bad_response"
    try:
        vector = np.asarray(raw, dtype=np.float64)
    except OverflowError:  # an integer beyond float range (10**400 is valid JSON)
        return None, "not_finite"
    if vector.size != dimensions:
        return None, "bad_dimension"
    if not np.isfinite(vector).all():
        return None, "not_finite"
    norm = float(np.linalg.norm(vector))
    if norm == 0.0 or not math.isfinite(norm):
        return None, "zero_vector"
    return (vector / norm).astype(np.float32), None


def place_answer(answer: Any, rows: list[int], call: CallRows, dimensions: int, url: str) -> int:
    """Check every vector of one answer and put it at its row (by ``data[i].index``); returns
    the dimensions (when none were known: the size most vectors of this answer have)."""
    data = answer.get("data") if isinstance(answer, dict) else None
    entries = [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []
    indices = sorted(i for item in entries if isinstance(i := item.get("index"), int) and not isinstance(i, bool))
    if not isinstance(data, list) or len(entries) != len(data) or indices != list(range(len(rows))):
        raise EmbeddingError(
            "bad_response",
            f"{url}: expected one data entry per input with indices 0..{len(rows) - 1}",
            retryable=False,
            rows=rows,
        )
    if not dimensions:
        sizes = Counter(len(item["embedding"]) for item in entries if isinstance(item.get("embedding"), list))
        dimensions = sizes.most_common(1)[0][0] if sizes else 0
    for item in entries:
        row = rows[item["index"]]
        vector, reason = vector_of(item.get("embedding"), dimensions)
        if reason:
            call.bad.setdefault(reason, []).append(row)
        else:
            call.vectors[row] = vector
    return dimensions


def bad_rows_error(call: CallRows, dimensions: int, where: str) -> EmbeddingError:
    """One non-retryable error naming every bad row of the call, by reason."""
    reasons = [r for r in _WHAT if r in call.bad]
    rows = sorted({row for r in reasons for row in call.bad[r]})
    message = "; ".join(f"{_WHAT[r].format(dimensions=dimensions)} at rows {sorted(call.bad[r])}" for r in reasons)
    if "refused" in call.bad:
        message += f" ({call.refusal})"
    return EmbeddingError(reasons[0], f"{where}: {message}", retryable=False, rows=rows)
