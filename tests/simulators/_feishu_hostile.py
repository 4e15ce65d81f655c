"""Hostile answers of the Feishu simulator: bodies a client must cap while it streams them.

:class:`HostileAnswers` (``FeishuSimulator.hostile``) holds the switches, all off by default;
:class:`HostileBodies` is the ASGI middleware that applies them to the routes' own answers:

- ``pad_json = N``: a JSON answer is served padded past N bytes, the padding first (so nothing
  of the real answer is reached before the limit), streamed without a Content-Length;
  ``pad_errors`` pads error answers (status >= 400) too, else only 2xx ones are padded;
  ``pad_gzip`` sends the padded body gzip-compressed (a few KiB on the wire per MiB);
- ``bomb_downloads = N``: a successful file or export download answers N zero bytes as
  ``Content-Encoding: gzip, gzip`` (a gzip of a gzip: 1 GiB is ~2 KiB on the wire);
- ``only``: which request paths (``/open-apis/...``) the switches apply to (all when None).
"""

from __future__ import annotations

import functools
import json
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tests.simulators._yuque_bodies import oversized_json

__all__ = ["HostileAnswers", "HostileBodies", "gzip_layers"]

_STEP = 1 << 20


@dataclass
class HostileAnswers:
    pad_json: int | None = None
    pad_errors: bool = False
    pad_gzip: bool = False
    bomb_downloads: int | None = None
    only: Callable[[str], bool] | None = None
    served: int = 0  # answers made hostile so far

    def applies(self, path: str) -> bool:
        active = self.pad_json is not None or self.bomb_downloads is not None
        return active and (self.only is None or self.only(path))


def _zeros(size: int) -> Iterator[bytes]:
    for sent in range(0, size, _STEP):
        yield bytes(min(_STEP, size - sent))


def gzip_layers(chunks: Iterator[bytes], layers: int) -> Iterator[bytes]:
    """``chunks`` gzip-compressed ``layers`` times over (RFC 1952 framing), produced as they come."""
    packers = [zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16) for _ in range(layers)]

    def through(data: bytes, first: int) -> bytes:
        for packer in packers[first:]:
            data = packer.compress(data)
        return data

    for chunk in chunks:
        if out := through(chunk, 0):
            yield out
    for index, packer in enumerate(packers):  # an inner layer's end is data for the outer ones
        if out := through(packer.flush(), index + 1):
            yield out


@functools.lru_cache(maxsize=4)
def _bomb(size: int) -> bytes:
    """``size`` zero bytes as gzip of gzip (built once: 1 GiB takes ~3 s to pack)."""
    return b"".join(gzip_layers(_zeros(size), 2))


class HostileBodies:
    """ASGI middleware: runs the route, then serves its answer the hostile way if asked."""

    def __init__(self, app: Any, switches: HostileAnswers) -> None:
        self.app = app
        self.switches = switches

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.switches.applies(scope["path"]):
            await self.app(scope, receive, send)
            return
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, capture)
        status, body = start["status"], b"".join(chunks)
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in (b"content-length", b"content-type")]
        hostile = self._hostile(scope["path"], status, dict(start.get("headers", [])), body)
        if hostile is None:
            await send(start)
            await send({"type": "http.response.body", "body": body})
            return
        self.switches.served += 1
        extra, media, stream = hostile
        await send({**start, "headers": [*headers, *extra, (b"content-type", media)]})
        async for piece in stream:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    def _hostile(
        self, path: str, status: int, headers: dict[bytes, bytes], body: bytes
    ) -> tuple[list[tuple[bytes, bytes]], bytes, AsyncIterator[bytes]] | None:
        sw = self.switches
        if path.endswith("/download") and status == 200 and sw.bomb_downloads is not None:
            media = headers.get(b"content-type", b"application/octet-stream")
            return [(b"content-encoding", b"gzip, gzip")], media, _aiter(iter([_bomb(sw.bomb_downloads)]))
        if (
            sw.pad_json is None
            or b"json" not in headers.get(b"content-type", b"")
            or (status >= 400 and not sw.pad_errors)
        ):
            return None
        padded = oversized_json(json.loads(body), sw.pad_json)
        if sw.pad_gzip:
            return [(b"content-encoding", b"gzip")], b"application/json", _aiter(gzip_layers(padded, 1))
        return [], b"application/json", _aiter(padded)


async def _aiter(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk
