"""A source's index backend (SQLite FTS or Elasticsearch), as an Airflow hook.

The engine's index stages take an *index factory*: a callable that opens a backend, which the
stage closes when it is done. ``IndexHook.get_conn`` is that callable, so an operator passes
it as is::

    @cached_property
    def index_hook(self) -> IndexHook:
        return IndexHook.for_source(self.source)

    def execute(self, context):
        return upsert_stage(self.manifest, source, self.index_hook.get_conn)

Like ``DbApiHook.get_conn``, every call opens a new backend that its caller owns and closes;
:meth:`IndexHook.connection` does that around a ``with`` block.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from airflow.sdk import BaseHook

from include.config import IndexConfig, SourceConfig
from include.index import IndexBackend, open_index
from plugins.engine import get_source

__all__ = ["IndexHook"]


class IndexHook(BaseHook):
    """Opens the index an :class:`~include.config.IndexConfig` names (default: the embedded one)."""

    hook_name = "Tributary index"

    def __init__(self, config: IndexConfig | None = None, *, logger_name: str | None = None) -> None:
        super().__init__(logger_name=logger_name)
        self.config = config or IndexConfig()

    @classmethod
    def for_source(cls, source: str | SourceConfig) -> IndexHook:
        """The hook of a source's index; ``source`` is a source id, DAG id or name, or its config."""
        config = source if isinstance(source, SourceConfig) else get_source(source)
        return cls(config.index)

    def get_conn(self) -> IndexBackend:
        """A newly opened backend; the caller closes it (the engine's stages do)."""
        return open_index(self.config)

    @contextmanager
    def connection(self) -> Iterator[IndexBackend]:
        """A backend open for the ``with`` block, closed after it, error or not."""
        index = self.get_conn()
        try:
            yield index
        finally:
            index.close()
