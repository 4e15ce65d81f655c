"""Staging in object storage, through Airflow's ``ObjectStoragePath`` and an Airflow Connection.

A location is ``<scheme>://<conn_id>@<bucket>/<prefix>/<dag>/<run>/<name>``: the user-info part
names the Airflow Connection, which is ``ObjectStoragePath``'s own convention. The connection
(``AIRFLOW_CONN_<ID>``, a secrets backend or the metadata DB) holds the endpoint and the keys
(for S3: login/password or ``extra.aws_access_key_id``..., ``extra.endpoint_url``); locations
carry only its id, so nothing secret reaches a manifest, an XCom or a log line.

The file system behind a scheme comes from the Airflow provider that registers it (s3: the
Amazon provider with ``s3fs``; gs/gcs: Google; abfs/az: Microsoft Azure). Only the Amazon one
is installed and tested here; the others are registered because the calls below are plain
fsspec and need nothing scheme-specific.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import cache
from typing import Any

from airflow.sdk import ObjectStoragePath
from airflow.sdk.io import get_fs

__all__ = ["ObjectStoreBackend"]


@cache
def _fs(protocol: str, conn_id: str | None, pid: int) -> Any:
    """The connection's file system, one per process. Not ``ObjectStoragePath.fs``: Airflow
    caches that one for the process's life, and an async fsspec file system refuses to run in a
    forked child ("not fork-safe"), which the engine's parse workers are."""
    return get_fs(protocol, conn_id)


def _target(location: str) -> tuple[Any, str, str]:
    """(file system, fsspec path ``bucket/key``, location prefix ``scheme://conn@``)."""
    path = ObjectStoragePath(location)
    scheme, _, rest = location.partition("://")
    userinfo = rest.split("/", 1)[0].rpartition("@")[0]
    head = f"{scheme}://{userinfo}@" if userinfo else f"{scheme}://"
    return _fs(path.protocol, path.conn_id, os.getpid()), path.path.rstrip("/"), head


class ObjectStoreBackend:
    """:class:`~include.staging.locations.StagingBackend` over an fsspec object store."""

    max_object_bytes: int | None = None  # S3 takes 5 TB per object (fsspec uploads big ones in parts)

    def write(self, location: str, data: bytes) -> None:
        fs, path, _ = _target(location)
        # Atomic: S3 (and GCS, Azure blobs) make an object visible only once its upload is
        # complete, a single PUT or a completed multipart upload alike; a reader sees the old
        # object or the new one, never a part. No temporary name and rename (a copy there).
        fs.pipe_file(path, data)
        fs.invalidate_cache(path)

    def read(self, location: str) -> bytes:
        fs, path, _ = _target(location)
        data: bytes = fs.cat_file(path)  # FileNotFoundError when absent, as the protocol says
        return data

    def size(self, location: str) -> int | None:
        fs, path, _ = _target(location)
        # a listing cached by this process may predate another host's write: ask the store
        fs.invalidate_cache(path)
        try:
            info = fs.info(path)  # a HEAD request on S3
        except FileNotFoundError:
            return None
        if info.get("type") != "file":
            return None
        return int(info["size"])

    def walk(self, prefix: str) -> Iterator[tuple[str, int]]:
        fs, path, head = _target(prefix)
        fs.invalidate_cache(path)
        found: dict[str, dict[str, Any]] = fs.find(path, detail=True)
        for key in sorted(found):
            info = found[key]
            if info.get("type") == "file" and key.startswith(path + "/"):
                yield head + key, int(info["size"])

    def remove(self, prefix: str, keep: str | None = None) -> None:
        fs, path, _ = _target(prefix)
        fs.invalidate_cache(path)
        kept = f"{path}/{keep}/" if keep else None
        doomed = [k for k in fs.find(path) if k.startswith(path + "/") and not (kept and k.startswith(kept))]
        if doomed:
            fs.rm(doomed)  # one DeleteObjects request per 1,000 keys on S3
        fs.invalidate_cache(path)
