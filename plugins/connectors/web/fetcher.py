"""HTTP fetching: manual redirects, SSRF and scope checks at every hop, size cap, retries.

httpx follows redirects itself only if asked; we never ask, so every hop is checked against
the source's scope and the address guard before a connection is opened. Credentials are
added per request, only for the origins their ``CredentialScope`` admits. The raw body is
streamed and decoded (``include.http_body``), layer by layer in bounded steps, and the download
aborted once the decoded size passes the limit (a gzip-of-gzip bomb is cut too). Retries
(``include.retry``: a 429/503's ``Retry-After``, else exponential backoff with
jitter): network errors, timeouts, 429, 5xx; never other 4xx. One deadline covers all attempts
of a URL, backoff included.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.cookiejar import CookieJar, DefaultCookiePolicy
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

from include.http_body import (
    ACCEPT_ENCODING,
    BodyTooLarge,
    UndecodableBody,
    UnsupportedEncoding,
    aread_capped,
)
from include.retry import RetryPolicy, parse_retry_after
from plugins.connectors.web.auth import Credentials, CredentialScope
from plugins.connectors.web.politeness import LocalPoliteness, Politeness
from plugins.connectors.web.ssrf import AddressGuard, BlockedAddress
from plugins.connectors.web.urls import canonicalize, host_key

__all__ = ["FetchResult", "Fetcher", "FetcherConfig"]

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_RETRY_AFTER_S = 60.0
# A response closed before its end closes its connection too (httpcore cannot reuse it): a body
# we do not want (a 304's none, a redirect's or error page's few bytes) is read to the end when
# it is this small, so the next request reuses the connection instead of opening one.
_DRAIN_LIMIT = 64 * 1024


@dataclass(slots=True)
class FetcherConfig:
    user_agent: str
    timeout_seconds: float = 30.0
    total_timeout_seconds: float = 120.0
    max_body_bytes: int = 20 * 1024 * 1024
    max_redirects: int = 5
    retries: int = 3
    backoff_seconds: float = 1.0
    max_backoff_seconds: float = 30.0
    headers: dict[str, str] = field(default_factory=dict)
    cookies: dict[str, str] = field(default_factory=dict)
    auth: tuple[str, str] | None = None
    # Origins that get headers / cookies / auth; None sends them nowhere.
    credential_scope: CredentialScope | None = None
    # TLS verification: True checks against certifi's CAs; a context trusts another CA (an
    # intranet's, or a test server's self-signed certificate). Never False in a source.
    verify: ssl.SSLContext | bool = True


@dataclass(slots=True)
class FetchResult:
    """Outcome of fetching one URL (after redirects and retries).

    ``error`` names the failure kind (``timeout``, ``connect``, ``http_503``, ``too_large``,
    ``blocked_address``, ``redirect_out_of_scope``, ``redirect_downgrade`` (https to http),
    ``too_many_redirects`` ...) when no usable response was obtained; ``skipped`` is set when
    the response was refused on purpose (``type``: unwanted content type, body not downloaded).
    """

    requested: str
    url: str
    status: int = 0
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    redirects: list[str] = field(default_factory=list)
    wire_bytes: int = 0
    attempts: int = 0
    error: str | None = None
    message: str | None = None
    skipped: str | None = None

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


class _Retryable(Exception):
    def __init__(self, kind: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after = retry_after


class _Deadline:
    """One URL's wall-clock budget (``total_timeout_seconds``) across attempts and backoff.

    Time spent queueing for the host's politeness slot is given back: it is our own spacing,
    not the server's slowness."""

    def __init__(self, seconds: float) -> None:
        self._loop = asyncio.get_running_loop()
        self.at = self._loop.time() + seconds

    def remaining(self) -> float:
        return self.at - self._loop.time()

    def extend(self, seconds: float) -> None:
        self.at += seconds


class _Final(Exception):
    """A failure retrying cannot fix (blocked address, redirect loop, body too large)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


async def _check_location(response: httpx.Response) -> None:
    """httpx parses a redirect's ``Location`` even when not following it, and reports one it
    cannot parse (``http://0127.0.0.1/``: leading zeros) as a RemoteProtocolError, a network
    error we would retry forever. A Location that no client can follow is a permanent answer."""
    if response.has_redirect_location:
        location = response.headers["location"]
        try:
            httpx.URL(location)
        except httpx.InvalidURL as exc:
            raise _Final("bad_redirect", f"redirect to unusable {location!r}: {exc}") from exc


class Fetcher:
    """One per crawl; share it between the crawl's worker tasks."""

    def __init__(
        self,
        config: FetcherConfig,
        guard: AddressGuard,
        politeness: Politeness | None = None,
        delay_for: Callable[[str], float] = lambda host: 0.0,
    ) -> None:
        self.config = config
        self.guard = guard
        self.politeness: Politeness = politeness or LocalPoliteness()
        self.delay_for = delay_for
        self.retries = 0
        self.retry_stats: Counter[str] = Counter()  # retry/web/<event>, over every URL
        self.credentials = Credentials(config.headers, config.cookies, config.auth, config.credential_scope)
        self._client = httpx.AsyncClient(
            # Only what every host may see; credentials are added per request (_pinned_request).
            headers={"User-Agent": config.user_agent, "Accept-Encoding": ACCEPT_ENCODING},
            # No cookie jar: requests go to pinned IP addresses, so a jar would file a site's
            # cookies under its IP and hand them to any other host behind that address.
            cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
            timeout=httpx.Timeout(config.timeout_seconds),
            verify=config.verify,
            follow_redirects=False,
            trust_env=False,  # proxies from the environment would bypass the address guard
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
            event_hooks={"response": [_check_location]},
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def fetch(
        self,
        url: str,
        *,
        conditional: Callable[[str], Mapping[str, str]] = lambda url: {},
        hop_allowed: Callable[[str], str | None] = lambda url: None,
        accept: Callable[[str, str], bool] = lambda url, content_type: True,
    ) -> FetchResult:
        """Fetch ``url`` (canonical). ``conditional(hop_url)`` gives validator headers for a
        hop, ``hop_allowed(hop_url)`` returns a refusal reason for a redirect target, and
        ``accept(url, content_type)`` decides whether a 2xx body is worth downloading."""
        result = FetchResult(requested=url, url=url)
        deadline = _Deadline(self.config.total_timeout_seconds)
        retrying = self._policy(deadline).async_retrying()
        try:
            async for attempt in retrying:
                with attempt:
                    result.attempts += 1
                    if result.attempts > 1:
                        self.retries += 1
                    await self._fetch_once(result, deadline, conditional, hop_allowed, accept)
        except _Retryable as exc:
            result.error, result.message = exc.kind, str(exc)
        except _Final as exc:
            result.error, result.message = exc.kind, str(exc)
        except BlockedAddress as exc:
            result.error, result.message = "blocked_address", str(exc)
        except (TimeoutError, httpx.TimeoutException) as exc:
            result.error, result.message = "timeout", f"{type(exc).__name__}: {exc}"
        except httpx.TransportError as exc:
            kind = "connect" if isinstance(exc, httpx.ConnectError) else "network"
            result.error, result.message = kind, f"{type(exc).__name__}: {exc}"
        except httpx.HTTPError as exc:  # undecodable body (bad gzip), invalid URL ...
            result.error, result.message = "protocol", f"{type(exc).__name__}: {exc}"
        except OSError as exc:  # name resolution
            result.error, result.message = "dns", str(exc)
        return result

    def _policy(self, deadline: _Deadline) -> RetryPolicy:
        return RetryPolicy(
            "web",
            retry_on=lambda exc: isinstance(exc, _Retryable | httpx.TransportError | TimeoutError),
            max_attempts=self.config.retries + 1,
            backoff_initial=self.config.backoff_seconds,
            backoff_max=self.config.max_backoff_seconds,
            jitter=self.config.backoff_seconds / 2,
            # A 429/503's Retry-After is waited here too (the politeness layer holds the host
            # until then): this URL's attempts do not queue ahead of the host's slot.
            max_retry_after=_MAX_RETRY_AFTER_S,
            # one budget for all attempts of the URL, minus the time queued for the host's slot
            deadline=deadline.remaining,
            stats=self.retry_stats,
        )

    async def _fetch_once(
        self,
        result: FetchResult,
        deadline: _Deadline,
        conditional: Callable[[str], Mapping[str, str]],
        hop_allowed: Callable[[str], str | None],
        accept: Callable[[str, str], bool],
    ) -> None:
        current = result.requested
        result.redirects = []
        while True:
            host = host_key(current)
            queued = asyncio.get_running_loop().time()
            async with self.politeness.slot(host, self.delay_for(host), self.config.total_timeout_seconds):
                # Waiting for the host's slot is not part of the URL's time budget.
                deadline.extend(asyncio.get_running_loop().time() - queued)
                async with asyncio.timeout_at(deadline.at):
                    target = await self._hop(result, current, conditional, hop_allowed, accept)
            if target is None:
                return
            current = target

    async def _hop(
        self,
        result: FetchResult,
        current: str,
        conditional: Callable[[str], Mapping[str, str]],
        hop_allowed: Callable[[str], str | None],
        accept: Callable[[str, str], bool],
    ) -> str | None:
        """One request; returns the redirect target to follow, or None when done."""
        response = await self._send(current, conditional(current))
        try:
            status = response.status_code
            if status in _REDIRECTS and "location" in response.headers:
                result.wire_bytes += response.num_bytes_downloaded
                target = self._redirect_target(current, response.headers["location"])
                if len(result.redirects) >= self.config.max_redirects:
                    raise _Final("too_many_redirects", f"more than {self.config.max_redirects} redirects")
                refusal = hop_allowed(target)
                if refusal:
                    raise _Final(refusal, f"redirect from {current} to {target} refused: {refusal}")
                result.redirects.append(target)
                return target
            result.url, result.status = current, status
            result.headers = {k.lower(): v for k, v in response.headers.items()}
            if status == 429 or status == 503:
                retry_after = parse_retry_after(response.headers.get("retry-after"), cap=_MAX_RETRY_AFTER_S)
                host = host_key(current)
                await self.politeness.penalize(host, retry_after, self.delay_for(host))
                raise _Retryable(f"http_{status}", f"HTTP {status} from {current}", retry_after)
            if status >= 500:
                raise _Retryable(f"http_{status}", f"HTTP {status} from {current}")
            if 200 <= status < 300:
                if not accept(current, response.headers.get("content-type", "")):
                    result.skipped = "type"
                    return None
                result.body = await self._read_capped(response)
            result.wire_bytes += response.num_bytes_downloaded
            return None
        finally:
            await _drain(response)
            await response.aclose()

    @staticmethod
    def _redirect_target(current: str, location: str) -> str:
        try:
            return canonicalize(urljoin(current, location))
        except ValueError as exc:
            raise _Final("bad_redirect", f"redirect from {current} to unusable {location!r}") from exc

    async def _send(self, url: str, extra_headers: Mapping[str, str]) -> httpx.Response:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        hostname = parts.hostname or ""
        addresses = await self.guard.resolve(hostname, port)
        # Connect to an address we checked, not to whatever DNS says a moment later; try the
        # next one when an address does not answer (e.g. localhost's ::1 with an IPv4 server).
        for number, address in enumerate(addresses):
            request = self._pinned_request(url, hostname, address, extra_headers)
            try:
                return await self._client.send(request, stream=True)
            except httpx.ConnectError:
                if number == len(addresses) - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _pinned_request(self, url: str, hostname: str, address: str, extra_headers: Mapping[str, str]) -> httpx.Request:
        parts = urlsplit(url)
        headers = {**extra_headers, **self.credentials.headers_for(url)}
        extensions: dict[str, str] = {}
        target = url
        if address != hostname.strip("[]"):
            ip_host = f"[{address}]" if ":" in address else address
            netloc = ip_host if parts.port is None else f"{ip_host}:{parts.port}"
            target = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
            headers["Host"] = parts.netloc
            if parts.scheme == "https":
                extensions["sni_hostname"] = hostname
        return self._client.build_request("GET", target, headers=headers, extensions=extensions)

    async def _read_capped(self, response: httpx.Response) -> bytes:
        try:
            return await aread_capped(response, self.config.max_body_bytes)
        except BodyTooLarge as exc:
            raise _Final("too_large", str(exc)) from exc
        except UnsupportedEncoding as exc:
            raise _Final("unsupported_encoding", str(exc)) from exc
        except UndecodableBody as exc:
            raise _Final("protocol", str(exc)) from exc


async def _drain(response: httpx.Response) -> None:
    """Read an unread small body to its end (see ``_DRAIN_LIMIT``); a large or unknown-length one
    is left for ``aclose`` to cut, connection and all. Errors are the close's business."""
    if response.is_stream_consumed or response.is_closed:
        return
    length = response.headers.get("content-length")
    no_body = response.status_code in (204, 304) or 100 <= response.status_code < 200
    if not no_body and (length is None or not length.isdigit() or int(length) > _DRAIN_LIMIT):
        return
    try:
        async for _ in response.aiter_raw():
            pass
    except httpx.HTTPError:
        pass
