"""Index backends. ``open_index(config)`` returns the backend a source's config names."""

from __future__ import annotations

from include.config import IndexConfig
from include.index.base import DocumentRecord, DocumentWrite, IndexBackend, SearchHit, UpsertResult

__all__ = ["DocumentRecord", "DocumentWrite", "IndexBackend", "SearchHit", "UpsertResult", "open_index"]


def open_index(config: IndexConfig | None = None) -> IndexBackend:
    """Open the configured backend: ``sqlite`` (embedded default) or ``elasticsearch``."""
    config = config or IndexConfig()
    if config.backend == "sqlite":
        from include.index.sqlite_fts import SqliteFtsIndex
        from include.settings import get_settings

        path = config.options.get("path") or get_settings().index_path
        return SqliteFtsIndex(path, index_name=config.name)
    if config.backend == "elasticsearch":
        from include.index.elasticsearch import ElasticsearchIndex  # type: ignore[import-not-found]

        return ElasticsearchIndex.from_config(config)
    raise ValueError(f"unknown index backend {config.backend!r}")
