"""Which requests carry a web source's credentials, and what they carry.

The Airflow Connection's headers, cookies and basic auth belong to the site the source
crawls. They are attached to each request whose URL the ``CredentialScope`` admits, never set
on the HTTP client: a robots.txt or a sitemap that redirects to another host, a hop off the
site, or an https page redirected to plain http must not receive them.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from plugins.connectors.web.urls import registrable_domain

__all__ = ["CredentialScope", "Credentials"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(slots=True)
class CredentialScope:
    """The origins (scheme, host, port; RFC 6454) a source's credentials may be sent to.

    Admitted: the seeds' origins, and the hosts the crawl scope admits (``host``: the seeds'
    hosts; ``domain``: their registrable domains) on the scheme's default port or a seed's
    port. Plain http only where a seed itself is plain http: an https source never sends its
    credentials in clear text, even to its own host (a downgrade is a different origin).
    """

    seeds: Iterable[str]
    mode: str = "host"
    _ports: dict[str, set[int]] = field(init=False, default_factory=dict)
    _plain: set[str] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        for seed in self.seeds:
            origin = _origin(seed)
            if origin is None:
                continue
            scheme, host, port = origin
            key = self._key(host)
            self._ports.setdefault(key, set()).add(port)
            if scheme == "http":
                self._plain.add(key)

    def _key(self, host: str) -> str:
        return registrable_domain(host) if self.mode == "domain" else host

    def admits(self, url: str) -> bool:
        origin = _origin(url)
        if origin is None:
            return False
        scheme, host, port = origin
        key = self._key(host)
        ports = self._ports.get(key)
        if ports is None:
            return False
        if scheme == "http" and key not in self._plain:
            return False
        return port == _DEFAULT_PORTS[scheme] or port in ports


def _origin(url: str) -> tuple[str, str, int] | None:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError:
        return None
    return scheme, parts.hostname.lower().rstrip("."), port


@dataclass(slots=True)
class Credentials:
    """Headers, cookies and basic auth of a source, as request headers for admitted URLs."""

    headers: Mapping[str, str] = field(default_factory=dict)
    cookies: Mapping[str, str] = field(default_factory=dict)
    auth: tuple[str, str] | None = None
    scope: CredentialScope | None = None  # None: sent nowhere (fail closed)
    _headers: dict[str, str] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._headers = dict(self.headers)
        if self.cookies:
            self._headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        if self.auth:
            token = base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode("ascii")
            self._headers["Authorization"] = f"Basic {token}"

    def __bool__(self) -> bool:
        return bool(self._headers)

    def headers_for(self, url: str) -> dict[str, str]:
        """The credential headers to add to a request for ``url`` (empty when not admitted)."""
        if not self._headers or self.scope is None or not self.scope.admits(url):
            return {}
        return dict(self._headers)
