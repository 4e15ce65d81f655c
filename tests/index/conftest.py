"""Backends for the index contract suite: SQLite always, Elasticsearch when a server is given.

Set ``ELASTICSEARCH_URL`` (e.g. ``http://127.0.0.1:9200``) to run every contract test against
Elasticsearch too; each test then works in its own alias ``tributary-test-<random>`` and
removes its indices and template afterwards. Without it the Elasticsearch cases are skipped
with the reason shown in pytest's summary (``-ra``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from include.index.base import IndexBackend

ES_URL = os.environ.get("ELASTICSEARCH_URL")
ES_SKIP_REASON = (
    "ELASTICSEARCH_URL is not set: no Elasticsearch server on this machine "
    "(Debian ships none); set it to run the contract suite against Elasticsearch"
)

BackendFactory = Callable[[], IndexBackend]


def _sqlite_factory(tmp_path: Path) -> Iterator[BackendFactory]:
    from include.index.sqlite_fts import SqliteFtsIndex

    opened: list[IndexBackend] = []

    def factory() -> IndexBackend:
        backend = SqliteFtsIndex(tmp_path / "index.db", index_name="contract")
        opened.append(backend)
        return backend

    yield factory
    for b in opened:
        b.close()


def _es_factory() -> Iterator[BackendFactory]:
    if not ES_URL:
        pytest.skip(ES_SKIP_REASON)
    from elasticsearch import Elasticsearch

    from include.index._es_mapping import physical_index_pattern, template_name
    from include.index.elasticsearch import ElasticsearchIndex

    alias = f"tributary-test-{uuid.uuid4().hex[:10]}"
    opened: list[IndexBackend] = []

    def factory() -> IndexBackend:
        # refresh=true: a contract test reads right after it writes
        backend = ElasticsearchIndex(Elasticsearch(ES_URL), alias, refresh="true", initial_backoff=0.1)
        opened.append(backend)
        return backend

    yield factory
    for b in opened:
        b.close()
    admin = Elasticsearch(ES_URL)
    admin.options(ignore_status=404).indices.delete(index=physical_index_pattern(alias))
    admin.options(ignore_status=404).indices.delete_index_template(name=template_name(alias))
    admin.close()


@pytest.fixture(params=["sqlite", "elasticsearch"])
def open_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BackendFactory]:
    """A factory opening the same (fresh) index; call it twice to test reopening."""
    gen = _sqlite_factory(tmp_path) if request.param == "sqlite" else _es_factory()
    yield next(gen)
    next(gen, None)


@pytest.fixture
def backend(open_backend: BackendFactory) -> IndexBackend:
    return open_backend()


@pytest.fixture
def es_url() -> str:
    if not ES_URL:
        pytest.skip(ES_SKIP_REASON)
    return ES_URL
