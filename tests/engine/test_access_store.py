"""The access store (document permissions, group memberships) on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from include.acl import AccessControl, group_entry, tenant_entry, user_entry
from include.stores import StateStore
from include.stores.access import AccessStore, StoredAccess
from plugins.connectors.base import GroupListing
from tests.support.postgres import scratch_database

ALICE, BOB = user_entry("email", "alice@example.com"), user_entry("email", "bob@example.com")
ENG, OPS = group_entry("static", "eng"), group_entry("static", "ops")
TENANT = tenant_entry("feishu", "t1")


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def access(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AccessStore]:
    """One store per backend for the module; each test uses sources of its own."""
    if request.param == "sqlite":
        state = StateStore(f"sqlite:///{tmp_path_factory.mktemp('access') / 'state.db'}")
        yield AccessStore(state)
        state.close()
        return
    with scratch_database("tributary_access") as url:
        store = AccessStore(url)
        yield store
        store.close()


def test_rows_round_trip_with_digest_and_visibility(access: AccessStore) -> None:
    rows = [
        StoredAccess.of("a", "d-a", AccessControl.everyone(), "r1"),
        StoredAccess.of("b", "d-b", AccessControl.of(users=[ALICE], tenants=[TENANT]), "r1"),
        StoredAccess.of("c", "d-c", AccessControl.of(users=[ALICE], groups=[ENG]), "r1"),
        StoredAccess.of("d", "d-d", AccessControl.unknown("acl_unknown", "403"), "r1"),
    ]
    assert access.save("s:rows", rows) == 4
    got = access.get("s:rows")
    assert set(got) == {"a", "b", "c", "d"}
    assert got["c"].access == rows[2].access and got["c"].digest == rows[2].access.digest()
    assert got["d"].access.warning == "403" and not got["d"].access.known
    assert got["a"].updated_at is not None and got["a"].previous is None
    assert access.visibility_counts("s:rows") == {"public": 1, "tenant": 1, "restricted": 1, "unknown": 1}
    assert access.visibility_counts("s:none") == {"public": 0, "tenant": 0, "restricted": 0, "unknown": 0}
    assert set(access.get("s:rows", ["a", "zz"])) == {"a"}
    assert access.delete("s:rows", ["a", "b"]) == 2
    assert set(access.get("s:rows")) == {"c", "d"}


def test_previous_access_survives_a_rerun_of_the_same_run(access: AccessStore) -> None:
    old, new = AccessControl.everyone(), AccessControl.of(users=[BOB])
    access.save("s:prev", [StoredAccess.of("k", "d", old, "r1")])
    access.save("s:prev", [StoredAccess.of("k", "d", new, "r2")])
    access.save("s:prev", [StoredAccess.of("k", "d", new, "r2")])  # the same commit again
    row = access.get("s:prev")["k"]
    assert row.access == new and row.previous == old
    assert row.before("r2") == old  # what run r2's lineage compares with, however often it ran
    assert row.before("r3") == new


def test_bulk_save_and_rename(access: AccessStore) -> None:
    rows = [StoredAccess.of(f"k{i}", f"d{i}", AccessControl.of(users=[ALICE]), "r") for i in range(1200)]
    assert access.save("s:bulk", rows) == 1200
    assert len(access.get("s:bulk")) == 1200
    assert len(access.get("s:bulk", [f"k{i}" for i in range(0, 1200, 2)])) == 600
    access.rename("s:bulk", {"k0": "n0"})
    got = access.get("s:bulk", ["k0", "n0"])
    assert set(got) == {"n0"} and got["n0"].doc_id == "d0"


def test_groups_replace_expand_and_keep_unlisted_on_an_incomplete_listing(access: AccessStore) -> None:
    listing = GroupListing(members={ENG: frozenset({ALICE, BOB}), OPS: frozenset({BOB}), TENANT: frozenset({ALICE})})
    assert access.replace_groups("s:g1", listing) == {"groups": 3, "memberships": 4, "kept_groups": 0}
    access.replace_groups("s:g2", GroupListing(members={group_entry("yuque", "team"): frozenset({ALICE})}))
    assert access.groups_of([ALICE]) == {ENG, TENANT, group_entry("yuque", "team")}  # across sources
    assert access.groups_of([BOB]) == {ENG, OPS}
    assert access.groups_of([]) == frozenset()
    # a page failed: ops was not listed, its stored members stay; eng is replaced (bob left it)
    partial = GroupListing(members={ENG: frozenset({ALICE})}, complete=False, errors={"http_500": 1}, requests=3)
    assert access.replace_groups("s:g1", partial)["kept_groups"] == 2
    assert access.groups_of([BOB]) == {OPS}
    status = access.group_sync_status("s:g1")
    assert status is not None and status["complete"] is False and status["errors"] == {"http_500": 1}
    assert status["requests"] == 3
    # a complete listing replaces everything: ops and the tenant are gone
    access.replace_groups("s:g1", GroupListing(members={ENG: frozenset({BOB})}))
    assert access.groups_of([BOB]) == {ENG} and access.groups_of([ALICE]) == {group_entry("yuque", "team")}
    assert access.group_sync_status("s:never") is None


def test_store_from_a_url_shares_the_state_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    first = AccessStore(url)
    first.save("s", [StoredAccess.of("k", "d", AccessControl.everyone())])
    first.close()
    state = StateStore(url)
    try:
        assert AccessStore(state).get("s")["k"].visibility == "public"
    finally:
        state.close()
