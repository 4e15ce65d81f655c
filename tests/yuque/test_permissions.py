"""Yuque permissions (issue 35): public levels of repos and docs -> access entries, the owner's
readers for private repos, group members paged, and fail-closed unknowns, against the simulator.

One simulator and server serve the module; each test builds its own groups and repos under
names of its own, so the tests do not see each other's space.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest
from fastapi import FastAPI, Request

from include.acl import AccessControl
from plugins.connectors.base import AccessRequest, DiscoveryRequest
from plugins.connectors.yuque.connector import YuqueConnector
from plugins.connectors.yuque.permissions import narrower
from tests.simulators.yuque import SimDoc, SimRepo, YuqueSimulator
from tests.support.server import serve_asgi
from tests.yuque.conftest import make_client, yuque_source


@pytest.fixture(scope="module")
def space() -> Iterator[tuple[YuqueSimulator, str]]:
    sim = YuqueSimulator()
    with serve_asgi(sim.app) as url:
        yield sim, url


@contextmanager
def _connector(url: str, token: str, **options: Any) -> Iterator[YuqueConnector]:
    source = yuque_source(breadcrumbs=False, deleted_listing=False, **options)
    conn = YuqueConnector(source, client=make_client(url, token))
    try:
        yield conn
    finally:
        conn.close()


def _key(repo: SimRepo, doc: SimDoc) -> str:
    return f"{repo.id}/{doc.id}"


def _bare(repo: SimRepo, *docs: SimDoc) -> list[AccessRequest]:
    """What a permission-only sync knows: the stored key and URL, nothing else."""
    return [AccessRequest(_key(repo, d), f"http://yuque.invalid/{repo.namespace}/{d.slug}") for d in docs]


def _levels_space(sim: YuqueSimulator, tag: str) -> tuple[dict[str, tuple[SimRepo, SimDoc]], str]:
    """A group with repos at every level, a doc at every level in each; returns them by name."""
    group, token = f"eng{tag}", f"eng{tag}-token-0123456789"
    sim.add_account(group, group=True, token=token, members=(f"alice{tag}",))
    sim.add_account(f"alice{tag}")
    made = {}
    for repo_level, slug in ((0, "private"), (2, "tenant"), (1, "open")):
        repo = sim.add_repo(group, slug)
        sim.set_public(repo, repo_level)
        for doc_level, name in ((0, "p"), (2, "t"), (1, "o")):
            doc = sim.add_doc(repo, f"{slug}-{name}", body="text")
            sim.set_public(doc, doc_level)
            made[f"{slug}/{name}"] = (repo, doc)
    return made, token


def _expected(url: str, group: str) -> dict[str, tuple[str, ...]]:
    tenant, grp = f"tenant:yuque:{urlsplit(url).netloc}", f"group:yuque:{group}"
    private, tenantwide = (grp,), tuple(sorted((grp, tenant)))
    return {
        "private/p": private,
        "private/t": private,
        "private/o": private,  # a public doc in a private repo: the repo's readers only
        "tenant/p": private,
        "tenant/t": tenantwide,
        "tenant/o": tenantwide,
        "open/p": private,
        "open/t": tenantwide,
        "open/o": ("public",),
    }


def test_narrower_orders_private_tenant_public() -> None:
    assert narrower(0, 1) == narrower(1, 0) == 0
    assert narrower(2, 1) == narrower(1, 2) == 2
    assert narrower(2, 0) == 0 and narrower(1, 1) == 1


def test_discovery_metadata_maps_every_level_without_a_request(space: tuple[YuqueSimulator, str]) -> None:
    sim, url = space
    made, token = _levels_space(sim, "m")
    with _connector(url, token, namespaces=[f"engm/{s}" for s in ("private", "tenant", "open")]) as conn:
        changes = conn.discover(DiscoveryRequest(known={})).changes
        sent = conn.client.sent
        found = conn.read_access([AccessRequest(c.item_key, c.url, c.metadata) for c in changes])
        assert conn.client.sent == sent and conn.access_stats["requests"] == 0
    by_key = {_key(*pair): name for name, pair in made.items()}
    got = {by_key[key]: access.entries() for key, access in found.items()}
    assert got == _expected(url, "engm")
    assert all(a.known for a in found.values())


def test_permission_only_sync_reads_repo_once_and_docs_cheaply(space: tuple[YuqueSimulator, str]) -> None:
    """Bare requests give the same answer; a repo costs its detail once, then per doc either its
    detail or, when cheaper, one listing page for all of them."""
    sim, url = space
    made, token = _levels_space(sim, "b")
    expected = _expected(url, "engb")
    with _connector(url, token) as conn:
        for repo_slug in ("private", "tenant", "open"):
            pairs = [made[f"{repo_slug}/{n}"] for n in ("p", "t", "o")]
            repo = pairs[0][0]
            found = conn.read_access(_bare(repo, *(d for _, d in pairs)))
            assert conn.access_stats["requests"] == 2  # the repo detail + one listing page
            for name, (_, doc) in zip(("p", "t", "o"), pairs, strict=True):
                assert found[_key(repo, doc)].entries() == expected[f"{repo_slug}/{name}"]
        repo, doc = made["open/t"]
        sim.reset_counters()
        found = conn.read_access(_bare(repo, doc))
        assert found[_key(repo, doc)].entries() == expected["open/t"]
        # one doc: its detail is cheaper than a listing
        assert conn.access_stats["requests"] == 2 and sim.counters["repo"] == 1 and sim.counters["doc"] == 1
        # the repo known from a change's metadata, the doc's level not (a TOC move): its detail only
        block = {"repo_public": 1, "owner_login": "engb", "owner_type": "Group"}
        found = conn.read_access([AccessRequest(_key(repo, doc), metadata={"access": block})])
        assert found[_key(repo, doc)].entries() == expected["open/t"] and conn.access_stats["requests"] == 1


def test_user_owned_repo_maps_to_its_owner(space: tuple[YuqueSimulator, str]) -> None:
    sim, url = space
    sim.add_account("carol", token="carol-token-0123456789")
    repo = sim.add_repo("carol", "notes")
    doc = sim.add_doc(repo, "diary", body="dear diary")
    sim.set_public(doc, 1)  # public doc, private repo
    shared = sim.add_repo("carol", "shared")
    sim.set_public(shared, 1)
    open_doc = sim.add_doc(shared, "recipes", body="soup")
    sim.set_public(open_doc, 1)
    with _connector(url, "carol-token-0123456789") as conn:
        found = conn.read_access([*_bare(repo, doc), *_bare(shared, open_doc)])
    assert found[_key(repo, doc)].entries() == ("user:yuque:carol",)
    assert found[_key(shared, open_doc)].entries() == ("public",)


def test_unreadable_permissions_are_unknown_never_public(space: tuple[YuqueSimulator, str]) -> None:
    sim, url = space
    sim.add_account("outsider", token="outsider-token-0123456789")
    sim.add_account("secret", group=True, token="secret-token-0123456789")
    hidden = sim.add_repo("secret", "vault")
    doc = sim.add_doc(hidden, "plans", body="x")
    sim.set_public(doc, 1)
    with _connector(url, "outsider-token-0123456789") as conn:
        # the repo is not visible to this token: Yuque answers 404
        assert conn.read_access(_bare(hidden, doc))[_key(hidden, doc)].unknown_reason == "acl_unknown:http_404"
        sim.invisible_status = 403
        try:
            assert conn.read_access(_bare(hidden, doc))[_key(hidden, doc)].unknown_reason == "acl_unknown:http_403"
        finally:
            sim.invisible_status = 404
    with _connector(url, "secret-token-0123456789") as conn:
        missing = AccessRequest(f"{hidden.id}/999999")
        bad_level = AccessRequest(
            _key(hidden, doc),
            metadata={"access": {"repo_public": 7, "doc_public": 0, "owner_login": "secret", "owner_type": "Group"}},
        )
        odd_owner = AccessRequest(
            f"{hidden.id}/1", metadata={"access": {"repo_public": 0, "doc_public": 0, "owner_type": "Robot"}}
        )
        found = conn.read_access([missing, bad_level, odd_owner, AccessRequest("not-a-key")])
        assert found[missing.item_key].unknown_reason == "acl_unknown:http_404"
        assert found[bad_level.item_key].unknown_reason == "acl_unknown:repo_level"
        assert found[odd_owner.item_key].unknown_reason == "acl_unknown:owner"
        assert found["not-a-key"].unknown_reason == "acl_unknown:key"
        sim.burst_500 = 100  # every retry fails
        try:
            failed = conn.read_access(_bare(hidden, doc))[_key(hidden, doc)]
        finally:
            sim.burst_500 = 0
        assert failed.unknown_reason == "acl_unknown:http_500"
        assert conn.access_stats["requests"] == 4  # the client's four attempts, all counted
    offline = YuqueConnector(yuque_source(), client=make_client("http://127.0.0.1:9", max_attempts=1))
    with offline:
        assert offline.read_access(_bare(hidden, doc))[_key(hidden, doc)].unknown_reason == "acl_unknown:transport"
    for access in [*found.values(), failed]:
        assert not access.known and access.entries() == () and access.visibility().value == "unknown"


def test_read_access_without_a_connection_is_unknown_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_YUQUE_DEFAULT", raising=False)
    with YuqueConnector(yuque_source()) as conn:
        found = conn.read_access([AccessRequest("1/2")])
    assert found["1/2"].unknown_reason is not None and found["1/2"].entries() == ()


def _group_space(sim: YuqueSimulator) -> str:
    """Groups ``big`` (230 members, every third with an e-mail) and ``small``, a repo each;
    ``ops`` belongs to both and syncs them."""
    sim.add_account("ops", token="ops-token-0123456789")
    sim.add_account("big", group=True, members=("ops",))
    sim.add_account("small", group=True, members=("ops",))
    for i in range(229):
        login = f"u{i:03d}"
        sim.add_account(login, email=f"U{i:03d}@Example.com" if i % 3 == 0 else None)
        sim.add_member("big", login, role=i % 3)
    sim.add_member("small", "u001")
    sim.add_repo("big", "wiki")
    sim.add_repo("small", "notes")
    return "ops-token-0123456789"


def test_group_members_paged_and_partial_failure(space: tuple[YuqueSimulator, str]) -> None:
    sim, url = space
    token = _group_space(sim)
    tenant = f"tenant:yuque:{urlsplit(url).netloc}"
    with _connector(url, token, namespaces=["big/wiki", "small/notes"]) as conn:
        sim.reset_counters()
        listing = conn.group_memberships()
        assert listing.complete and listing.errors == {}
        big = listing.members["group:yuque:big"]
        assert len([e for e in big if e.startswith("user:yuque:")]) == 230  # every role reads
        assert "user:email:u003@example.com" in big and "user:email:u001@example.com" not in big
        assert listing.members["group:yuque:small"] == {"user:yuque:ops", "user:yuque:u001"}
        assert listing.members[tenant] == big | listing.members["group:yuque:small"]
        # two repo details, three pages of big (100, 100, 30), one of small
        assert listing.requests == 6 == sim.counters["requests"] and sim.counters["group_users"] == 4
        sim.member_errors[("big", 100)] = 500
        try:
            partial = conn.group_memberships()
        finally:
            sim.member_errors.clear()
    assert not partial.complete and partial.errors == {"http_500": 1}
    # the failed group and the tenant are left out, so the stored memberships stay
    assert set(partial.members) == {"group:yuque:small"}
    assert partial.requests == 2 + 1 + 4 + 1  # repos, big's page 1, four tries of page 2, small


def test_changes_between_two_reads(space: tuple[YuqueSimulator, str]) -> None:
    """A repo opened to the tenant, a doc made public, a member leaving and one joining: the
    next read says so, though no timestamp moved (only a permission sync can see it)."""
    sim, url = space
    sim.add_account("crew", group=True, token="crew-token-0123456789", members=("dan",))
    sim.add_account("dan")
    repo = sim.add_repo("crew", "log")
    doc = sim.add_doc(repo, "entry", body="x")
    with _connector(url, "crew-token-0123456789", namespaces=["crew/log"]) as conn:
        before = conn.read_access(_bare(repo, doc))[_key(repo, doc)]
        members_before = conn.group_memberships().members["group:yuque:crew"]
        stamp = (repo.updated_at, doc.updated_at)
        sim.set_public(repo, 2)
        sim.set_public(doc, 1)
        sim.remove_member("crew", "dan")
        sim.add_member("crew", "erin")
        assert (repo.updated_at, doc.updated_at) == stamp
        after = conn.read_access(_bare(repo, doc))[_key(repo, doc)]
        members_after = conn.group_memberships().members["group:yuque:crew"]
    assert before.entries() == ("group:yuque:crew",) and before.visibility().value == "restricted"
    assert after.visibility().value == "tenant" and before.digest() != after.digest()
    assert members_before == {"user:yuque:dan"} and members_after == {"user:yuque:erin"}
    sim.set_public(repo, 1)
    with _connector(url, "crew-token-0123456789") as conn:
        assert conn.read_access(_bare(repo, doc))[_key(repo, doc)] == AccessControl.everyone()


def test_token_goes_to_the_simulator_origin_only(space: tuple[YuqueSimulator, str]) -> None:
    """A redirect elsewhere is never followed: the permissions are unknown and the other origin
    never sees a request (let alone the token)."""
    sim, url = space
    seen: list[dict[str, str]] = []
    elsewhere = FastAPI()

    @elsewhere.get("/{path:path}")
    def record(path: str, request: Request) -> dict[str, str]:
        seen.append(dict(request.headers))
        return {"data": "x"}

    sim.add_account("redir", group=True, token="redir-token-0123456789")
    repo = sim.add_repo("redir", "kb")
    doc = sim.add_doc(repo, "d", body="x")
    with serve_asgi(elsewhere) as other:
        sim.redirect_to = f"{other}/api/v2/repos/{repo.id}"
        try:
            with _connector(url, "redir-token-0123456789", namespaces=["redir/kb"]) as conn:
                access = conn.read_access(_bare(repo, doc))[_key(repo, doc)]
                listing = conn.group_memberships()
        finally:
            sim.redirect_to = None
    assert access.unknown_reason == "acl_unknown:http_302" and access.entries() == ()
    assert not listing.complete and listing.members == {}
    assert seen == []
