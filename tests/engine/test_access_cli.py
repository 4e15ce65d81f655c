"""The CLI searches as someone (``search --as``, ``--all``) and re-reads permissions
(``permissions SOURCE``), over a real files sync whose ``acl`` block restricts some documents."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plugins.engine.cli import main
from tests.support.airflow import write_sources

PRINCIPALS = """
users:
  alice: {email: Alice@Example.com}
  bob: {email: bob@example.com}
admins: [ops]
groups:
  engineering: [bob]
"""

DOCS = {
    "public/welcome.md": "# Welcome\n\nThe lighthouse keeper greets every visitor.\n",
    "team/plan.md": "# Plan\n\nThe lighthouse lamp is replaced in spring by the team.\n",
    "alice/diary.md": "# Diary\n\nI climbed the lighthouse stairs alone today.\n",
}


def _entry(root: Path, acl: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "files", "name": "keep", "options": {"root": str(root)}, "acl": acl}


ACL: dict[str, Any] = {
    "groups": ["engineering"],  # everything else: the engineering group
    "rules": [{"match": "public/*", "public": True}, {"match": "alice/*", "users": ["alice@example.com"]}],
}


@pytest.fixture(scope="module")
def synced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One sync of three documents for the module's searches (only reads follow)."""
    tmp = tmp_path_factory.mktemp("access_cli")
    with pytest.MonkeyPatch.context() as mp:
        yield _sync(tmp, mp)


def _sync(tmp: Path, mp: pytest.MonkeyPatch) -> Path:
    root = tmp / "docs"
    for key, text in DOCS.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_text(text, encoding="utf-8")
    (tmp / "principals.yaml").write_text(PRINCIPALS, encoding="utf-8")
    mp.setenv("TRIBUTARY_HOME", str(tmp / "home"))
    for var in ("TRIBUTARY_STATE_URL", "TRIBUTARY_INDEX_PATH", "TRIBUTARY_STAGING_DIR", "TRIBUTARY_REDIS_URL"):
        mp.delenv(var, raising=False)
    mp.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp / "s.yaml", [_entry(root, ACL)])))
    mp.setenv("TRIBUTARY_PRINCIPALS", str(tmp / "principals.yaml"))
    assert main(["sync", "files:keep", "--json"]) == 0
    return tmp


def _search(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    capsys.readouterr()
    main(["search", "lighthouse", "-k", "10", *argv, "--json"])
    found: dict[str, Any] = json.loads(capsys.readouterr().out)
    return found


def _keys(found: dict[str, Any]) -> set[str]:
    return {h["url"].rsplit("/docs/", 1)[-1] if h["url"] else h["doc_id"] for h in found["hits"]}


def test_each_searcher_sees_what_the_acl_block_lets_them(synced: Path, capsys: pytest.CaptureFixture[str]) -> None:
    anonymous = _search(capsys)
    assert anonymous["access"] == "anonymous" and _keys(anonymous) == {"public/welcome.md"}
    alice = _search(capsys, "--as", "alice")
    assert alice["access"] == "principal" and alice["as"]["users"] == ["user:email:alice@example.com"]
    assert _keys(alice) == {"public/welcome.md", "alice/diary.md"}
    bob = _search(capsys, "--as", "bob")
    assert bob["as"]["groups"] == ["group:static:engineering"]
    assert _keys(bob) == {"public/welcome.md", "team/plan.md"}
    # an address is an identity even when nobody mapped it; a name with none sees public only
    assert _keys(_search(capsys, "--as", "ALICE@example.com")) == _keys(alice)
    assert _keys(_search(capsys, "--as", "mallory")) == {"public/welcome.md"}


def test_the_human_output_says_as_whom(synced: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["search", "lighthouse", "--as", "bob"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "as bob (mapping: 1 identity, 1 group)"
    assert main(["search", "lighthouse"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "as anonymous: public documents only (--as NAME searches as someone)"
    )
    assert main(["search", "stairs alone", "--as", "mallory"]) == 1  # alice's diary: not for mallory
    assert capsys.readouterr().out.splitlines() == [
        "as mallory (no identity mapped: public documents only)",
        "no hits",
    ]


def test_all_is_unrestricted_and_logged_without_the_query(
    synced: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="plugins.engine.cli"):
        found = _search(capsys, "--all")
    assert found["access"] == "unrestricted" and found["as"] is None
    assert _keys(found) == set(DOCS)
    [record] = [r for r in caplog.records if "unrestricted search" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "OS user" in record.getMessage() and "query of 10 chars" in record.getMessage()
    assert "lighthouse" not in record.getMessage()
    with pytest.raises(SystemExit):  # one or the other
        main(["search", "lighthouse", "--all", "--as", "alice"])


def test_a_broken_principals_file_refuses_the_search(
    synced: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = synced / "bad.yaml"
    bad.write_text("users:\n  alice: {emial: a@example.com}\n", encoding="utf-8")
    monkeypatch.setenv("TRIBUTARY_PRINCIPALS", str(bad))
    capsys.readouterr()
    assert main(["search", "lighthouse", "--as", "alice"]) == 2
    assert "users.alice.emial: unknown key" in capsys.readouterr().err


def test_permissions_rereads_an_edited_acl_block_without_a_resync(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _sync(tmp_path, monkeypatch)
    # the team's plan becomes public in the source entry; no content changed
    edited = {**ACL, "rules": [{"match": "team/*", "public": True}, *ACL["rules"]]}
    write_sources(tmp_path / "s.yaml", [_entry(tmp_path / "docs", edited)])
    capsys.readouterr()
    assert main(["permissions", "files:keep", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    perms = report["permissions"]
    assert (perms["checked"], perms["changed"], perms["unchanged"], perms["unknown"]) == (3, 1, 2, 0)
    assert report["source"] == "files:keep"
    assert _keys(_search(capsys)) == {"public/welcome.md", "team/plan.md"}
    assert main(["permissions", "files:keep"]) == 0  # nothing changed since
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith("files:keep: permissions success, checked 3 in ") and "run permissions__" in text[0]
    assert text[1].startswith("  changed 0  unchanged 3  unknown 0 (private)  requests ")
    assert text[2] == "  groups: none of its own (its acl block's static groups come from the principals file)"


def test_permissions_of_a_public_source_has_nothing_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRIBUTARY_HOME", str(tmp_path / "home"))
    entry = {"kind": "files", "name": "open", "options": {"root": str(tmp_path)}}
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "s.yaml", [entry])))
    capsys.readouterr()
    assert main(["permissions", "files:open"]) == 2
    assert "without an acl block is public" in capsys.readouterr().err


def test_item_says_who_can_see_the_document(synced: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["item", "files:keep", "alice/diary.md"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  who can see: restricted, 1 entry (user:email:alice@example.com)" in lines
    assert main(["item", "files:keep", "public/welcome.md", "--json"]) == 0
    access = json.loads(capsys.readouterr().out)["access"]
    assert (access["visibility"], access["entries"], access["public"]) == ("public", ["public"], True)
