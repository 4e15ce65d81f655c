"""Index backends. ``open_index(config)`` returns the backend a source's config names."""

from __future__ import annotations

from include.config import IndexConfig
from include.index.base import DocumentRecord, DocumentWrite, IndexBackend, SearchHit, UpsertResult
from include.loading import load_class

__all__ = [
    "BACKENDS",
    "DocumentRecord",
    "DocumentWrite",
    "IndexBackend",
    "SearchHit",
    "UpsertResult",
    "backend_class",
    "open_index",
]

# Backend name -> "module:class", imported on first use. Deliberately by dotted path: the
# Elasticsearch backend pulls in the ``elasticsearch`` client, which is heavy and an optional
# dependency (a SQLite-only install lacks it), so importing ``include.index`` must not load it.
BACKENDS: dict[str, str] = {
    "sqlite": "include.index.sqlite_fts:SqliteFtsIndex",
    "elasticsearch": "include.index.elasticsearch:ElasticsearchIndex",
}


def backend_class(name: str) -> type[IndexBackend]:
    """The backend class registered under ``name``."""
    try:
        path = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown index backend {name!r} (known: {', '.join(sorted(BACKENDS))})") from None
    # an abstract base is what a registry checks against (mypy wants a concrete class here)
    return load_class(path, IndexBackend)  # type: ignore[type-abstract]


def open_index(config: IndexConfig | None = None) -> IndexBackend:
    """Open the configured backend: ``sqlite`` (embedded default) or ``elasticsearch``."""
    config = config or IndexConfig()
    return backend_class(config.backend).from_config(config)
