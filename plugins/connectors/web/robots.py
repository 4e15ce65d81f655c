"""robots.txt per RFC 9309, cached per host for one crawl.

- 2xx: parsed with Protego (user-agent groups, ``*`` and ``$`` wildcards, longest match wins).
- 4xx ("unavailable"): everything allowed.
- 5xx or unreachable ("unreachable"): everything *disallowed* for that host until it can be
  read (the seed crawler allowed everything here, which ignores a site that is struggling).
- A redirect chain that cannot be followed (too long, or to an address or URL we refuse):
  "unavailable", as RFC 9309 2.3.1.2 says for more than five redirects.
- ``Crawl-delay`` raises the host's delay (capped at 60 s); ``Sitemap:`` lines are returned.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from protego import Protego

__all__ = ["HostRobots", "RobotsCache", "RobotsUnavailable"]

MAX_CRAWL_DELAY_S = 60.0
_MAX_ROBOTS_BYTES = 500 * 1024  # RFC 9309 asks parsers to read at least 500 KiB


@dataclass(slots=True)
class HostRobots:
    status: str  # "parsed", "unavailable" (4xx: allow all), "unreachable" (5xx/network: deny all)
    parser: Protego | None = None
    crawl_delay: float | None = None
    sitemaps: list[str] = field(default_factory=list)
    detail: str | None = None

    def allows(self, url: str, agent: str) -> bool:
        if self.status == "unreachable":
            return False
        if self.parser is None:
            return True
        return bool(self.parser.can_fetch(url, agent))


class RobotsUnavailable(Exception):
    """Raised by a loader when robots.txt is, per RFC 9309, unavailable without a 4xx."""


# (url) -> (status code or 0 for no response, body, error detail)
RobotsLoader = Callable[[str], Awaitable[tuple[int, bytes, str | None]]]


class RobotsCache:
    def __init__(self, loader: RobotsLoader, agent: str) -> None:
        self._loader = loader
        self.agent = agent
        self._hosts: dict[str, HostRobots] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def for_url(self, url: str) -> HostRobots:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        if origin in self._hosts:
            return self._hosts[origin]
        lock = self._locks.setdefault(origin, asyncio.Lock())
        async with lock:  # one robots.txt request per host, however many workers ask
            if origin not in self._hosts:
                self._hosts[origin] = await self._load(origin)
        return self._hosts[origin]

    def cached_for(self, url: str) -> HostRobots | None:
        """The rules for ``url``'s host if already loaded (no I/O), else None."""
        parts = urlsplit(url)
        return self._hosts.get(f"{parts.scheme}://{parts.netloc}")

    def loaded(self) -> dict[str, HostRobots]:
        return dict(self._hosts)

    async def _load(self, origin: str) -> HostRobots:
        try:
            status, body, detail = await self._loader(f"{origin}/robots.txt")
        except RobotsUnavailable as exc:
            return HostRobots(status="unavailable", detail=str(exc))
        if 200 <= status < 300:
            text = body[:_MAX_ROBOTS_BYTES].decode("utf-8", errors="replace")
            parser = Protego.parse(text)
            delay = parser.crawl_delay(self.agent)
            return HostRobots(
                status="parsed",
                parser=parser,
                crawl_delay=min(float(delay), MAX_CRAWL_DELAY_S) if delay is not None else None,
                sitemaps=list(parser.sitemaps),
            )
        if 400 <= status < 500 and status != 429:  # 429 is "come back later", not "no file"
            return HostRobots(status="unavailable", detail=f"HTTP {status}")
        return HostRobots(status="unreachable", detail=detail or f"HTTP {status}")
