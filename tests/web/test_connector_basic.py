"""The web connector against Python's static file server: crawl, no-change recrawl, edit, delete."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from include.contract import ChangeKind
from tests.web.helpers import Run, make_connector, serve_directory


def _site(root: Path) -> None:
    (root / "docs").mkdir(parents=True)
    (root / "index.html").write_text(
        "<html><head><title>Home</title></head><body>"
        '<a href="a.html">A</a> <a href="/docs/b.html#frag">B</a> <a href="?utm_source=x">self</a>'
        '<a href="https://elsewhere.example/">out</a> <a href="mailto:x@y">mail</a></body></html>'
    )
    (root / "a.html").write_text('<html><body><p>Alpha page</p><a href="/">home</a></body></html>')
    (root / "docs" / "b.html").write_text('<html><body><p>Beta</p><a href="../docs/c.html">C</a></body></html>')
    (root / "docs" / "c.html").write_text("<html><body><p>Gamma</p></body></html>")


@pytest.fixture
def site(tmp_path: Path):
    root = tmp_path / "www"
    _site(root)
    with serve_directory(root) as base:
        yield root, base


def test_crawl_recrawl_edit_delete(site, tributary_home: Path, tmp_path: Path) -> None:
    root, base = site
    connector = make_connector(seeds=[base + "/"])
    expected = {f"{base}/", f"{base}/a.html", f"{base}/docs/b.html", f"{base}/docs/c.html"}

    first = Run(connector, tmp_path / "s1")
    assert first.keys(ChangeKind.NEW) == expected
    assert first.discovery.complete
    assert first.discovery.all_keys == expected
    assert first.discovery.stats["fetched"] == 4
    assert first.discovery.stats["skipped_scope"] == 1
    home = next(c for c in first.changes if c.item_key == f"{base}/")
    assert home.title == "Home"
    assert home.version.last_modified
    raw = connector.fetch(home)
    assert b"Home" in raw.data
    assert raw.file_name == "index.html"
    assert raw.media_type.startswith("text/html")

    # No change: every page answers 304 and the link cache carries the crawl through the site.
    second = Run(connector, tmp_path / "s2", first.known())
    assert second.keys(ChangeKind.UNCHANGED) == expected
    assert second.discovery.stats["fetched"] == 0
    assert second.discovery.stats["not_modified"] == 4
    assert second.discovery.complete and second.discovery.all_keys == expected
    assert all(c.staged_path is None for c in second.changes)

    # Edit one page (a later mtime: the server's validator has one-second resolution).
    page = root / "docs" / "c.html"
    page.write_text("<html><body><p>Gamma, edited</p></body></html>")
    later = time.time() + 5
    os.utime(page, (later, later))
    third = Run(connector, tmp_path / "s3", second.known())
    assert third.keys(ChangeKind.CHANGED) == {f"{base}/docs/c.html"}
    assert third.keys(ChangeKind.UNCHANGED) == expected - {f"{base}/docs/c.html"}
    changed = next(c for c in third.changes if c.kind == ChangeKind.CHANGED)
    assert b"edited" in connector.fetch(changed).data

    # Remove a page that is still linked: 404 deletes it.
    page.unlink()
    fourth = Run(connector, tmp_path / "s4", third.known())
    assert fourth.keys(ChangeKind.DELETED) == {f"{base}/docs/c.html"}
    assert fourth.discovery.all_keys == expected - {f"{base}/docs/c.html"}


def test_lost_link_cache_still_covers_site(site, tributary_home: Path, tmp_path: Path) -> None:
    """Validators say 304 but the crawler has no links for the page: it re-reads the page."""
    _, base = site
    connector = make_connector(seeds=[base + "/"])
    first = Run(connector, tmp_path / "s1")
    for path in (tributary_home / "web-cache").glob("site.sqlite*"):
        path.unlink()
    second = Run(connector, tmp_path / "s2", first.known())
    assert second.discovery.all_keys == first.discovery.all_keys
    assert second.discovery.complete
    assert second.discovery.stats["refetched_for_links"] == 4


def test_only_keys_fetches_just_those_pages(site, tributary_home: Path, tmp_path: Path) -> None:
    from include.contract import VersionEvidence
    from plugins.connectors.base import DiscoveryRequest

    _, base = site
    connector = make_connector(seeds=[base + "/"])
    found = connector.discover(
        DiscoveryRequest(known={f"{base}/a.html": VersionEvidence(last_modified="x")}, only_keys=[f"{base}/a.html"])
    )
    assert [(c.item_key, c.kind) for c in found.changes] == [(f"{base}/a.html", ChangeKind.CHANGED)]
    assert found.complete is False
