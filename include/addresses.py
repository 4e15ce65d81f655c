"""Which IP addresses a worker must not connect to on a stranger's say-so (pure, no I/O).

Shared by the web crawler's SSRF guard (:mod:`plugins.connectors.web.ssrf`: no loopback,
private, link-local or metadata address) and the embedding endpoint's check
(:mod:`plugins.embedders.openai`: no link-local, metadata or non-unicast address), each with
its own policy over the same classification. :class:`BlockedAddress` is the refusal both raise.
"""

from __future__ import annotations

import ipaddress

__all__ = [
    "ALWAYS_BLOCKED",
    "METADATA_ADDRESSES",
    "BlockedAddress",
    "IPAddress",
    "IPNetwork",
    "is_metadata",
    "unmap",
    "why_blocked",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Not all of these are flagged by ipaddress' is_private in every Python version.
ALWAYS_BLOCKED = [
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "100.64.0.0/10",  # carrier-grade NAT
        "169.254.0.0/16",  # link-local, cloud metadata (169.254.169.254)
        "192.0.0.0/24",
        "198.18.0.0/15",
        "fd00:ec2::254/128",  # AWS metadata over IPv6
        "fe80::/10",
        "fc00::/7",
    )
]
# Cloud metadata services (instance credentials): AWS, GCP, Azure, OpenStack use 169.254.169.254
# (AWS also fd00:ec2::254); Alibaba Cloud uses 100.100.100.200.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200"))


class BlockedAddress(Exception):
    """The target resolves to an address the source is not allowed to reach."""

    def __init__(self, host: str, address: str, why: str) -> None:
        super().__init__(f"refusing to connect to {host} ({address}): {why}")
        self.host = host
        self.address = address
        self.why = why


def unmap(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv4-mapped or 6to4 IPv6 address reaches (else ``ip``)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None:
            return ip.sixtofour
    return ip


def is_metadata(ip: IPAddress) -> bool:
    return unmap(ip) in METADATA_ADDRESSES


def why_blocked(ip: IPAddress) -> str | None:
    """The crawler's reading of ``ip``: ``loopback``, ``private network``,
    ``link-local/reserved/metadata``, ``non-unicast``, or None for a public address."""
    ip = unmap(ip)
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local or any(ip in net for net in ALWAYS_BLOCKED if net.version == ip.version):
        return "link-local/reserved/metadata"
    if ip.is_private:
        return "private network"
    if ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        return "non-unicast"
    return None
