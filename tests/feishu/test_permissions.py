"""Feishu permissions (issue 35): collaborators, link sharing, the owner and wiki spaces ->
access entries; the group sync's departments, chats and spaces; fail-closed unknowns; all
against the simulator over a real socket.
"""

from __future__ import annotations

import pytest

from include.acl import AccessControl
from include.config import SourceConfig
from plugins.connectors.base import AccessRequest, ConnectorContext, DiscoveryRequest
from plugins.connectors.feishu.connector import FeishuConnector
from plugins.connectors.feishu.permissions import public_entries
from tests.simulators.feishu import FeishuSimulator

TENANT = "tenant:feishu:sim-tenant.feishu.cn"
OWNER = "user:feishu_open_id:ou_simowner"


def _connector(folders: list[str], **options: object) -> FeishuConnector:
    opts = {"folders": folders, "tenant_url": "https://sim-tenant.feishu.cn", **options}
    return FeishuConnector(SourceConfig(kind="feishu", name="perms", options=opts), ConnectorContext(redis_url=None))


def _discovered(conn: FeishuConnector) -> list[AccessRequest]:
    changes = conn.discover(DiscoveryRequest(known={})).changes
    return [AccessRequest(c.item_key, c.url, dict(c.metadata)) for c in changes]


def _bare(sim: FeishuSimulator, *tokens: str) -> list[AccessRequest]:
    """What a permission-only sync knows: the stored key and URL, nothing else."""
    return [AccessRequest(t, sim.url_of(sim.items[t])) for t in tokens]


@pytest.fixture
def drive(sim: FeishuSimulator, feishu_conn: str) -> dict[str, str]:
    root = sim.add_folder("团队")
    made = {
        "root": root,
        "closed": sim.add("docx", "Members only", root, "x"),
        "tenant": sim.add("sheet", "Tenant link", root, [["a"]]),
        "anyone": sim.add("docx", "Anyone, external open", root, "x"),
        "anyone_internal": sim.add("docx", "Anyone, external closed", root, "x"),
        "refused": sim.add("docx", "Unreadable", root, "x"),
        "odd": sim.add("docx", "Odd member type", root, "x"),
    }
    p = sim.perms
    p.members[made["closed"]] = [
        ("openid", "ou_alice"),
        ("email", "Bob@Example.com"),
        ("openchat", "oc_team"),
        ("opendepartmentid", "od_sales"),
    ]
    p.link_share[made["tenant"]] = "tenant_readable"
    p.link_share[made["anyone"]] = "anyone_readable"
    p.external_access[made["anyone"]] = "open"
    p.link_share[made["anyone_internal"]] = "anyone_editable"
    p.refused[made["refused"]] = (403, 1063002)
    p.members[made["odd"]] = [("robot", "cli_x")]
    return made


def test_entries_from_collaborators_link_sharing_and_owner(sim: FeishuSimulator, drive: dict[str, str]) -> None:
    conn = _connector([drive["root"]])
    found = conn.read_access(_discovered(conn))
    closed = found[drive["closed"]]
    assert closed.entries() == tuple(
        sorted(
            [
                OWNER,
                "user:feishu_open_id:ou_alice",
                "user:email:bob@example.com",
                "group:feishu_chat:oc_team",
                "group:feishu_department:od_sales",
            ]
        )
    )
    # "anyone in the tenant with the link" is the tenant, never public
    assert found[drive["tenant"]].entries() == tuple(sorted([TENANT, OWNER]))
    assert found[drive["anyone"]].public
    assert not found[drive["anyone_internal"]].public  # anyone_* without external access: the tenant
    assert TENANT in found[drive["anyone_internal"]].entries()
    # fail-closed, typed
    assert found[drive["refused"]].unknown_reason == "acl_unknown:code_1063002"
    assert found[drive["refused"]].entries() == ()
    assert found[drive["odd"]].unknown_reason == "acl_unknown:member_type"
    assert conn.access_stats["errors"] == {"acl_unknown:code_1063002": 1, "acl_unknown:member_type": 1}
    # two reads a document; the owner came with the listing
    assert sim.counters["perm_members_requests"] == 6 and sim.counters["perm_public_requests"] == 5
    assert sim.counters["meta_requests"] == 0


def test_a_permission_only_sync_reads_the_same_from_key_and_url(sim: FeishuSimulator, drive: dict[str, str]) -> None:
    conn = _connector([drive["root"]])
    full = conn.read_access(_discovered(conn))
    before = sim.counters["meta_requests"]
    bare = conn.read_access(_bare(sim, *(drive[k] for k in ("closed", "tenant", "anyone", "refused"))))
    for key, access in bare.items():
        assert access.digest() == full[key].digest(), key
    assert sim.counters["meta_requests"] == before + 1  # the owners: one batch query for all four


def test_a_member_removed_between_two_reads_is_gone_at_the_next(sim: FeishuSimulator, drive: dict[str, str]) -> None:
    conn = _connector([drive["root"]])
    first = conn.read_access(_bare(sim, drive["closed"]))[drive["closed"]]
    sim.perms.members[drive["closed"]] = [("openid", "ou_alice")]
    second = conn.read_access(_bare(sim, drive["closed"]))[drive["closed"]]
    assert "group:feishu_chat:oc_team" in first.entries()
    assert second.entries() == ("user:feishu_open_id:ou_alice", OWNER)
    assert first.digest() != second.digest()


@pytest.mark.parametrize(
    ("status", "code"),
    [(403, 99991672), (400, 1063001), (500, 1063006)],
    ids=["missing-scope", "bad-param", "server-error"],
)
def test_every_failed_read_is_private_never_public(
    sim: FeishuSimulator, drive: dict[str, str], status: int, code: int
) -> None:
    sim.perms.refused[drive["anyone"]] = (status, code)
    conn = _connector([drive["root"]], client={"max_attempts": 1})
    access = conn.read_access(_bare(sim, drive["anyone"]))[drive["anyone"]]
    assert not access.known and not access.public and access.entries() == ()


def test_an_unreadable_type_or_a_dead_server_is_unknown(sim: FeishuSimulator, drive: dict[str, str]) -> None:
    conn = _connector([drive["root"]])
    found = conn.read_access([AccessRequest("tok", "https://sim-tenant.feishu.cn/unknown/tok")])
    assert found["tok"].unknown_reason == "acl_unknown:type"
    dead = FeishuConnector(
        SourceConfig(kind="feishu", name="dead", conn_id="feishu_missing", options={"folders": ["x"]}),
        ConnectorContext(redis_url=None),
    )
    out = dead.read_access(_bare(sim, drive["closed"]))
    assert not out[drive["closed"]].known


def test_public_settings_outside_the_documented_values_are_unknown() -> None:
    assert public_entries({"link_share_entity": "closed"}, "t") == (False, [])
    assert public_entries({"link_share_entity": "partner_tenant_readable"}, "t") == (False, ["tenant:feishu:t"])
    assert public_entries({"link_share_entity": "anyone_readable", "external_access_entity": "open"}, "t") == (
        True,
        [],
    )
    assert public_entries({"link_share_entity": "everyone_forever"}, "t") is None
    assert public_entries({}, "t") is None


def test_wiki_nodes_are_read_on_the_node_and_inherit_the_space_unless_locked(
    sim: FeishuSimulator, feishu_conn: str
) -> None:
    shared = sim.add("docx", "Space page", "", "x", wiki_space="spc1")
    locked = sim.add("docx", "Locked page", "", "x", wiki_space="spc1")
    sim.perms.members[sim.wiki_node_token(locked)] = [("openid", "ou_carol")]
    sim.perms.locked.add(sim.wiki_node_token(locked))
    conn = _connector([], wiki_spaces=["spc1"])
    discovered = _discovered(conn)
    found = conn.read_access(discovered)
    assert "group:feishu_wiki_space:spc1" in found[shared].entries()
    assert found[locked].entries() == ("user:feishu_open_id:ou_carol",)
    # a permission-only sync (the stored key and wiki URL) finds the space from the node
    # (get_node) and reads the same
    assert all("/wiki/" in (r.url or "") for r in discovered)
    bare = conn.read_access([AccessRequest(r.item_key, r.url) for r in discovered])
    assert {k: v.digest() for k, v in bare.items()} == {k: v.digest() for k, v in found.items()}
    assert sim.counters["wiki_nodes_requests"] >= 1


def test_group_sync_expands_departments_chats_and_spaces(sim: FeishuSimulator, feishu_conn: str) -> None:
    p = sim.perms
    p.parent_department.update({"od_sales": "0", "od_sales_east": "od_sales", "od_rd": "0"})
    p.departments.update({"0": ["ou_ceo"], "od_sales": ["ou_ann"], "od_sales_east": ["ou_eve"], "od_rd": ["ou_rob"]})
    p.emails["ou_ann"] = "ann@example.com"
    p.chats["oc_team"] = [f"ou_{i}" for i in range(130)]  # two pages of chat members
    p.space_members["spc1"] = [("openid", "ou_solo"), ("openchat", "oc_team"), ("opendepartmentid", "od_rd")]
    sim.add("docx", "Space page", "", "x", wiki_space="spc1")
    listing = _connector([], wiki_spaces=["spc1"]).group_memberships()
    assert listing.complete, listing.errors
    m = listing.members
    # a department holds its sub-departments' people too
    assert m["group:feishu_department:od_sales"] == {
        "user:feishu_open_id:ou_ann",
        "user:email:ann@example.com",
        "user:feishu_open_id:ou_eve",
    }
    assert len(m["group:feishu_chat:oc_team"]) == 130
    space = m["group:feishu_wiki_space:spc1"]
    assert "user:feishu_open_id:ou_solo" in space and "user:feishu_open_id:ou_rob" in space
    assert "user:feishu_open_id:ou_129" in space  # the chat member's people, expanded
    everyone = m[TENANT]
    assert {"user:feishu_open_id:ou_ceo", "user:feishu_open_id:ou_eve", "user:feishu_open_id:ou_rob"} <= everyone
    assert sim.counters["chat_members_requests"] == 2
    assert listing.requests >= 8


def test_a_failed_directory_read_makes_the_listing_incomplete_and_drops_the_tenant(
    sim: FeishuSimulator, feishu_conn: str
) -> None:
    sim.perms.parent_department["od_sales"] = "0"
    sim.perms.departments.update({"0": ["ou_ceo"], "od_sales": ["ou_ann"]})
    sim.api_errors["contact_users"] = [(403, 40004)]
    listing = _connector([]).group_memberships()
    assert not listing.complete
    assert not any(k.startswith("tenant:") for k in listing.members)
    assert listing.errors


def test_no_access_control_is_widened_by_an_empty_answer(sim: FeishuSimulator, drive: dict[str, str]) -> None:
    """A document with no collaborators and closed sharing: the owner alone, never public."""
    conn = _connector([drive["root"]])
    access = conn.read_access(_bare(sim, drive["tenant"]))[drive["tenant"]]
    sim.perms.link_share.pop(drive["tenant"])
    narrowed = conn.read_access(_bare(sim, drive["tenant"]))[drive["tenant"]]
    assert access.known and narrowed == AccessControl.of(users=[OWNER])


def test_a_folder_whose_members_change_between_two_syncs(sim: FeishuSimulator, drive: dict[str, str]) -> None:
    """A folder's collaborators read what is in it; one who leaves the folder between two
    permission reads no longer reads its documents, and one who joins does."""
    conn = _connector([drive["root"]])
    sim.perms.members[drive["root"]] = [("openid", "ou_dana"), ("openchat", "oc_folder")]
    first = conn.read_access(_bare(sim, drive["tenant"]))[drive["tenant"]]
    sim.perms.members[drive["root"]] = [("openid", "ou_erin")]
    second = conn.read_access(_bare(sim, drive["tenant"]))[drive["tenant"]]
    assert {"user:feishu_open_id:ou_dana", "group:feishu_chat:oc_folder"} <= set(first.entries())
    assert "user:feishu_open_id:ou_dana" not in second.entries()
    assert "user:feishu_open_id:ou_erin" in second.entries() and TENANT in second.entries()
