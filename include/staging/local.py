"""Staging on a local file system: the default (``$TRIBUTARY_HOME/staging``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

__all__ = ["LocalBackend"]


def _path(location: str) -> Path:
    path = Path(location.removeprefix("file://"))
    if ".." in path.parts:  # StagingArea's segments never make one; a location that does is refused
        raise ValueError(f"staging location climbs out of its root: {location!r}")
    return path


class LocalBackend:
    max_object_bytes: int | None = None  # no cap per object but the disk's

    def write(self, location: str, data: bytes) -> None:
        target = _path(location)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)  # atomic: a killed task never leaves half a file behind

    def read(self, location: str) -> bytes:
        return _path(location).read_bytes()

    def size(self, location: str) -> int | None:
        try:
            return _path(location).stat().st_size
        except FileNotFoundError:
            return None

    def walk(self, prefix: str) -> Iterator[tuple[str, int]]:
        root = _path(prefix)
        if not root.is_dir():
            return
        for path in sorted(root.rglob("*")):
            if path.is_file():
                yield str(path), path.stat().st_size

    def remove(self, prefix: str, keep: str | None = None) -> None:
        root = _path(prefix)
        if keep is None or not (root / keep).is_dir():
            shutil.rmtree(root, ignore_errors=True)
            return
        for child in root.iterdir():
            if child.name != keep:
                shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
