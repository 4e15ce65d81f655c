"""The audit app's search runs as the signed-in Airflow user (issue 35).

Served in process over a real SQLite index: a files source whose ``acl`` block lets the static
group ``engineering`` read it, and a principals file naming alice (in the group), bob (not) and
ops (an admin). Airflow's JWT check is ``test_api_auth.py``'s; here a small middleware stands in
for it and puts the user it would resolve where ``require_user`` puts it (``request.state``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import Request
from fastapi.testclient import TestClient

from include.config import SourceConfig
from plugins.engine import run_pipeline
from plugins.tributary_airflow.ui import create_app
from tests.support.airflow import write_sources

QUESTION = "rotation"
PRINCIPALS = """\
users:
  alice: {email: alice@example.com}
  bob: {email: bob@example.com}
admins: [ops]
groups:
  engineering: [alice@example.com]
"""


@dataclass
class AirflowUser:
    """What the pages read of the simple auth manager's user (its name, its role for the DAG
    check), and an account's e-mail."""

    name: str
    email: str | None = None
    role: str = "VIEWER"  # reads every DAG under the simple auth manager
    teams: tuple[str, ...] = ()

    def get_id(self) -> str:
        return self.name

    def get_name(self) -> str:
        return self.name


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp_path = tmp_path_factory.mktemp("search-access")
    root = tmp_path / "docs"
    root.mkdir()
    (root / "oncall.md").write_text("# On-call\n\nThe on-call rotation changes every Monday.\n", encoding="utf-8")
    entries = [{"kind": "files", "name": "eng", "options": {"root": str(root)}, "acl": {"groups": ["engineering"]}}]
    principals = tmp_path / "principals.yaml"
    principals.write_text(PRINCIPALS, encoding="utf-8")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("TRIBUTARY_HOME", str(tmp_path / "tributary"))
        for var in ("TRIBUTARY_STATE_URL", "TRIBUTARY_INDEX_PATH", "TRIBUTARY_STAGING_DIR", "TRIBUTARY_REDIS_URL"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "s.yaml", entries)))
        monkeypatch.setenv("TRIBUTARY_PRINCIPALS", str(principals))
        run_pipeline(SourceConfig(**entries[0]), run_id="e1")
        from airflow.api_fastapi.app import create_auth_manager

        create_auth_manager()  # the API server's: the pages ask it which DAGs a user may read
        app = create_app(require_auth=False)

        @app.middleware("http")
        async def signed_in(request: Request, call_next: Any) -> Any:
            name = request.headers.get("x-test-user")
            if name:
                request.state.airflow_user = AirflowUser(name, request.headers.get("x-test-email"))
            return await call_next(request)

        with TestClient(app) as client:
            yield {"client": client, "principals": principals, "monkeypatch": monkeypatch}


def _api(client: TestClient, user: str | None, **headers: str) -> Any:
    sent = {"x-test-user": user, **headers} if user else headers
    return client.get("/api/search", params={"q": QUESTION, "source": "files:eng"}, headers=sent)


def test_a_member_of_the_group_finds_the_document(served: dict[str, Any]) -> None:
    resp = _api(served["client"], "alice")
    assert resp.status_code == 200, resp.text
    hits = resp.json()
    assert len(hits) == 1 and "rotation changes every Monday" in hits[0]["text"]
    assert resp.headers["x-search-access"] == "principal" and resp.headers["x-search-as"] == "alice"


def test_someone_outside_it_finds_nothing_and_the_page_says_as_whom(served: dict[str, Any]) -> None:
    resp = _api(served["client"], "bob")
    assert resp.status_code == 200 and resp.json() == [], resp.text
    page = served["client"].get(
        "/search", params={"q": QUESTION, "source": "files:eng"}, headers={"x-test-user": "bob"}
    )
    assert page.status_code == 200
    assert "Searching as bob" in page.text and "every Monday" not in page.text


def test_an_unmapped_account_is_known_by_its_email(served: dict[str, Any]) -> None:
    # carol is not in the file, but her Airflow account's address is not in the group either
    resp = _api(served["client"], "carol", **{"x-test-email": "carol@example.com"})
    assert resp.status_code == 200 and resp.json() == []
    assert resp.headers["x-search-as"] == "carol"


def test_an_admin_searches_unrestricted(served: dict[str, Any]) -> None:
    resp = _api(served["client"], "ops")
    assert resp.status_code == 200 and len(resp.json()) == 1
    assert resp.headers["x-search-access"] == "unrestricted" and "x-search-as" not in resp.headers
    page = served["client"].get("/search", params={"q": QUESTION}, headers={"x-test-user": "ops"})
    assert "Searching unrestricted" in page.text


def test_a_broken_principals_file_refuses_the_search(served: dict[str, Any], tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("users: [not, a, mapping]\n", encoding="utf-8")
    served["monkeypatch"].setenv("TRIBUTARY_PRINCIPALS", str(broken))
    try:
        resp = _api(served["client"], "alice")
    finally:
        served["monkeypatch"].setenv("TRIBUTARY_PRINCIPALS", str(served["principals"]))
    assert resp.status_code == 503 and "cannot tell who is searching" in resp.text
