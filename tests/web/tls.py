"""Loopback https for the web tests: a self-signed certificate for one 127.0.0.0/8 address,
and that address chosen so that both default ports (80 and 443) are free on it.

Default ports matter: ``https://host/`` and ``http://host/`` differ only by scheme, which is
the case a downgrade check has to catch (with other ports the host key differs anyway).
"""

from __future__ import annotations

import datetime
import ipaddress
import random
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["SelfSigned", "loopback_with_default_ports", "self_signed"]


@dataclass(frozen=True, slots=True)
class SelfSigned:
    certfile: Path
    keyfile: Path

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts this certificate only."""
        return ssl.create_default_context(cafile=str(self.certfile))


def self_signed(address: str, directory: Path) -> SelfSigned:
    """A certificate for ``address`` (an IP SAN), valid for a day, its own CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"tributary test {address}")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    certfile, keyfile = directory / "cert.pem", directory / "key.pem"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return SelfSigned(certfile, keyfile)


def loopback_with_default_ports(attempts: int = 20) -> str:
    """A 127.x.y.z address on which ports 80 and 443 can both be bound (needs root or
    CAP_NET_BIND_SERVICE: PermissionError otherwise). Random, so that helpers running at the
    same time do not collide."""
    for _ in range(attempts):
        address = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
        try:
            for port in (80, 443):
                with socket.socket() as s:
                    s.bind((address, port))
        except PermissionError:
            raise  # no privilege: every address would fail the same way (the caller skips)
        except OSError:
            continue  # in use on this address: try another
        return address
    raise OSError("no loopback address with ports 80 and 443 free")
