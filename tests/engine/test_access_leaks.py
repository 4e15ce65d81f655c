"""The leak test (issue 35): a generated organisation synced through the real engine from the
source simulators; for every person and for an anonymous searcher, every search mode returns only
documents that person may read (0 leaks) and finds every one they may read (recall).

Sources: :data:`tests.engine._acl_org.SOURCES`: the Yuque simulator (300 documents, 10 Yuque
groups) and the Feishu simulator (200 documents: collaborators by open_id, chats and
departments, tenant and public link shares, 403s on the permission API), 60 people in both.

Ground truth comes from the generation (:mod:`tests.engine._acl_org`), never from the code under
test: who is in which group, which document names whom. The engine syncs the sources
(``run_pipeline``: discovery, fetch with ``read_access``, commit), the group memberships
(``sync_groups``), and each searcher is resolved from a principals file (``resolve_principal``,
synced groups expanded). Searches go through ``run_search`` (what the CLI and the API call).
Vectors come from a deterministic hash embedder (the unit tests' kind), so vector and hybrid
rankings run on real vectors without a model; a query with ``k`` above the corpus size must
return exactly the permitted documents, which checks leaks and recall in one.

Backends: SQLite, and the Elasticsearch stand-in (``tests.index.es_simulator``: it evaluates
the filters, and its recorded request bodies are checked for the access filter in the bool
query and the kNN clause); a real server as well when ``ELASTICSEARCH_URL`` is set.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from include.acl import ANONYMOUS, Principal
from include.config import EmbeddingConfig, IndexConfig, SourceConfig
from include.index import open_index
from include.index.base import SearchMode
from include.stores import open_state_store
from include.stores.access import AccessStore
from plugins.connectors.base import get_connector_class
from plugins.embedders.base import EmbeddedTexts, Embedder
from plugins.engine import run_pipeline
from plugins.engine.permissions import sync_groups, sync_permissions
from plugins.engine.principals import load_principals, resolve_principal
from plugins.engine.search import run_search
from tests.engine import _acl_org as made
from tests.engine._acl_org import COMMON_WORD, Org, generate, principals_yaml
from tests.index.conftest import ES_URL
from tests.index.es_simulator import EsSimulator
from tests.support.server import serve_asgi

N_YUQUE, N_FEISHU = 300, 200  # 500 documents across the two sources
DIMS = 8
_WORD = re.compile(r"\b(?:yq|fs)\d{4}word\b")
MODES: tuple[SearchMode, ...] = ("bm25", "vector", "hybrid")


class HashEmbedder(Embedder):
    """Unit vectors from each text's SHA-256 (no model): rankings are arbitrary but real."""

    model_id, dimensions, batch_size = "tests/hash-8", DIMS, 64

    @staticmethod
    def vector(text: str) -> npt.NDArray[np.float32]:
        raw = np.frombuffer(hashlib.sha256(text.encode()).digest()[: DIMS * 4], dtype="<u4").astype(np.float32)
        return (raw / np.linalg.norm(raw)).astype(np.float32)

    def embed_documents(self, texts: Sequence[str]) -> EmbeddedTexts:
        return EmbeddedTexts(np.stack([self.vector(t) for t in texts]), [])

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        return self.vector(text)


@dataclass
class Synced:
    org: Org
    served: list[made.Served]
    principals: dict[str, Principal]  # person name (and "anonymous") -> resolved principal
    es: EsSimulator | None  # the stand-in, when that is the backend
    seconds: dict[str, float]
    home: Path

    @property
    def sources(self) -> list[SourceConfig]:
        return [one.source for one in self.served]


@pytest.fixture(scope="module")
def org() -> Org:
    return generate(N_YUQUE, N_FEISHU)


def _index_config(backend: str, url: str | None) -> IndexConfig:
    if backend == "sqlite":
        return IndexConfig()
    return IndexConfig(backend="elasticsearch", name="tributary-leaks", options={"url": url, "refresh": "true"})


def _resolve(org: Org, home: Path) -> dict[str, Principal]:
    state = open_state_store()
    try:
        pm, store = load_principals(home / "principals.yaml"), AccessStore(state)
        people = {n: resolve_principal(n, store=store, principals=pm) for n in org.names()}
    finally:
        state.close()
    return {**people, "anonymous": ANONYMOUS}


def _sync_groups(source: SourceConfig) -> None:
    state = open_state_store()
    try:
        with get_connector_class(source.kind)(source) as conn:
            groups = sync_groups(source, store=AccessStore(state), connector=conn)
        assert groups.synced and groups.complete, groups.to_dict()
    finally:
        state.close()


@contextmanager
def _synced(org: Org, index: IndexConfig, home: Path, es: EsSimulator | None) -> Iterator[Synced]:
    """Serve both simulators, sync both sources and their groups, resolve every searcher; the
    simulators stay up (a later permission sync reads them) and ``TRIBUTARY_HOME`` stays set."""
    (home / "principals.yaml").write_text(principals_yaml(org), encoding="utf-8")
    with ExitStack() as stack, pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRIBUTARY_HOME", str(home))
        mp.setenv("TRIBUTARY_PRINCIPALS", str(home / "principals.yaml"))
        served, seconds = [], {}
        for build in made.SOURCES:
            one = stack.enter_context(build(org, mp))
            one.source = one.source.model_copy(update={"index": index, "embedding": EmbeddingConfig(provider="local")})
            start = time.perf_counter()
            summary = run_pipeline(one.source, {}, embedder_factory=HashEmbedder)
            seconds[one.source.kind] = round(time.perf_counter() - start, 2)
            # partial: the unreadable documents' permissions are unknown (and so private)
            assert summary.status in ("success", "partial"), summary.error
            assert summary.counts["new"] == sum(d.source == one.source.kind for d in org.docs)
            _sync_groups(one.source)
            served.append(one)
        yield Synced(org, served, _resolve(org, home), es, seconds, home)


def _backends() -> list[str]:
    return ["sqlite", "es-simulator", *(["es-server"] if ES_URL else [])]


@pytest.fixture(scope="module", params=_backends())
def synced(request: pytest.FixtureRequest, org: Org, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synced]:
    home = tmp_path_factory.mktemp(f"leaks-{request.param}")
    if request.param == "es-simulator":
        sim = EsSimulator("tributary-leaks")
        with serve_asgi(sim) as sim_url, _synced(org, _index_config("es", sim_url), home, sim) as done:
            yield done
        return
    url = ES_URL if request.param == "es-server" else None
    try:
        with _synced(org, _index_config("sqlite" if url is None else "es", url), home, None) as done:
            yield done
    finally:
        if url is not None:
            made.drop_es_index(url, "tributary-leaks")


def _found(synced: Synced, who: str, query: str, mode: SearchMode, source: str | None, k: int) -> set[str]:
    result = run_search(
        synced.sources, query, k=k, source=source, mode=mode,
        embedder_opener=lambda _s: HashEmbedder(), principal=synced.principals[who],
    )  # fmt: skip
    assert result.mode == mode and result.degraded is None, (result.mode, result.degraded, result.notes)
    words = set()
    for hit in result.hits:
        words |= set(_WORD.findall(str(hit.get("text"))))
    return words


def test_the_organisation_is_what_the_issue_asks(org: Org, synced: Synced) -> None:
    kinds = {d.kind for d in org.docs}
    synced_groups = {g for d in org.docs for g in [d.group] if g} | {g for d in org.docs for _, g in d.members}
    assert len(org.people) >= 50 and len(synced_groups) >= 10
    assert {"public", "tenant", "unreadable", "group", "user"} <= kinds
    assert len(org.docs) == N_YUQUE + N_FEISHU
    words = set()
    for source in synced.sources:  # unrestricted: every document, whatever its permissions
        hits = run_search(synced.sources, COMMON_WORD, k=2 * len(org.docs), source=source.source_id).hits
        words |= {w for h in hits for w in _WORD.findall(str(h["text"]))}
    assert words == {d.word for d in org.docs}


@pytest.mark.parametrize("mode", MODES)
def test_every_searcher_sees_exactly_what_they_may_read(synced: Synced, mode: SearchMode) -> None:
    """One query matching every document, k above the corpus: the hits must be the readable
    set exactly (a leak is a hit outside it, a miss is a readable document not returned)."""
    _exactly_readable(synced, mode)


def _exactly_readable(synced: Synced, mode: SearchMode) -> None:
    org, k = synced.org, 2 * len(synced.org.docs)
    leaks: dict[str, set[str]] = {}
    misses: dict[str, set[str]] = {}
    for who in [*org.names(), "anonymous"]:
        allowed = org.readable(None if who == "anonymous" else who)
        # one source at a time: run_search opens the named source's index (and its model)
        got = set().union(*(_found(synced, who, COMMON_WORD, mode, s.source_id, k) for s in synced.sources))
        if got - allowed:
            leaks[who] = got - allowed
        if allowed - got:
            misses[who] = allowed - got
    assert leaks == {}, f"{mode}: leaked documents: {leaks}"
    assert misses == {}, f"{mode}: readable documents not found: {misses}"


def test_a_documents_unique_word_finds_it_for_its_readers_only(synced: Synced) -> None:
    """Each document's own word, searched as one who may read it and one who may not."""
    org, leaks, misses = synced.org, [], []
    names = org.names()
    sid = {s.kind: s.source_id for s in synced.sources}
    for i, doc in enumerate(org.docs):
        readers = sorted(doc.readers)
        others = [n for n in names if n not in doc.readers] + ([] if doc.public else ["anonymous"])
        if readers:
            reader = readers[i % len(readers)]
            if doc.word not in _found(synced, reader, doc.word, "bm25", sid[doc.source], 5):
                misses.append((doc.word, reader))
        if others:
            other = others[i % len(others)]
            if _found(synced, other, doc.word, "bm25", sid[doc.source], 5):
                leaks.append((doc.word, other))
    assert leaks == [] and misses == []


def _filters(node: Any) -> list[Any]:
    """Every value under a ``filter`` key in a request body."""
    out: list[Any] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "filter":
                out.append(value)
            out += _filters(value)
    elif isinstance(node, list):
        for value in node:
            out += _filters(value)
    return out


def _acl_terms(node: Any) -> list[set[str]]:
    text = json.dumps(node)
    return [set(json.loads(m)) for m in re.findall(r'"terms": \{"acl": (\[[^\]]*\])', text)]


def test_elasticsearch_requests_carry_the_access_filter(synced: Synced) -> None:
    if synced.es is None:
        pytest.skip("request bodies are recorded by the Elasticsearch stand-in only")
    sim = synced.es
    for who in ("u07", "anonymous"):
        entries = set(synced.principals[who].entries())
        for mode in MODES:
            sim.requests.clear()
            _found(synced, who, COMMON_WORD, mode, synced.sources[0].source_id, 10)
            bodies = [b for m, p, b in sim.requests if p.endswith("/_search") and isinstance(b, dict)]
            assert bodies, mode
            for body in bodies:
                if "knn" in body:
                    assert entries in _acl_terms(body["knn"].get("filter")), (mode, body)
                if "query" in body:
                    assert entries in _acl_terms(_filters(body["query"])), (mode, body)


def test_revocation_reaches_the_index_at_the_next_permission_sync(synced: Synced) -> None:
    """Last of the module (it changes the organisation): people leave a group, docs change
    level; after ``sync_groups`` and ``sync_permissions`` (no content sync) nobody sees more
    than the revised organisation allows, and everyone finds what they may read."""
    revised, docs, groups = made.revise(synced.org)
    assert docs and any(synced.org.groups[g] != m for g, m in groups.items())
    for one in synced.served:
        one.apply(revised, docs, groups)
    state = open_state_store()
    try:
        for one in synced.served:
            _sync_groups(one.source)
            index = open_index(one.source.index)
            try:
                with get_connector_class(one.source.kind)(one.source) as conn:
                    result = sync_permissions(one.source, store=AccessStore(state), index=index, connector=conn)
            finally:
                index.close()
            # some level changes change nothing (a doc of a private repo stays the repo's)
            assert result.changed > 0 and result.checked == sum(d.source == one.source.kind for d in revised.docs)
    finally:
        state.close()
    synced.org, synced.principals = revised, _resolve(revised, synced.home)
    for mode in MODES:
        _exactly_readable(synced, mode)


def test_sync_cost_is_recorded(synced: Synced) -> None:
    """Not timed (no timed assertions): the sync's own seconds, for the record of its size."""
    print(f"\nleak test sync: {N_YUQUE} Yuque + {N_FEISHU} Feishu documents, seconds {synced.seconds}")
    assert set(synced.seconds) == {s.kind for s in synced.sources}
