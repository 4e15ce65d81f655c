"""The embedder interface: texts in, L2-normalised float32 vectors out.

An :class:`Embedder` is built from a source's :class:`~include.config.EmbeddingConfig` by the
registry (:func:`plugins.embedders.registry.open_embedder`). ``model_id`` names the model and
the way it runs (``local:<model>@<package version>``, ``openai:<model>``): it is stored with
every vector, keys the vector cache and is part of the processing hash, so changing the model
re-embeds once.

Errors are typed (:class:`EmbeddingError`): ``retryable`` ones (an unreachable endpoint, 429s
past the retry budget, 5xx) are infrastructure errors the task's retries handle; errors about
the endpoint itself (:data:`ENDPOINT_REASONS`: its address refused, the key refused, no such
model or URL) fail the run too, as no text is to blame; the others (a wrong dimension, NaN, a
refused input) fail the documents whose texts caused them.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["ENDPOINT_REASONS", "EmbeddedTexts", "Embedder", "EmbeddingError", "Truncation"]

# Reasons that are the endpoint's configuration, whatever the texts: failing every document for
# them would only hide the error (and in time quarantine the documents).
ENDPOINT_REASONS = frozenset({"blocked_address", "unauthorized", "not_found", "redirected"})


class EmbeddingError(RuntimeError):
    """An embedding call that failed; ``reason`` is a short machine-readable word."""

    def __init__(
        self,
        reason: str,
        message: str,
        *,
        retryable: bool,
        rows: Sequence[int] = (),
        partial: EmbeddedTexts | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.retryable = retryable
        self.rows = list(rows)  # which texts of the call are to blame (empty: the whole call)
        # with ``rows``: every row of the call, the others' vectors embedded (``rows`` zero), so a
        # caller need not send them again
        self.partial = partial

    @property
    def about_endpoint(self) -> bool:
        """The endpoint's configuration failed, not any text of the call."""
        return self.reason in ENDPOINT_REASONS


@dataclass(frozen=True, slots=True)
class Truncation:
    """A text longer than the model takes, cut by the model's own tokenizer rule."""

    row: int
    tokens: int  # the text's length in the model's tokens
    kept: int  # what the model saw


@dataclass(slots=True)
class EmbeddedTexts:
    vectors: npt.NDArray[np.float32]  # (len(texts), dimensions), rows L2-normalised
    truncated: list[Truncation] = field(default_factory=list)


class Embedder(abc.ABC):
    model_id: str
    dimensions: int
    batch_size: int = 32
    max_in_flight: int = 1  # requests one call keeps going at once: a call of it is worth that many batches

    @abc.abstractmethod
    def embed_documents(self, texts: Sequence[str]) -> EmbeddedTexts:
        """Vectors of chunk texts (a model with a passage prefix adds it here)."""

    @abc.abstractmethod
    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """The vector of one search query (a model with a query prefix adds it here)."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release the model or the HTTP client."""
