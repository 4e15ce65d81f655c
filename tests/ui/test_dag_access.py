"""The audit pages follow Airflow's DAG-level access control, and show who can see a document
(issue 35).

Two files sources, ``files:eng`` (public) and ``files:ops`` (its ``acl`` block names alice and
bob: her search may read it, her Airflow user may not read its DAG), synced
into one SQLite index; the installed auth manager (``_per_dag_auth``, set as ``[core]
auth_manager``) grants alice ``sync_files_eng`` only, and admin every DAG. A middleware puts the
user Airflow's JWT check would resolve where ``require_user`` puts it (``test_api_auth.py``
tests the JWT itself). Pages are also opened in real Chromium.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from fastapi import Request
from fastapi.testclient import TestClient

from include.config import SourceConfig
from include.stores import open_state_store
from plugins.engine import run_pipeline
from plugins.tributary_airflow.ui import create_app
from tests.support.airflow import write_sources
from tests.support.server import serve_asgi
from tests.ui._per_dag_auth import PerDagAuthManager
from tests.ui.cdp import Browser, chromium_binary

ENG, OPS = "files:eng", "files:ops"
PRINCIPALS = """\
users:
  alice: {email: alice@example.com}
  bob: {email: bob@example.com}
admins: [admin]
"""


def _user(name: str) -> Any:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return SimpleAuthManagerUser(username=name, role="ADMIN" if name == "admin" else "VIEWER")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from airflow.api_fastapi import app as airflow_app

    tmp = tmp_path_factory.mktemp("dag-access")
    entries = []
    for name, text, acl in (("eng", "The eng runbook covers kettle descaling.", None), ("ops", "The ops pager covers kettle alarms.", {"users": ["alice@example.com", "bob@example.com"]})):  # fmt: skip
        root = tmp / name
        root.mkdir()
        (root / "note.md").write_text(f"# {name}\n\n{text}\n", encoding="utf-8")
        entries.append({"kind": "files", "name": name, "options": {"root": str(root)}, **({"acl": acl} if acl else {})})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRIBUTARY_HOME", str(tmp / "tributary"))
        for var in ("TRIBUTARY_STATE_URL", "TRIBUTARY_INDEX_PATH", "TRIBUTARY_STAGING_DIR", "TRIBUTARY_REDIS_URL"):
            mp.delenv(var, raising=False)
        mp.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp / "sources.yaml", entries)))
        principals = tmp / "principals.yaml"
        principals.write_text(PRINCIPALS, encoding="utf-8")
        mp.setenv("TRIBUTARY_PRINCIPALS", str(principals))
        mp.setenv("AIRFLOW__CORE__AUTH_MANAGER", "tests.ui._per_dag_auth.PerDagAuthManager")
        mp.setattr(PerDagAuthManager, "GRANTS", {"alice": {"sync_files_eng"}})
        airflow_app.create_auth_manager()  # Airflow's own factory: the configured manager
        runs = {e["name"]: run_pipeline(SourceConfig(**e), run_id=f"r-{e['name']}") for e in entries}
        store = open_state_store()
        try:
            chunks = {s: store.get_item(s, "note.md").chunk_ids[0] for s in (ENG, OPS)}
        finally:
            store.close()
        app = create_app(require_auth=False)
        as_alice = create_app(require_auth=False)

        @app.middleware("http")
        async def signed_in(request: Request, call_next: Any) -> Any:
            if name := request.headers.get("x-test-user"):
                request.state.airflow_user = _user(name)
            return await call_next(request)

        @as_alice.middleware("http")
        async def alice(request: Request, call_next: Any) -> Any:
            request.state.airflow_user = _user("alice")
            return await call_next(request)

        try:
            with TestClient(app) as client, serve_asgi(as_alice) as alice_url:
                yield {"client": client, "runs": runs, "chunks": chunks, "alice_url": alice_url, "home": tmp}
        finally:
            airflow_app._AuthManagerState.instance = None  # the next test builds its own


def _get(served: dict[str, Any], who: str, path: str, **params: str) -> Any:
    return served["client"].get(path, params=params, headers={"x-test-user": who, "accept": "text/html"})


def test_lists_leave_out_the_sources_a_user_may_not_read(served: dict[str, Any]) -> None:
    index = _get(served, "alice", "/")
    assert index.status_code == 200 and ENG in index.text and OPS not in index.text
    runs = _get(served, "alice", "/api/runs").json()
    assert {r["source"] for r in runs} == {ENG}
    assert {r["source"] for r in _get(served, "admin", "/api/runs").json()} == {ENG, OPS}


def _ops_paths(served: dict[str, Any]) -> list[tuple[str, dict[str, str]]]:
    chunk = quote(served["chunks"][OPS], safe="")
    return [
        (f"/sources/{OPS}", {}),
        ("/items", {"source": OPS}),
        ("/items", {"source": OPS, "key": "note.md"}),
        ("/runs/r-ops", {"source": OPS}),
        ("/runs/r-ops", {}),
        (f"/chunks/{chunk}", {}),
        ("/diff", {"b": "r-ops", "a": "r-ops"}),
        ("/search", {"q": "kettle", "source": OPS}),
    ]


def test_every_page_of_an_unreadable_source_is_403_naming_the_dag(served: dict[str, Any]) -> None:
    for path, params in _ops_paths(served):
        resp = _get(served, "alice", path, **params)
        assert resp.status_code == 403, (path, params, resp.status_code)
        assert "sync_files_ops" in resp.text and "kettle alarms" not in resp.text, path
    # the same pages of the source she may read are served
    assert _get(served, "alice", "/items", source=ENG, key="note.md").status_code == 200
    assert _get(served, "admin", "/items", source=OPS, key="note.md").status_code == 200


def test_the_json_api_refuses_with_a_json_403(served: dict[str, Any]) -> None:
    chunk = quote(served["chunks"][OPS], safe="")
    for path, params in [
        ("/api/items", {"source": OPS, "key": "note.md"}),
        (f"/api/sources/{OPS}/items", {}),
        ("/api/runs/r-ops", {}),
        (f"/api/chunks/{chunk}", {}),
        ("/api/runs", {"source": OPS}),
        ("/api/diff", {"a": "r-ops", "b": "r-ops"}),
    ]:
        resp = served["client"].get(path, params=params, headers={"x-test-user": "alice"})
        assert resp.status_code == 403, (path, resp.status_code)
        assert resp.json() == {"detail": f"your Airflow user may not read DAG sync_files_ops (source {OPS})"}


def test_search_leaves_out_hits_of_unreadable_sources(served: dict[str, Any]) -> None:
    """Both notes match and both may be read by alice's search; alice may not read ops' DAG."""
    client = served["client"]
    as_admin = client.get("/api/search", params={"q": "kettle"}, headers={"x-test-user": "admin"})
    assert {h["source"] for h in as_admin.json()} == {ENG, OPS}  # unrestricted, every DAG
    as_alice = client.get("/api/search", params={"q": "kettle"}, headers={"x-test-user": "alice"})
    assert as_alice.status_code == 200 and {h["source"] for h in as_alice.json()} == {ENG}
    assert "left out" in as_alice.json()[0]["note"]
    page = _get(served, "alice", "/search", q="kettle")
    assert "kettle alarms" not in page.text and "descaling" in page.text
    # a named source searches that source only (BM25 included)
    named = client.get("/api/search", params={"q": "kettle", "source": ENG}, headers={"x-test-user": "admin"})
    assert {h["source"] for h in named.json()} == {ENG}


def test_item_json_and_page_say_who_can_see_it(served: dict[str, Any]) -> None:
    item = served["client"].get(
        "/api/items", params={"source": OPS, "key": "note.md"}, headers={"x-test-user": "admin"}
    )
    access = item.json()["access"]
    assert access["visibility"] == "restricted"
    assert access["entries"] == ["user:email:alice@example.com", "user:email:bob@example.com"]
    assert access["entry_count"] == 2 and access["run_id"] == "r-ops" and access["unknown_reason"] is None
    first = item.json()["history"][0]["access"]
    assert first["added"] == access["entries"] and first["visibility"] == "restricted"
    public = served["client"].get("/api/items", params={"source": ENG, "key": "note.md"}).json()["access"]
    assert public["visibility"] == "public" and public["public"] is True


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    b = Browser(binary, width=1280, height=900)
    try:
        yield b
    finally:
        b.close()


def test_pages_in_chromium(served: dict[str, Any], browser: Browser) -> None:
    """As alice: the sources list holds eng only, ops' source page says which DAG it needs; the
    item and source pages say who can see."""
    base = served["alice_url"]
    browser.goto(base + "/")
    assert ENG in browser.text() and OPS not in browser.text()
    browser.goto(f"{base}/sources/{quote(OPS)}")
    assert "sync_files_ops" in browser.eval("document.querySelector('#forbidden').innerText")
    browser.goto(f"{base}/items?source={quote(ENG)}&key=note.md")
    assert browser.eval("document.querySelector('#visibility').innerText") == "public"
    assert "1 access entry" in browser.eval("document.querySelector('#entry-count').innerText")
    browser.goto(f"{base}/sources/{quote(ENG)}")
    counts = {
        v: browser.eval(f"document.querySelector('#visibility-{v}').innerText")
        for v in ("public", "tenant", "restricted", "unknown")
    }
    assert counts == {"public": "1", "tenant": "0", "restricted": "0", "unknown": "0"}
    assert "No group sync yet" in browser.eval("document.querySelector('#group-sync').innerText")


def test_the_source_page_counts_restricted_documents(served: dict[str, Any]) -> None:
    page = _get(served, "admin", f"/sources/{OPS}")
    assert page.status_code == 200
    assert 'id="visibility-restricted">1<' in page.text and 'id="visibility-public">0<' in page.text


def test_no_answer_from_access_control_is_no_access(served: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_a: Any, **_k: Any) -> set[str]:
        raise RuntimeError("auth manager down")

    monkeypatch.setattr(PerDagAuthManager, "filter_authorized_dag_ids", broken)
    resp = served["client"].get(
        "/api/items", params={"source": ENG, "key": "note.md"}, headers={"x-test-user": "alice"}
    )
    assert resp.status_code == 503 and "access control" in resp.text
