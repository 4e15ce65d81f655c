"""The audit app's front door, served on 127.0.0.1 with Airflow's real JWT validation in-process
(the auth manager the API server would use, tokens it signs itself): bad tokens are a 401 with
an RFC 6750 challenge, ``limit`` outside 1..500 is a 422 on every endpoint that takes one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import jwt
import pytest

from include.stores import open_state_store
from plugins.tributary_airflow.ui import create_app
from tests.support.airflow import ensure_airflow_db, write_sources
from tests.support.server import serve_asgi

pytestmark = pytest.mark.airflow


@pytest.fixture(scope="module")
def auth_manager():
    from airflow.api_fastapi.app import create_auth_manager

    ensure_airflow_db()  # the validator looks revoked token ids up in the metadata DB
    return create_auth_manager()


@pytest.fixture
def audit(auth_manager, tributary_home: Path, tmp_path: Path, monkeypatch) -> Iterator[tuple[str, str]]:
    """(base URL, a valid admin token, an expired one); the run log holds three runs of one source."""
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "sources.yaml", [])))
    store = open_state_store()
    try:
        for n in range(3):
            store.start_run(f"r{n}", "files:x")
            store.finish_run(f"r{n}", "success", {"new": n}, source="files:x")
    finally:
        store.close()
    admin = SimpleAuthManagerUser(username="admin", role="ADMIN")
    token = auth_manager.generate_jwt(admin)
    # signed by the server's own key, valid for -1 h (beyond the validator's leeway)
    expired = auth_manager.generate_jwt(admin, expiration_time_in_seconds=-3600)
    with serve_asgi(create_app()) as url:
        yield url, token, expired


def _get(url: str, token: str | None = None, **params) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.get(url, headers=headers, params=params, timeout=30)


def _claims(token: str) -> dict:
    return jwt.decode(token, options={"verify_signature": False})


def test_valid_token_is_served(audit) -> None:
    url, token, _ = audit
    resp = _get(f"{url}/api/runs", token)
    assert resp.status_code == 200, resp.text
    assert [r["run_id"] for r in resp.json()] == ["r2", "r1", "r0"]


@pytest.mark.parametrize(
    "kind",
    ["garbage", "wrong-key", "tampered", "expired", "alg-none"],
)
def test_bad_bearer_token_is_401_with_a_challenge(audit, kind: str) -> None:
    url, token, expired = audit
    claims = _claims(token)
    bad = {
        "garbage": "forged",
        "wrong-key": jwt.encode(claims, "not-the-servers-secret-0123456789abcdef", algorithm="HS512"),
        # the server's signature over other claims: the payload segment swapped for mallory's
        "tampered": ".".join(
            [
                token.split(".")[0],
                jwt.encode({**claims, "sub": "mallory"}, "x" * 32, algorithm="HS512").split(".")[1],
                token.split(".")[2],
            ]
        ),
        "expired": expired,
        "alg-none": jwt.encode(claims, None, algorithm="none"),
    }[kind]
    for path in ("/api/runs", "/", "/runs/r1"):
        resp = _get(url + path, bad)
        assert resp.status_code == 401, (path, resp.status_code, resp.text)
        challenge = resp.headers["www-authenticate"]
        assert challenge.startswith("Bearer ") and 'error="invalid_token"' in challenge
        assert bad not in resp.text  # the token is never echoed


def test_missing_token_is_401_without_error_code(audit) -> None:
    url, _, _ = audit
    resp = _get(f"{url}/api/runs")
    assert resp.status_code == 401
    assert resp.headers["www-authenticate"].startswith("Bearer ") and "error=" not in resp.headers["www-authenticate"]


@pytest.mark.parametrize("limit", ["-1", "0", "501", "100000", "ten"])
def test_limit_out_of_range_is_422(audit, limit: str) -> None:
    url, token, _ = audit
    resp = _get(f"{url}/api/runs", token, limit=limit)
    assert resp.status_code == 422, (limit, resp.status_code, resp.text[:200])
    assert "limit" in resp.text


@pytest.mark.parametrize(("limit", "expected"), [("1", 1), ("2", 2), ("500", 3)])
def test_limit_in_range_is_honoured(audit, limit: str, expected: int) -> None:
    url, token, _ = audit
    resp = _get(f"{url}/api/runs", token, limit=limit)
    assert resp.status_code == 200, resp.text
    assert len(resp.json()) == expected


def test_library_refuses_a_non_positive_limit(tributary_home: Path) -> None:
    """The CLI and the pages share ``list_runs``: -1 there would also have meant "everything"."""
    from plugins.engine.lineage import list_runs

    store = open_state_store()
    try:
        store.start_run("r0", "files:x")
        for bad in (0, -1):
            with pytest.raises(ValueError, match="limit must be at least 1"):
                list_runs(store, limit=bad)
        assert len(list_runs(store, limit=1)) == 1
    finally:
        store.close()


def test_search_answers_only_a_user_and_checks_its_mode(audit) -> None:
    """Search hits quote the documents' text: no token, no hits; a bad ``mode`` is a 422 like ``limit``."""
    url, token, _ = audit
    assert _get(f"{url}/api/search", q="anything").status_code == 401
    assert _get(f"{url}/search", q="anything").status_code == 401
    resp = _get(f"{url}/api/search", token, q="anything", mode="semantic")
    assert resp.status_code == 422 and "mode" in resp.text
    resp = _get(f"{url}/api/search", token, q="anything")  # BM25 over the (empty) default index
    assert resp.status_code == 200 and resp.json() == []
