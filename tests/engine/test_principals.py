"""The principals file and a name resolved to a Principal (plugins/engine/principals.py)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pytest

from include.acl import PUBLIC
from plugins.engine.principals import (
    PrincipalMap,
    PrincipalsError,
    describe_principal,
    is_admin,
    load_principals,
    resolve_principal,
)

FILE = """
users:
  alice:
    email: Alice@Example.COM
    feishu_open_id: [ou_alice, ou_alice_app2]
    yuque: alice
  carol:
    yuque: carol
admins: [ops]
groups:
  engineering: [alice, bob@example.com]
  design: [carol]
"""


class FakeStore:
    """The synced memberships (AccessStore.groups_of), and what it was asked."""

    def __init__(self, memberships: dict[str, set[str]]) -> None:
        self.memberships = memberships
        self.asked: list[list[str]] = []

    def groups_of(self, user_entries: Iterable[str]) -> frozenset[str]:
        users = list(user_entries)
        self.asked.append(users)
        return frozenset(g for u in users for g in self.memberships.get(u, ()))


@pytest.fixture
def principals(tmp_path: Path) -> PrincipalMap:
    path = tmp_path / "principals.yaml"
    path.write_text(FILE, encoding="utf-8")
    return load_principals(path)


def test_a_mapped_name_is_its_identities_static_groups_and_synced_groups(principals: PrincipalMap) -> None:
    store = FakeStore(
        {
            "user:feishu_open_id:ou_alice": {"group:feishu_chat:oc_1", "tenant:feishu:t1"},
            "user:yuque:alice": {"group:yuque:team"},
            "user:yuque:carol": {"group:yuque:other"},
        }
    )
    alice = resolve_principal("alice", store=store, principals=principals)
    assert alice.users == {
        "user:email:alice@example.com",  # lower-cased
        "user:feishu_open_id:ou_alice",
        "user:feishu_open_id:ou_alice_app2",
        "user:yuque:alice",
    }
    assert alice.groups == {"group:static:engineering", "group:feishu_chat:oc_1", "group:yuque:team"}
    assert alice.tenants == {"tenant:feishu:t1"}
    assert alice.mapped_by == "mapping" and alice.notes == ()
    assert store.asked == [sorted(alice.users)]  # the user entries only, not the groups
    assert PUBLIC in alice.entries() and "group:yuque:other" not in alice.entries()
    assert describe_principal(alice) == "alice (mapping: 4 identities, 3 groups, 1 tenant)"


def test_an_address_is_an_identity_and_finds_its_mapping_and_static_groups(principals: PrincipalMap) -> None:
    bob = resolve_principal("BOB@example.com", principals=principals)  # unmapped, but an address
    assert bob.users == {"user:email:bob@example.com"} and bob.mapped_by == "email"
    assert bob.groups == {"group:static:engineering"}
    assert bob.notes == ("synced group memberships not expanded (no access store)",)
    # an Airflow account named otherwise whose e-mail is alice's gets alice's identities
    airflow_alice = resolve_principal("a.smith", email="alice@example.com", principals=principals)
    assert airflow_alice.mapped_by == "mapping" and "user:yuque:alice" in airflow_alice.users
    assert "group:static:engineering" in airflow_alice.groups
    # a mapping without an address takes the known one; static groups by name still count
    carol = resolve_principal("carol", email="Carol@Example.com", principals=principals)
    assert carol.users == {"user:yuque:carol", "user:email:carol@example.com"}
    assert carol.groups == {"group:static:design"}


def test_an_unknown_name_sees_public_documents_only(principals: PrincipalMap) -> None:
    store = FakeStore({})
    nobody = resolve_principal("mallory", store=store, principals=principals)
    assert nobody.anonymous and nobody.mapped_by == "none" and nobody.entries() == {PUBLIC}
    assert store.asked == []  # nothing to expand
    assert describe_principal(nobody) == "mallory (no identity mapped: public documents only)"


def test_admins(principals: PrincipalMap) -> None:
    assert is_admin("ops", principals) and not is_admin("alice", principals)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("users:\n  alice:\n    emial: a@example.com\n", "users.alice.emial: unknown key"),
        ("users:\n  alice:\n    email: not-an-address\n", "users.alice.email: not an e-mail address"),
        ("user:\n  alice: {}\n", "user: unknown key"),
        ("groups:\n  eng: [alice]\n", "groups.eng: member #1 is neither a name under users nor an e-mail address"),
        ("users: [alice]\n", "users: Input should be a valid dictionary"),
        ("- alice\n", "the top level must be a mapping (users, admins, groups), not list"),
        ("users: {alice: [\n", "not valid YAML at line 2"),
    ],
)
def test_a_bad_file_says_where_and_what(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PrincipalsError) as caught:
        load_principals(path)
    assert caught.value.problems == [problem]
    assert str(path) in str(caught.value) and "not-an-address" not in str(caught.value)


def test_a_named_file_that_is_missing_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PrincipalsError, match="cannot be read"):
        load_principals(tmp_path / "absent.yaml")


def test_unset_is_nobody_mapped_and_the_file_is_cached_by_mtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRIBUTARY_PRINCIPALS", raising=False)
    assert load_principals() == PrincipalMap()
    path = tmp_path / "p.yaml"
    path.write_text(FILE, encoding="utf-8")
    monkeypatch.setenv("TRIBUTARY_PRINCIPALS", str(path))
    first = load_principals()
    first_stamp = path.stat().st_mtime_ns
    assert load_principals() is first  # not parsed again
    path.write_text(FILE.replace("admins: [ops]", "admins: [ops, alice]"), encoding="utf-8")
    os.utime(path, ns=(path.stat().st_atime_ns, first_stamp + 1_000_000))  # a coarse clock may not tick
    assert is_admin("alice")  # the edited file, read again
    path.write_text("", encoding="utf-8")
    assert load_principals() == PrincipalMap()  # an empty file maps nobody
