"""A generated organisation for the leak test (``test_access_leaks.py``): people, groups, documents
with random permissions, and, computed from the generation alone (never from the code under
test), who may read each document.

Both halves are served: the Yuque simulator (repos and docs at their levels, groups) and the
Feishu simulator (docx documents with collaborators and link shares, chats, departments).

Seeded (:data:`SEED`), so a failure reproduces. The same people exist in both sources: each has an
e-mail, a Feishu ``open_id`` and a Yuque login, mapped in a principals file
(:func:`principals_yaml`). Groups: Yuque groups (whose private repos their members read) and
Feishu chats and departments (named as members of a document). Every person belongs to the
Yuque space and the Feishu tenant, so a tenant-wide document is readable by all of them and by
no anonymous searcher.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from include.config import SourceConfig
from tests.simulators.feishu import FeishuSimulator
from tests.simulators.yuque import SimDoc, SimRepo, YuqueSimulator
from tests.support.server import serve_asgi

SEED = 3535
N_USERS = 60
YUQUE_GROUPS = (
    "ygdesign", "ygdata", "ygops", "yglegal", "ygsales", "ygsupport", "yghr", "ygfinance", "ygresearch", "ygsecurity",
)  # fmt: skip
FEISHU_CHATS = ("oc_chatalpha", "oc_chatbeta", "oc_chatgamma", "oc_chatdelta")
FEISHU_DEPARTMENTS = ("od_deptsales", "od_deptresearch")
TOKEN_OWNER = "u00"  # whose Yuque token syncs the space: a member of every Yuque group
COMMON_WORD = "ledgerbook"  # in every document: one query that matches them all


@dataclass(frozen=True, slots=True)
class Person:
    name: str

    @property
    def email(self) -> str:
        return f"{self.name}@example.com"

    @property
    def open_id(self) -> str:
        return f"ou_{self.name}"

    @property
    def yuque(self) -> str:
        return f"y{self.name}"


@dataclass(slots=True)
class OrgDoc:
    """One document: its unique word, how its permissions were drawn, who may read it."""

    source: str  # "yuque" | "feishu"
    word: str
    kind: str  # public | tenant | group | narrowed | user | users | groups | mixed | unreadable
    readers: frozenset[str]  # person names (independent ground truth)
    public: bool = False
    # source-specific drawing (the simulator set-up reads these)
    group: str | None = None  # Yuque: the repo's owner group; Feishu: unused
    repo_level: int = 0
    doc_level: int = 0
    members: tuple[tuple[str, str], ...] = ()  # Feishu: (member_type, member_id)
    link: str | None = None  # Feishu link share: None | "tenant" | "anyone"

    @property
    def text(self) -> str:
        return f"# Doc {self.word}\n\nThe {COMMON_WORD} entry {self.word} records a canal inspection.\n"


@dataclass(slots=True)
class Org:
    people: list[Person]
    groups: dict[str, frozenset[str]]  # group id (Yuque login, chat or department id) -> person names
    docs: list[OrgDoc] = field(default_factory=list)

    def names(self) -> list[str]:
        return [p.name for p in self.people]

    def org_people_not_in(self, members: frozenset[str]) -> list[str]:
        return [n for n in self.names() if n not in members]

    def readable(self, name: str | None) -> set[str]:
        """The words of the documents ``name`` (None: anonymous) may read."""
        return {d.word for d in self.docs if d.public or (name is not None and name in d.readers)}


def _memberships(rng: random.Random, people: list[str], groups: tuple[str, ...], cover: bool) -> dict[str, set[str]]:
    """Each group ~25% of the people; ``cover``: everyone in at least one of them."""
    found: dict[str, set[str]] = {g: {p for p in people if rng.random() < 0.25} for g in groups}
    for g in found:
        found[g] |= set(rng.sample(people, 3))  # no empty group
    if cover:
        for p in people:
            if not any(p in m for m in found.values()):
                found[rng.choice(groups)].add(p)
    return found


def generate(n_yuque: int, n_feishu: int, seed: int = SEED) -> Org:
    rng = random.Random(seed)
    people = [Person(f"u{i:02d}") for i in range(N_USERS)]
    names = [p.name for p in people]
    yuque = _memberships(rng, names, YUQUE_GROUPS, cover=True)
    for g in yuque:
        yuque[g].add(TOKEN_OWNER)
    feishu = _memberships(rng, names, FEISHU_CHATS + FEISHU_DEPARTMENTS, cover=False)
    org = Org(people, {g: frozenset(m) for g, m in {**yuque, **feishu}.items()})
    for i in range(n_yuque):
        org.docs.append(_yuque_doc(rng, org, f"yq{i:04d}word"))
    for i in range(n_feishu):
        org.docs.append(_feishu_doc(rng, org, f"fs{i:04d}word"))
    return org


_BREADTH = {0: 0, 2: 1, 1: 2}  # private < tenant-wide < public


def yuque_readers(org: Org, doc: OrgDoc) -> tuple[frozenset[str], bool]:
    """Who may read a Yuque doc under the space's rules: the narrower of the repo's and the
    doc's level; private means the repo owner's people (the group's members, or the user)."""
    if doc.doc_level not in _BREADTH or doc.repo_level not in _BREADTH:
        return frozenset(), False
    level = min(doc.repo_level, doc.doc_level, key=_BREADTH.__getitem__)
    if level == 1:
        return frozenset(org.names()), True
    if level == 2:
        return frozenset(org.names()), False
    return (org.groups[doc.group] if doc.group else frozenset({TOKEN_OWNER})), False


def revise(org: Org, seed: int = SEED + 1) -> tuple[Org, list[OrgDoc], dict[str, frozenset[str]]]:
    """A copy of ``org`` after a round of permission changes: two people leave a Yuque group
    and two a Feishu chat, a tenth of the Yuque docs get another level of their own, a tenth of
    the Feishu docs another collaborator list (one person, sharing closed). Returns (revised org, the docs
    whose level changed, the groups whose members changed)."""
    rng = random.Random(seed)
    new = copy.deepcopy(org)
    group = YUQUE_GROUPS[rng.randrange(len(YUQUE_GROUPS))]
    # leavers stay in another Yuque group (everyone stays in the space, so tenant stays everyone)
    others = set().union(*(new.groups[g] for g in YUQUE_GROUPS if g != group))
    leavers = sorted(p for p in new.groups[group] if p != TOKEN_OWNER and p in others)[:2]
    new.groups[group] = new.groups[group] - set(leavers)
    changed = []
    for d in new.docs:
        if d.source == "yuque" and d.kind != "unreadable" and rng.random() < 0.1:
            d.doc_level = rng.choice([lvl for lvl in (0, 1, 2) if lvl != d.doc_level])
            changed.append(d)
    chat = FEISHU_CHATS[rng.randrange(len(FEISHU_CHATS))]
    new.groups[chat] = new.groups[chat] - set(sorted(new.groups[chat])[:2])  # two people leave a chat
    for d in new.docs:
        if d.source == "feishu" and d.kind != "unreadable" and rng.random() < 0.1:
            d.members, d.link, d.public = (("openid", f"ou_{rng.choice(new.names())}"),), None, False
            changed.append(d)
    for d in new.docs:
        if d.source == "yuque":
            d.readers, d.public = yuque_readers(new, d)
        else:
            d.readers = feishu_readers(new, d)
    return new, changed, {group: new.groups[group], chat: new.groups[chat]}


def _yuque_doc(rng: random.Random, org: Org, word: str) -> OrgDoc:
    """A Yuque doc: its repo's level and its own; readers are the narrower of the two."""
    everyone = frozenset(org.names())
    kind = rng.choices(["public", "tenant", "group", "narrowed", "user", "unreadable"], [2, 2, 4, 2, 1, 1])[0]
    group = rng.choice(YUQUE_GROUPS)
    members = org.groups[group]
    if kind == "public":
        return OrgDoc("yuque", word, kind, everyone, public=True, group=group, repo_level=1, doc_level=1)
    if kind == "tenant":  # a tenant-wide repo, a public or tenant-wide doc in it
        return OrgDoc("yuque", word, kind, everyone, group=group, repo_level=2, doc_level=rng.choice((1, 2)))
    if kind == "group":  # a private repo of the group: whatever the doc says, its members only
        return OrgDoc("yuque", word, kind, members, group=group, repo_level=0, doc_level=rng.choice((0, 1, 2)))
    if kind == "narrowed":  # a public or tenant repo, the doc itself private: the owner group only
        return OrgDoc("yuque", word, kind, members, group=group, repo_level=rng.choice((1, 2)), doc_level=0)
    if kind == "user":  # a private repo of the token's owner: that person alone
        return OrgDoc("yuque", word, kind, frozenset({TOKEN_OWNER}), group=None, repo_level=0, doc_level=0)
    # a level outside 0/1/2: the reader cannot tell who may read it; nobody may
    return OrgDoc("yuque", word, kind, frozenset(), group=group, repo_level=1, doc_level=7)


def _feishu_doc(rng: random.Random, org: Org, word: str) -> OrgDoc:
    """A Feishu doc: named members (people by open_id, chats, departments) and a link share."""
    everyone = frozenset(org.names())
    kind = rng.choices(["public", "tenant", "users", "groups", "mixed", "unreadable"], [2, 2, 3, 3, 2, 1])[0]
    if kind == "public":
        return OrgDoc("feishu", word, kind, everyone, public=True, link="anyone")
    if kind == "tenant":
        return OrgDoc("feishu", word, kind, everyone, link="tenant")
    if kind == "unreadable":  # the permission API answers 403: private to everyone
        return OrgDoc("feishu", word, kind, frozenset())
    users = rng.sample(org.names(), rng.randint(1, 4)) if kind in ("users", "mixed") else []
    groups = rng.sample(FEISHU_CHATS + FEISHU_DEPARTMENTS, rng.randint(1, 2)) if kind in ("groups", "mixed") else []
    members = tuple(("openid", f"ou_{u}") for u in users) + tuple(
        ("openchat" if g.startswith("oc_") else "opendepartmentid", g) for g in groups
    )
    doc = OrgDoc("feishu", word, kind, frozenset(), members=members)
    doc.readers = feishu_readers(org, doc)
    return doc


def feishu_readers(org: Org, doc: OrgDoc) -> frozenset[str]:
    """Who may read a Feishu doc: everyone for a link share, nobody when its permissions cannot
    be read, else the people it names and the members of the chats and departments it names."""
    if doc.link in ("tenant", "anyone"):
        return frozenset(org.names())
    if doc.kind == "unreadable":
        return frozenset()
    found: set[str] = set()
    for member_type, member in doc.members:
        found |= {member.removeprefix("ou_")} if member_type == "openid" else set(org.groups[member])
    return frozenset(found)


def principals_yaml(org: Org) -> str:
    """The principals file: each person's e-mail, Feishu open_id and Yuque login."""
    lines = ["users:"]
    for p in org.people:
        lines += [f"  {p.name}:", f"    email: {p.email}", f"    feishu_open_id: {p.open_id}", f"    yuque: {p.yuque}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- the sources, served


_YUQUE_TOKEN = "leaks-token-0123456789"
_FAST = {"backoff_initial": 0.01, "backoff_max": 0.05, "max_retry_after": 0.05}


def _yuque_space(org: Org) -> tuple[YuqueSimulator, list[str], dict[str, SimDoc]]:
    """The Yuque half: every person an account, the groups with their members, one repo per
    (owner, level), each doc at its own level; the namespaces to sync."""
    sim = YuqueSimulator()
    logins = {p.name: p.yuque for p in org.people}
    for p in org.people:
        sim.add_account(p.yuque, token=_YUQUE_TOKEN if p.name == TOKEN_OWNER else None)
    for g in YUQUE_GROUPS:
        sim.add_account(g, group=True, members=tuple(sorted(logins[n] for n in org.groups[g])))
    repos: dict[tuple[str, int], SimRepo] = {}
    handles: dict[str, SimDoc] = {}
    for d in org.docs:
        if d.source != "yuque":
            continue
        owner = d.group or logins[TOKEN_OWNER]
        if (owner, d.repo_level) not in repos:
            repos[owner, d.repo_level] = sim.add_repo(owner, f"level{d.repo_level}")
            sim.set_public(repos[owner, d.repo_level], d.repo_level)
        doc = sim.add_doc(repos[owner, d.repo_level], f"Doc {d.word}", body=d.text)
        sim.set_public(doc, d.doc_level)
        handles[d.word] = doc
    return sim, [r.namespace for r in repos.values()], handles


@dataclass(slots=True)
class Served:
    """A source being served, and how to carry a revision of the organisation into it."""

    source: SourceConfig
    apply: Callable[[Org, list[OrgDoc], dict[str, frozenset[str]]], None]


@contextmanager
def yuque_source(org: Org, mp: pytest.MonkeyPatch) -> Iterator[Served]:
    """The Yuque simulator on 127.0.0.1 and a source syncing every repo of the space."""
    sim, namespaces, handles = _yuque_space(org)

    def apply(revised: Org, docs: list[OrgDoc], groups: dict[str, frozenset[str]]) -> None:
        for d in docs:
            if d.source == "yuque":
                sim.set_public(handles[d.word], d.doc_level)  # no timestamp moves: only a permission sync sees it
        for g, members in groups.items():
            if g in YUQUE_GROUPS:
                for p in revised.org_people_not_in(members):
                    sim.remove_member(g, Person(p).yuque)

    with serve_asgi(sim.app) as url:
        conn = {
            "conn_type": "yuque",
            "host": url,
            "password": _YUQUE_TOKEN,
            "extra": {**_FAST, "user_agent": "leaks", "max_per_second": 1000},
        }
        mp.setenv("AIRFLOW_CONN_YUQUE_LEAKS", json.dumps(conn))
        options = {"namespaces": namespaces, "breadcrumbs": False, "deleted_listing": False}
        yield Served(
            SourceConfig(kind="yuque", name="leaks", conn_id="yuque_leaks", options=options, batch_size=50), apply
        )


_FEISHU_SECRET = "leaks-feishu-secret-0123456789"
# the simulator answers as fast as it can: the documented budgets would only slow the test
_UNLIMITED = {api: [[10000, 1]] for api in ("list", "meta", "docx_get", "perm_members", "perm_public")}


def _feishu_drive(org: Org) -> tuple[FeishuSimulator, str, dict[str, str]]:
    """The Feishu half: the departments (everyone in one, the rest in the root, so the tenant
    is everyone), the chats, one folder of docx documents with their collaborators and links."""
    sim = FeishuSimulator(app_id="cli_leaks", app_secret=_FEISHU_SECRET, export_pending_polls=1)
    perms = sim.perms
    in_department: set[str] = set()
    for dept in FEISHU_DEPARTMENTS:
        perms.parent_department[dept] = "0"
        perms.departments[dept] = [Person(n).open_id for n in sorted(org.groups[dept])]
        in_department |= org.groups[dept]
    perms.departments["0"] = [p.open_id for p in org.people if p.name not in in_department]
    for chat in FEISHU_CHATS:
        perms.chats[chat] = [Person(n).open_id for n in sorted(org.groups[chat])]
    root = sim.add_folder("Org")
    handles: dict[str, str] = {}
    for d in org.docs:
        if d.source == "feishu":
            handles[d.word] = token = sim.add("docx", f"Doc {d.word}", root, d.text)
            _feishu_perms(sim, token, d)
            if d.kind == "unreadable":
                perms.refused[token] = (403, 1063002)
    return sim, root, handles


def _feishu_perms(sim: FeishuSimulator, token: str, doc: OrgDoc) -> None:
    sim.perms.members[token] = list(doc.members)
    sim.perms.link_share[token] = {"tenant": "tenant_readable", "anyone": "anyone_readable"}.get(
        doc.link or "", "closed"
    )
    sim.perms.external_access[token] = "open" if doc.link == "anyone" else "closed"


@contextmanager
def feishu_source(org: Org, mp: pytest.MonkeyPatch) -> Iterator[Served]:
    """The Feishu simulator on 127.0.0.1 and a source syncing its folder (docx as raw text)."""
    sim, root, handles = _feishu_drive(org)

    def apply(revised: Org, docs: list[OrgDoc], groups: dict[str, frozenset[str]]) -> None:
        for d in docs:
            if d.source == "feishu":
                _feishu_perms(sim, handles[d.word], d)  # no timestamp moves: only a permission sync sees it
        for g, members in groups.items():
            if g in FEISHU_CHATS:
                sim.perms.chats[g] = [Person(n).open_id for n in sorted(members)]

    with serve_asgi(sim.app) as url:
        conn = {"conn_type": "http", "login": sim.app_id, "password": sim.app_secret, "host": url}
        mp.setenv("AIRFLOW_CONN_FEISHU_LEAKS", json.dumps(conn))
        options = {
            "folders": [root], "tenant_url": sim.tenant_url, "docx_fetch": "raw_content",
            "rate_limits": _UNLIMITED, "client": {"max_attempts": 2},
        }  # fmt: skip
        yield Served(
            SourceConfig(kind="feishu", name="leaks", conn_id="feishu_leaks", options=options, batch_size=50), apply
        )


SOURCES = (yuque_source, feishu_source)


def drop_es_index(url: str, alias: str) -> None:
    """Remove what the test wrote to a real server."""
    from elasticsearch import Elasticsearch

    from include.index._es_mapping import physical_index_pattern, template_name

    admin = Elasticsearch(url)
    try:
        admin.options(ignore_status=404).indices.delete(index=physical_index_pattern(alias))
        admin.options(ignore_status=404).indices.delete_index_template(name=template_name(alias))
    finally:
        admin.close()
