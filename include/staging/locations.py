"""Locations in the staging area, and the backend that stores each.

A *location* is a string: an absolute local path (``/home/.../staging/dag/run/batch-0003.json``)
or a URL (``s3://conn_id@bucket/prefix/dag/run/batch-0003.json``, ``db:///dag/run/...``). It is
what manifests, item records and XCom carry, so a task on another host can read what a task
here wrote. The path part is always POSIX, so ``posixpath`` splits and joins both kinds.

Backends are found by URL scheme (:data:`BACKENDS`, dotted names imported on first use: a local
deployment never imports an object-storage library).
"""

from __future__ import annotations

import importlib
import posixpath
import re
from collections.abc import Iterator
from functools import cache
from typing import Protocol

__all__ = [
    "BACKENDS",
    "StagingBackend",
    "backend_for",
    "join",
    "location_name",
    "location_parent",
    "scheme_of",
]

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


class StagingBackend(Protocol):
    """Byte storage under locations. Every method takes full locations (scheme included)."""

    def write(self, location: str, data: bytes) -> None:
        """Store ``data`` atomically: a reader sees the old content or the new, never a part."""

    def read(self, location: str) -> bytes:
        """The bytes; :class:`FileNotFoundError` when nothing is stored there."""

    def size(self, location: str) -> int | None:
        """Stored size in bytes, None when absent (cheaper than reading: the digest check's
        first step)."""

    def walk(self, prefix: str) -> Iterator[tuple[str, int]]:
        """(location, size) of everything stored under the directory ``prefix``, recursively."""

    def remove(self, prefix: str, keep: str | None = None) -> None:
        """Remove everything under the directory ``prefix`` but its subdirectory ``keep``."""


# scheme -> "module:Class"; "" is a plain local path
BACKENDS: dict[str, str] = {
    "": "include.staging.local:LocalBackend",
    "file": "include.staging.local:LocalBackend",
    # object storage through Airflow's ObjectStoragePath (the provider of each scheme must be
    # installed: s3 is apache-airflow-providers-amazon + s3fs)
    "s3": "include.staging.objectstore:ObjectStoreBackend",
    "gs": "include.staging.objectstore:ObjectStoreBackend",
    "gcs": "include.staging.objectstore:ObjectStoreBackend",
    "abfs": "include.staging.objectstore:ObjectStoreBackend",
    "az": "include.staging.objectstore:ObjectStoreBackend",
    # the state database (TRIBUTARY_STATE_URL): db:///<root>/<dag>/<run>/<name>
    "db": "include.staging.database:DatabaseBackend",
}


def scheme_of(location: str) -> str:
    match = _SCHEME.match(location)
    return match.group(1).lower() if match else ""


@cache
def _backend(scheme: str) -> StagingBackend:
    dotted = BACKENDS.get(scheme)
    if dotted is None:
        raise ValueError(f"no staging backend for {scheme}:// locations (known: {sorted(s for s in BACKENDS if s)})")
    module, _, name = dotted.partition(":")
    backend: StagingBackend = getattr(importlib.import_module(module), name)()
    return backend


def backend_for(location: str) -> StagingBackend:
    """The backend storing ``location`` (one instance per scheme and process)."""
    return _backend(scheme_of(location))


def join(root: str, name: str) -> str:
    return posixpath.join(root, name)


def location_parent(location: str) -> str:
    return posixpath.dirname(location.rstrip("/"))


def location_name(location: str) -> str:
    return posixpath.basename(location.rstrip("/"))
