"""A sync httpx transport that connects only to checked addresses, within one deadline per request.

*Deadline.* httpx's timeouts are per socket operation: a server sending one byte every 1.5 s
never trips a 2 s read timeout, so headers or a body can trickle for as long as the server
likes. The async clients cut that with ``asyncio.timeout`` (the web fetcher); a sync client has
no such cancellation, so here every socket operation of a request (connect, TLS handshake,
each write and read) is given at most the time left until the request's deadline
(:class:`RequestDeadline`), and one that starts past it is a timeout at once: the request ends
at its deadline whatever the server does (a stalled DNS lookup is the resolver's to bound).

*Pinning.* The same network backend resolves the host itself, hands every address to a check
(which raises :class:`~include.addresses.BlockedAddress`) before any socket is opened, and
connects to an address it checked, so a DNS answer that changes between check and connect
(rebinding) cannot slip through. TLS still verifies the certificate against the URL's host
name (httpcore hands it to the stream as ``server_hostname``).

httpcore's network backends are its extension point for this
(https://www.encode.io/httpcore/network-backends/); httpx takes no backend parameter, so
:func:`guarded_transport` gives an ``httpx.HTTPTransport`` a pool built with one.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

from include.addresses import IPAddress

__all__ = ["AddressCheck", "RequestDeadline", "checked_addresses", "guarded_transport"]

AddressCheck = Callable[[str, IPAddress], None]  # (host, address): raises BlockedAddress


class RequestDeadline:
    """The end of the request the current thread is making (threads may share a client's
    connection pool; each request has its own deadline)."""

    def __init__(self) -> None:
        self._local = threading.local()

    @contextmanager
    def within(self, seconds: float) -> Iterator[None]:
        """Socket operations in this block end by ``seconds`` from now (or by an enclosing
        block's earlier deadline)."""
        outer: float | None = getattr(self._local, "at", None)
        at = time.monotonic() + seconds
        self._local.at = at if outer is None else min(at, outer)
        try:
            yield
        finally:
            self._local.at = outer

    def clamp(self, timeout: float | None, expired: type[httpcore.TimeoutException]) -> float | None:
        """``timeout`` cut to the time left; ``expired`` raised when none is left."""
        at: float | None = getattr(self._local, "at", None)
        if at is None:
            return timeout
        left = at - time.monotonic()
        if left <= 0:
            raise expired("the request's deadline has passed")
        return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, deadline: RequestDeadline) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._deadline.clamp(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._deadline.clamp(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        handshake = self._deadline.clamp(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, handshake), self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


def checked_addresses(host: str, port: int, check: AddressCheck) -> list[str]:
    """Every address ``host`` resolves to, each passed through ``check`` (none is connected to
    before all are checked); raises BlockedAddress, or httpcore.ConnectError when unresolvable."""
    name = host.strip("[]")
    try:
        literal: IPAddress | None = ipaddress.ip_address(name.split("%")[0])
    except ValueError:
        literal = None
    if literal is not None:
        check(host, literal)
        return [name]
    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    for address in addresses:
        check(host, ipaddress.ip_address(address.split("%")[0]))
    return addresses


class _GuardedBackend(httpcore.NetworkBackend):
    def __init__(self, check: AddressCheck, deadline: RequestDeadline) -> None:
        self._check = check
        self._deadline = deadline
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = checked_addresses(host, port, self._check)
        # the next address when one does not answer (e.g. localhost's ::1 with an IPv4 server)
        for number, address in enumerate(addresses):
            try:
                budget = self._deadline.clamp(timeout, httpcore.ConnectTimeout)
                stream = self._inner.connect_tcp(address, port, budget, local_address, socket_options)
                return _DeadlineStream(stream, self._deadline)
            except httpcore.ConnectError:
                if number == len(addresses) - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("no Unix sockets: every connection goes to a checked address")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def guarded_transport(
    check: AddressCheck,
    deadline: RequestDeadline,
    *,
    limits: httpx.Limits | None = None,
    verify: ssl.SSLContext | bool = True,
) -> httpx.HTTPTransport:
    """An httpx transport whose every connection is checked and pinned and whose every request
    ends by ``deadline`` (see the module docstring); ``verify``: certifi's CAs, or a context
    trusting another CA."""
    limits = limits or httpx.Limits()
    transport = httpx.HTTPTransport(limits=limits)
    transport._pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(verify=verify),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=_GuardedBackend(check, deadline),
    )
    return transport
