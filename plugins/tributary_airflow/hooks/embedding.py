"""A source's embedder (the local model or an OpenAI-compatible endpoint), as an Airflow hook.

The engine's embed step takes an *embedder factory*: a callable that opens an
:class:`~plugins.embedders.base.Embedder`, which the step closes when it is done.
``EmbeddingHook.get_conn`` is that callable, so an operator passes it as is::

    @cached_property
    def embedding_hook(self) -> EmbeddingHook:
        return EmbeddingHook.for_source(self.source)

    def make_step(self, ctx):
        return EmbedStep(ctx, self.manifest, self.index_hook.get_conn, self.embedding_hook.get_conn)

The endpoint's URL and key come only from the Airflow Connection the source's
``embedding.conn_id`` names, read when an embedder is opened (never at import or construction,
so DAG parsing never reaches the secrets backend); a local model needs no Connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from airflow.sdk import BaseHook

from include.config import EmbeddingConfig, SourceConfig
from include.connections import ConnectionRecord, get_connection
from plugins.embedders.base import Embedder
from plugins.embedders.registry import open_embedder
from plugins.engine import get_source

__all__ = ["EmbeddingHook"]


class EmbeddingHook(BaseHook):
    """Opens the embedder an :class:`~include.config.EmbeddingConfig` names."""

    hook_name = "Tributary embedder"

    def __init__(self, config: EmbeddingConfig, *, logger_name: str | None = None) -> None:
        super().__init__(logger_name=logger_name)
        self.config = config

    @classmethod
    def for_source(cls, source: str | SourceConfig) -> EmbeddingHook:
        """The hook of a source's embedding; ``source`` is a source id, DAG id or name, or its config."""
        config = source if isinstance(source, SourceConfig) else get_source(source)
        return cls(config.embedding)

    def connection_record(self) -> ConnectionRecord | None:
        """The endpoint's Connection (URL and key), or None when the config names none."""
        return get_connection(self.config.conn_id) if self.config.conn_id else None

    def get_conn(self) -> Embedder:
        """A newly opened embedder; the caller closes it (the engine's embed step does)."""
        embedder = open_embedder(self.config, self.connection_record())
        if embedder is None:  # provider none: the DAG factory adds no embed task for it
            raise ValueError(f"embedding provider {self.config.provider!r} embeds nothing")
        return embedder

    @contextmanager
    def embedder(self) -> Iterator[Embedder]:
        """An embedder open for the ``with`` block, closed after it, error or not."""
        embedder = self.get_conn()
        try:
            yield embedder
        finally:
            embedder.close()
