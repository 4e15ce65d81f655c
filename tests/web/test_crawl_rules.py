"""The crawler's pure parts: canonical URLs, scope, trap guards, links, sitemaps, address guard."""

from __future__ import annotations

import asyncio
import gzip
import ipaddress

import pytest

from plugins.connectors.web.links import extract_links
from plugins.connectors.web.sitemap import parse_sitemap
from plugins.connectors.web.ssrf import AddressGuard, BlockedAddress
from plugins.connectors.web.urls import Scope, TrapGuard, canonicalize, registrable_domain, resolve_link


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("HTTP://Example.COM:80/a/b?b=2&a=1#frag", "http://example.com/a/b?a=1&b=2"),
        ("https://example.com:443", "https://example.com/"),
        ("https://example.com:8443/x", "https://example.com:8443/x"),
        ("https://example.com/p?utm_source=x&utm_medium=y&id=3&fbclid=z&gclid=q", "https://example.com/p?id=3"),
        ("https://example.com/p?", "https://example.com/p"),
        ("https://example.com/a/./b/../c", "https://example.com/a/c"),
        ("https://example.com/%7euser/%41", "https://example.com/~user/A"),
        ("https://example.com/a%2Fb", "https://example.com/a%2Fb"),
        ("https://example.com/中文", "https://example.com/%E4%B8%AD%E6%96%87"),
        ("https://bücher.example/", "https://xn--bcher-kva.example/"),
        ("https://example.com/s?q=a b", "https://example.com/s?q=a%20b"),
    ],
)
def test_canonicalize(raw: str, canonical: str) -> None:
    assert canonicalize(raw) == canonical
    assert canonicalize(canonical) == canonical  # idempotent


@pytest.mark.parametrize("bad", ["ftp://example.com/", "mailto:a@b.c", "/relative", "http://"])
def test_canonicalize_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        canonicalize(bad)


def test_resolve_link() -> None:
    base = "https://example.com/docs/guide/index.html"
    assert resolve_link(base, "../api.html#x") == "https://example.com/docs/api.html"
    assert resolve_link(base, "//cdn.example.com/a") == "https://cdn.example.com/a"
    assert resolve_link(base, "?page=2") == "https://example.com/docs/guide/index.html?page=2"
    for skipped in ("#top", "javascript:void(0)", "mailto:x@y", "tel:123", "data:text/plain,x", "  "):
        assert resolve_link(base, skipped) is None


def test_scope_host_and_domain() -> None:
    host = Scope(["https://docs.example.co.uk/"])
    assert host.in_scope("https://docs.example.co.uk/x")
    assert not host.in_scope("https://blog.example.co.uk/x")
    assert not host.in_scope("http://docs.example.co.uk:8080/x")
    assert not host.in_scope("http://docs.example.co.uk/x")  # https seed: plain http is a downgrade
    upgraded = Scope(["http://docs.example.co.uk/"])
    assert upgraded.in_scope("https://docs.example.co.uk/x") and upgraded.in_scope("http://docs.example.co.uk/x")
    domain = Scope(["https://docs.example.co.uk/"], mode="domain")
    assert domain.in_scope("https://blog.example.co.uk/x")
    assert not domain.in_scope("https://other.co.uk/")
    assert domain.refusal("http://blog.example.co.uk/x") == "downgrade"
    assert registrable_domain("a.b.github.io") == "b.github.io"  # a public suffix with private entries
    patterns = Scope(["https://e.com/"], include=[r"/docs/"], exclude=[r"\.pdf$"])
    assert patterns.allowed("https://e.com/docs/a.html")
    assert not patterns.allowed("https://e.com/docs/a.pdf")
    assert not patterns.allowed("https://e.com/blog/")


def test_trap_guard() -> None:
    guard = TrapGuard(max_url_length=100, max_query_params=3, max_segment_repeats=2)
    assert guard.reason("https://e.com/a/b/c") is None
    assert guard.reason("https://e.com/" + "x" * 200) == "url_too_long"
    assert guard.reason("https://e.com/?a=1&b=2&c=3&d=4") == "too_many_query_params"
    assert guard.reason("https://e.com/a/b/a/b/a/") == "repeated_path_segments"


def test_extract_links_canonical_robots_and_base() -> None:
    html = b"""<html><head><base href="/root/"><title> My  Page </title>
    <link rel="canonical" href="https://example.com/canon">
    <meta name="robots" content="noindex, follow"></head>
    <body><nav><a href="nav.html">nav</a></nav><a href="a.html">a</a><a href="a.html#x">dup</a>
    <iframe src="/frame.html"></iframe><a href="mailto:x@y">m</a></body></html>"""
    page = extract_links(html, "https://example.com/page")
    assert page.links == [
        "https://example.com/root/nav.html",
        "https://example.com/root/a.html",
        "https://example.com/frame.html",
    ]
    assert page.canonical == "https://example.com/canon"
    assert page.noindex and not page.nofollow
    assert page.title == "My Page"
    header = extract_links(b"<html><body><a href='x'>x</a></body></html>", "https://e.com/", x_robots_tag="none")
    assert header.noindex and header.nofollow


def test_extract_links_gbk_declared_in_header() -> None:
    html = '<html><body><a href="/路径/页面.html">链接</a></body></html>'.encode("gbk")
    page = extract_links(html, "https://e.com/", "text/html; charset=GBK")
    assert page.links == ["https://e.com/%E8%B7%AF%E5%BE%84/%E9%A1%B5%E9%9D%A2.html"]


SITEMAP = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>https://e.com/old</loc><lastmod>2020-01-01</lastmod></url>
  <url><loc>https://e.com/undated</loc></url>
  <url><loc> https://e.com/new </loc><lastmod>2026-05-01T10:00:00+00:00</lastmod></url>
</urlset>"""


def test_sitemap_urlset_ordered_by_lastmod() -> None:
    pages, children = parse_sitemap(SITEMAP)
    assert [p.loc for p in pages] == ["https://e.com/new", "https://e.com/old", "https://e.com/undated"]
    assert children == []
    gz_pages, _ = parse_sitemap(gzip.compress(SITEMAP))
    assert gz_pages == pages


def test_sitemap_index_and_limits() -> None:
    index = b"""<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
    <sitemap><loc>https://e.com/s1.xml.gz</loc></sitemap></sitemapindex>"""
    pages, children = parse_sitemap(index)
    assert pages == [] and [c.loc for c in children] == ["https://e.com/s1.xml.gz"]
    with pytest.raises(ValueError):
        parse_sitemap(b"<html><body>not a sitemap</body></html>")
    with pytest.raises(ValueError):
        parse_sitemap(gzip.compress(SITEMAP * 100), max_bytes=1000)  # decompression bomb cut


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "::1",
        "fe80::1",
        "fd00::1",
        "::ffff:10.0.0.1",
        "::ffff:127.0.0.1",
        "224.0.0.1",
    ],
)
def test_address_guard_blocks(address: str) -> None:
    with pytest.raises(BlockedAddress):
        AddressGuard().check_ip("h", ipaddress.ip_address(address))


def test_address_guard_allows_public_and_allowlisted() -> None:
    AddressGuard().check_ip("h", ipaddress.ip_address("93.184.216.34"))
    AddressGuard(allow=["127.0.0.1"]).check_ip("h", ipaddress.ip_address("127.0.0.1"))
    AddressGuard(allow=["10.1.0.0/16"]).check_ip("h", ipaddress.ip_address("10.1.2.3"))
    AddressGuard(allow_private=True).check_ip("h", ipaddress.ip_address("192.168.0.10"))
    with pytest.raises(BlockedAddress):  # allow_private never opens the metadata range
        AddressGuard(allow_private=True).check_ip("h", ipaddress.ip_address("169.254.169.254"))


def test_address_guard_resolves_names() -> None:
    with pytest.raises(BlockedAddress):
        asyncio.run(AddressGuard().resolve("localhost", 80))
    with pytest.raises(BlockedAddress):
        asyncio.run(AddressGuard(allow_private=True).resolve("metadata.google.internal", 80))
    assert "127.0.0.1" in asyncio.run(AddressGuard(allow=["127.0.0.1", "::1"]).resolve("localhost", 80))


def test_link_cache(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from plugins.connectors.web.cache import CachedPage, LinkCache

    cache = LinkCache(tmp_path / "c.sqlite")
    cache.put(CachedPage("https://e.com/a", "https://e.com/a", '"v1"', None, "text/html", ["https://e.com/b"]))
    cache.put(CachedPage("https://e.com/b", "https://e.com/b", None, "Mon, 01 Jan 2024 00:00:00 GMT", "text/html"))
    cache.close()
    cache = LinkCache(tmp_path / "c.sqlite")  # persisted
    page = cache.get("https://e.com/a")
    assert page is not None and page.links == ["https://e.com/b"]
    assert page.matches('"v1"', None) and not page.matches('"v2"', None) and not page.matches(None, None)
    assert cache.retain({"https://e.com/a"}) == 1
    assert cache.get("https://e.com/b") is None
    cache.close()
