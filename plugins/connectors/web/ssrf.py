"""SSRF guard: never connect to loopback, private, link-local or metadata addresses.

A crawler follows URLs that strangers wrote. A page (or a redirect) pointing at
``http://169.254.169.254/`` or ``http://10.0.0.1/admin`` must not make our worker fetch it.
Every hop's host is resolved and *every* resolved address checked; the fetcher then connects
to the checked address itself (pinning), so a DNS answer that changes between check and
connect (rebinding) cannot slip through.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field

from include.addresses import BlockedAddress, IPAddress, IPNetwork
from include.addresses import unmap as _unmap
from include.addresses import why_blocked as _why_blocked

__all__ = ["AddressGuard", "BlockedAddress"]

# A last label that is a number (decimal, 0x-hex or empty-dotted) makes the host an IPv4
# address to WHATWG URL parsers and to inet_aton, with octal for leading zeros.
_NUMERIC_LAST_LABEL = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)\.?", re.IGNORECASE)
_METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata", "instance-data", "instance-data.ec2.internal"})


def _ambiguous_ipv4(name: str) -> bool:
    """A host that reads as an IPv4 address but not in the one dotted-decimal form Python's
    ``ipaddress`` accepts: ``0127.0.0.1`` is 87.0.0.1 to glibc (octal) and ``127.000.000.001``
    is 127.0.0.1, so no check on the spelling would match what the resolver connects to."""
    last = name.rstrip(".").rsplit(".", 1)[-1]
    return bool(_NUMERIC_LAST_LABEL.fullmatch(last))


@dataclass(slots=True)
class AddressGuard:
    """Resolve a host and check its addresses.

    ``allow`` lists networks (``127.0.0.1``, ``10.1.0.0/16``) or host names that are exempt;
    ``allow_private`` exempts every private/loopback address (an intranet crawl) but never the
    link-local metadata range unless that is listed explicitly.
    """

    allow: Iterable[str] = ()
    allow_private: bool = False
    _nets: list[IPNetwork] = field(init=False, default_factory=list)
    _hosts: set[str] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        for entry in self.allow:
            try:
                self._nets.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                self._hosts.add(entry.lower().rstrip("."))

    def check_ip(self, host: str, ip: IPAddress) -> None:
        if any(_unmap(ip) in net or ip in net for net in self._nets):
            return
        why = _why_blocked(ip)
        if why is None:
            return
        if self.allow_private and why in ("private network", "loopback"):
            return
        raise BlockedAddress(host, str(ip), why)

    async def resolve(self, host: str, port: int) -> list[str]:
        """Addresses to connect to for ``host``, all of them checked; raises BlockedAddress."""
        name = host.strip("[]").lower().rstrip(".")
        if name in _METADATA_HOSTS and name not in self._hosts:
            raise BlockedAddress(host, name, "cloud metadata host name")
        try:
            literal = ipaddress.ip_address(name)
        except ValueError:
            literal = None
        if literal is not None:
            self.check_ip(host, literal)
            return [str(literal)]
        if _ambiguous_ipv4(name):
            # Refused, not resolved: the answer would depend on the resolver's reading.
            raise BlockedAddress(host, name, "non-canonical numeric IPv4 address")
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        if not addresses:
            raise OSError(f"no address for {host}")
        exempt = name in self._hosts
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%")[0])
            if not exempt:
                self.check_ip(host, ip)
        return addresses
