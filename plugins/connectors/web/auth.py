"""Which requests carry a web source's credentials, and what they carry.

The Airflow Connection's headers, cookies and basic auth belong to the site the source
crawls. They are attached to each request whose URL the ``CredentialScope`` admits, never set
on the HTTP client: a robots.txt or a sitemap that redirects to another host, a hop off the
site, or an https page redirected to plain http must not receive them.

They come from the source's Connection (``conn_id``), read as a ground
:class:`~include.connections.ConnectionRecord`: ``login``/``password`` become HTTP basic auth,
``extra`` may hold ``{"headers": {...}, "cookies": {...}}`` (:func:`credentials_from_conn`).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from include.connections import ConnectionRecord
from plugins.connectors.web.urls import Scope, canonicalize

__all__ = ["CredentialScope", "Credentials", "credentials_from_conn"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(slots=True)
class CredentialScope:
    """The origins (scheme, host, port; RFC 6454) a source's credentials may be sent to.

    Admitted: what the crawl ``Scope`` admits (the one place the host, domain and scheme rules
    live: an https source never sends its credentials in clear text, even to its own host,
    while an upgrade of an http seed keeps them), narrowed to the scheme's default port or a
    seed's port (in ``domain`` mode the crawl takes any port of the domain; another port is
    another service, which gets the pages' links followed but not the source's secrets).
    """

    seeds: Iterable[str]
    mode: str = "host"
    _scope: Scope = field(init=False)
    _ports: dict[str, set[int]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        seeds = [url for url in map(_canonical, self.seeds) if url is not None]
        self._scope = Scope(seeds, self.mode)
        for seed in seeds:
            self._ports.setdefault(self._scope.key(seed), set()).add(_port(seed))

    def admits(self, url: str) -> bool:
        canonical = _canonical(url)
        if canonical is None or not self._scope.in_scope(canonical):
            return False
        port = _port(canonical)
        return port == _DEFAULT_PORTS[urlsplit(canonical).scheme] or port in self._ports[self._scope.key(canonical)]


def _canonical(url: str) -> str | None:
    try:
        return canonicalize(url)
    except ValueError:  # not http(s), no host, a port out of range
        return None


def _port(canonical: str) -> int:
    parts = urlsplit(canonical)
    return parts.port or _DEFAULT_PORTS[parts.scheme]


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


def credentials_from_conn(conn: ConnectionRecord, scope: CredentialScope | None = None) -> Credentials:
    """A web Connection's headers, cookies and basic auth, to be sent where ``scope`` admits."""
    headers = {str(k): str(v) for k, v in (conn.extra.get("headers") or {}).items()}
    cookies = {str(k): str(v) for k, v in (conn.extra.get("cookies") or {}).items()}
    auth = (conn.login, conn.password or "") if conn.login else None
    return Credentials(headers, cookies, auth, scope)
