"""The pure parts behind issue 19's web fixes: which origins get credentials, and the
layer-by-layer capped decoder (the end-to-end cases are in ``test_hostile_network``)."""

from __future__ import annotations

import gzip
import zlib

import pytest

from include.http_body import (
    BodyTooLarge,
    CappedDecoder,
    UndecodableBody,
    UnsupportedEncoding,
    content_codings,
)
from plugins.connectors.web.auth import Credentials, CredentialScope
from plugins.connectors.web.urls import Scope, canonicalize


def test_credential_scope_admits_the_sources_origins_only() -> None:
    host_scope = CredentialScope(["https://docs.example.com/", "http://intra.example.com:8080/"])
    assert host_scope.admits("https://docs.example.com/a")
    assert not host_scope.admits("http://docs.example.com/a")  # downgrade
    assert not host_scope.admits("https://docs.example.com:8443/a")  # another port, another service
    assert not host_scope.admits("https://evil.example.net/robots.txt")
    assert host_scope.admits("http://intra.example.com:8080/x")
    assert host_scope.admits("https://intra.example.com:8080/x")  # an upgrade keeps them
    assert not host_scope.admits("https://intra.example.com/x")  # another port: not the crawl's
    assert not host_scope.admits("http://intra.example.com:9090/x")
    assert CredentialScope(["http://wiki.example.com/"]).admits("https://wiki.example.com/x")
    domain_scope = CredentialScope(["https://docs.example.com/"], "domain")
    assert domain_scope.admits("https://wiki.example.com/")
    assert not domain_scope.admits("http://wiki.example.com/")
    assert not domain_scope.admits("https://wiki.example.com:8443/")  # crawled, but no secrets
    assert not domain_scope.admits("https://example.org/")


@pytest.mark.parametrize("mode", ["host", "domain"])
def test_credentials_go_nowhere_the_crawl_scope_refuses(mode: str) -> None:
    # One rule for both (issue 19): before, the crawl scope took http://docs.example.com/ for
    # an https seed while the credential scope refused it.
    seeds = ["https://docs.example.com/", "http://intra.example.net:8080/"]
    crawl, credentials = Scope(seeds, mode), CredentialScope(seeds, mode)
    urls = [
        f"{scheme}://{host}{port}/p"
        for scheme in ("http", "https")
        for host in ("docs.example.com", "wiki.example.com", "intra.example.net", "wiki.example.net", "example.org")
        for port in ("", ":8080", ":8443")
    ]
    for url in map(canonicalize, urls):
        assert not credentials.admits(url) or crawl.in_scope(url), url
    for scope in (crawl, credentials):
        check = scope.in_scope if isinstance(scope, Scope) else scope.admits
        assert check("https://docs.example.com/a")
        assert not check("http://docs.example.com/a")  # a downgrade, for pages and secrets alike
        assert check("https://intra.example.net:8080/a")  # an upgrade
    assert crawl.refusal("http://docs.example.com/a") == "downgrade"
    assert crawl.refusal("https://example.org/") == "out_of_scope"


def _decode(body: bytes, header: str, limit: int = 1 << 20) -> bytes:
    decoder = CappedDecoder(content_codings(header), limit)
    for start in range(0, len(body), 1000):  # in network-sized pieces
        decoder.feed(body[start : start + 1000])
    return decoder.body()


def test_capped_decoder_layers_and_limits() -> None:
    page = b"<html><body>" + b"layered " * 5000 + b"</body></html>"
    assert _decode(gzip.compress(gzip.compress(page)), "gzip, gzip") == page
    assert _decode(zlib.compress(gzip.compress(page)), "gzip, deflate") == page  # decoded in reverse
    raw_deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    assert _decode(raw_deflate.compress(page) + raw_deflate.flush(), "deflate") == page  # the common mistake
    assert _decode(page, "identity") == page
    with pytest.raises(BodyTooLarge):
        _decode(gzip.compress(page), "gzip", limit=len(page) - 1)
    assert _decode(gzip.compress(page), "gzip", limit=len(page)) == page  # exactly the cap is fine
    with pytest.raises(UndecodableBody):  # a stream cut short is not a short page
        _decode(gzip.compress(page)[:-12], "gzip")
    with pytest.raises(UndecodableBody):
        _decode(b"not gzip at all", "gzip")


def test_unsupported_codings_are_refused_and_unknown_tokens_are_identity() -> None:
    with pytest.raises(UnsupportedEncoding):
        content_codings("br")
    assert content_codings("gzip, identity, x-gzip") == ["gzip", "x-gzip"]
    assert content_codings("utf-8") == []  # a broken server's token: no coding, as in httpx


def test_credentials_without_a_scope_go_nowhere() -> None:
    loose = Credentials({"X-Token": "t"}, {"sid": "1"}, ("u", "p"))
    assert loose.headers_for("https://docs.example.com/") == {}
    scoped = Credentials({"X-Token": "t"}, {"sid": "1"}, ("u", "p"), CredentialScope(["https://docs.example.com/"]))
    assert scoped.headers_for("https://docs.example.com/") == {
        "X-Token": "t",
        "Cookie": "sid=1",
        "Authorization": "Basic dTpw",
    }


def test_a_coding_that_inflates_to_nothing_is_still_capped() -> None:
    # Empty stored deflate blocks (RFC 1951 3.2.4): endless input, no output for the final
    # cap to count. The wire (and every intermediate layer) has its own cap.
    nothing = b"\x78\x9c" + b"\x00\x00\x00\xff\xff" * 300_000
    with pytest.raises(BodyTooLarge, match="raw body"):
        _decode(nothing, "deflate", limit=1 << 20)
    with pytest.raises(BodyTooLarge, match="layer 1"):
        _decode(gzip.compress(nothing), "deflate, gzip", limit=1 << 20)
