"""Response bodies read as streams, decoded and capped on every layer (shared by every connector).

httpx inflates each network chunk completely before the caller sees it, so with
``Content-Encoding: gzip, gzip`` one 10 KB chunk becomes gigabytes before any cap can count
it. Here the raw bytes are read (``iter_raw``) and every layer is inflated in steps of at most
``step`` bytes (zlib ``decompressobj`` with ``max_length``), each step handed to the next layer
and counted at once: no layer ever holds more than one step, and the decoded body is refused
as soon as it passes the limit. :func:`read_capped` / :func:`aread_capped` do that for a
streamed httpx response; a client sends :data:`ACCEPT_ENCODING`, the codings decoded here.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import httpx

__all__ = [
    "ACCEPT_ENCODING",
    "BodyTooLarge",
    "CappedDecoder",
    "UndecodableBody",
    "UnsupportedEncoding",
    "aread_capped",
    "content_codings",
    "read_capped",
]

# The codings CappedDecoder inflates in bounded steps; asking for no others means no others
# come (RFC 9110 section 12.5.3), and one that comes anyway is refused (UnsupportedEncoding).
ACCEPT_ENCODING = "gzip, deflate"

_STEP = 64 * 1024
# Codings we have no bounded decoder for (httpx leaves them to optional packages).
_UNSUPPORTED = frozenset({"br", "zstd", "compress", "x-compress"})


class BodyTooLarge(Exception):
    """A layer (the wire, an intermediate coding or the decoded body) passed its cap."""


class UnsupportedEncoding(Exception):
    """A compressing content-coding we cannot decode within bounds."""


class UndecodableBody(Exception):
    """The body is not valid for its declared content-coding."""


def content_codings(header: str | None) -> list[str]:
    """The codings of a ``Content-Encoding`` header, in the order the server applied them
    (RFC 9110 section 8.4); ``identity`` and unknown tokens are no coding at all, as in httpx."""
    codings = []
    for token in (header or "").split(","):
        token = token.strip().lower()
        if token in _UNSUPPORTED:
            raise UnsupportedEncoding(f"content-coding {token!r} is not supported")
        if token in ("gzip", "x-gzip", "deflate"):
            codings.append(token)
    return codings


class _ZlibLayer:
    """One gzip / deflate layer. ``deflate`` is the zlib format (RFC 9110 8.4.1.2), but some
    servers send raw deflate: the first failure switches to it, as httpx does."""

    def __init__(self, coding: str) -> None:
        self._raw_fallback = coding == "deflate"
        wbits = zlib.MAX_WBITS if coding == "deflate" else zlib.MAX_WBITS | 16
        self._inflate = zlib.decompressobj(wbits)
        self._started = False

    def step(self, data: bytes, max_length: int) -> tuple[bytes, bytes]:
        """Up to ``max_length`` output bytes from ``data``; returns (output, input left over)."""
        if self._inflate.eof:
            return b"", b""  # trailing bytes after the stream end are ignored, as in httpx
        try:
            out = self._inflate.decompress(data, max_length)
        except zlib.error as exc:
            if not (self._raw_fallback and not self._started):
                raise UndecodableBody(f"invalid compressed body: {exc}") from exc
            self._raw_fallback = False
            self._inflate = zlib.decompressobj(-zlib.MAX_WBITS)
            return self.step(data, max_length)
        self._started = True
        return out, self._inflate.unconsumed_tail

    def finished(self) -> bool:
        return self._inflate.eof


class CappedDecoder:
    """Decode a body's content-codings with ``limit`` bytes at most after the last layer.

    The wire bytes and each intermediate layer are capped too (at the limit plus the few
    percent a compressor may add to incompressible data): a layer of empty deflate blocks
    would otherwise spin for minutes without producing a byte the final cap could count.
    """

    def __init__(self, codings: list[str], limit: int, on_chunk: Callable[[bytes], None] | None = None) -> None:
        # Applied in header order, so decoded in reverse.
        self._layers = [_ZlibLayer(c) for c in reversed(codings)]
        self._limit = limit
        self._slack_limit = limit + limit // 50 + 4096
        self._sizes = [0] * (len(self._layers) + 1)  # input bytes seen by each layer, then output
        self._chunks: list[bytes] = []
        self._on_chunk = on_chunk

    def feed(self, data: bytes) -> None:
        """Decode a chunk of wire bytes; raises BodyTooLarge / UndecodableBody."""
        self._push(0, data)

    def body(self) -> bytes:
        """The decoded body; a compressed stream that stopped before its end is an error (a
        truncated download must not be indexed as a short page)."""
        if self._layers and not self._layers[0].finished() and self._sizes[0]:
            raise UndecodableBody("compressed body ended before the end of its stream")
        return b"".join(self._chunks)

    def _count(self, index: int, size: int) -> None:
        self._sizes[index] += size
        cap = self._limit if index == len(self._layers) else self._slack_limit
        if self._sizes[index] > cap:
            what = "decoded body" if index == len(self._layers) else ("raw body" if index == 0 else f"layer {index}")
            raise BodyTooLarge(f"{what} over the {self._limit}-byte limit")

    def _push(self, index: int, data: bytes) -> None:
        self._count(index, len(data))
        if index == len(self._layers):
            self._chunks.append(data)
            return
        layer = self._layers[index]
        while True:
            # Never more than what the final cap still allows (plus one byte to see it pass).
            room = min(_STEP, max(1, self._limit - self._sizes[-1] + 1))
            out, data = layer.step(data, room)
            if out:
                self._push(index + 1, out)
            if not data and len(out) < room:
                return


def _decoder_for(response: httpx.Response, limit: int) -> CappedDecoder:
    """A decoder for ``response``'s codings; refuses at once a plain body whose Content-Length
    already says it is over ``limit`` (a compressed one is judged by its decoded size)."""
    declared = response.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit and "content-encoding" not in response.headers:
        raise BodyTooLarge(f"Content-Length {declared} over the {limit}-byte limit")
    return CappedDecoder(content_codings(response.headers.get("content-encoding")), limit)


def read_capped(response: httpx.Response, limit: int) -> bytes:
    """The decoded body of a streamed ``response`` (``client.stream(...)``), at most ``limit``
    bytes; raises BodyTooLarge / UnsupportedEncoding / UndecodableBody."""
    decoder = _decoder_for(response, limit)
    # Raw bytes: httpx would inflate a whole network chunk (every layer) before we could count it.
    for chunk in response.iter_raw():
        decoder.feed(chunk)
    return decoder.body()


async def aread_capped(response: httpx.Response, limit: int) -> bytes:
    """:func:`read_capped` for an ``httpx.AsyncClient`` stream."""
    decoder = _decoder_for(response, limit)
    async for chunk in response.aiter_raw():
        decoder.feed(chunk)
    return decoder.body()
