"""The pure parts behind issue 19's web fixes: which origins get credentials, and the
layer-by-layer capped decoder (the end-to-end cases are in ``test_hostile_network``)."""

from __future__ import annotations

import gzip
import zlib

import pytest

from plugins.connectors.web.auth import Credentials, CredentialScope
from plugins.connectors.web.decoding import (
    BodyTooLarge,
    CappedDecoder,
    UndecodableBody,
    UnsupportedEncoding,
    content_codings,
)


def test_credential_scope_admits_the_sources_origins_only() -> None:
    host_scope = CredentialScope(["https://docs.example.com/", "http://intra.example.com:8080/"])
    assert host_scope.admits("https://docs.example.com/a")
    assert not host_scope.admits("http://docs.example.com/a")  # downgrade
    assert not host_scope.admits("https://docs.example.com:8443/a")  # another port, another service
    assert not host_scope.admits("https://evil.example.net/robots.txt")
    assert host_scope.admits("http://intra.example.com:8080/x")
    assert host_scope.admits("https://intra.example.com/x")  # an upgrade keeps them
    assert not host_scope.admits("http://intra.example.com:9090/x")
    domain_scope = CredentialScope(["https://docs.example.com/"], "domain")
    assert domain_scope.admits("https://wiki.example.com/")
    assert not domain_scope.admits("http://wiki.example.com/")
    assert not domain_scope.admits("https://example.org/")


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
