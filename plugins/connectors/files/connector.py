"""``files`` connector: every file under a root directory is one item.

Options (read only through :class:`.options.FilesOptions`): ``root`` (directory), ``include``
(glob patterns, default ``["**/*"]``), ``exclude`` (glob patterns), ``max_file_bytes`` (default
100 MiB; larger files are recorded as failed).
Version evidence is the file's modification time and size; the listing is always complete,
so files removed from the folder are deleted from the index.
"""

from __future__ import annotations

import datetime as dt
import mimetypes
import posixpath
from pathlib import Path

from include.config import SourceConfig
from include.contract import Change, ChangeKind, RawDocument, VersionEvidence
from plugins.connectors.base import (
    Connector,
    ConnectorContext,
    Discovery,
    DiscoveryRequest,
    FetchError,
    register_connector,
)
from plugins.connectors.files.options import FilesOptions

__all__ = ["FilesConnector"]


@register_connector
class FilesConnector(Connector):
    kind = "files"
    options_model = FilesOptions

    def __init__(self, source: SourceConfig, context: ConnectorContext | None = None) -> None:
        super().__init__(source, context)
        self.options = FilesOptions.model_validate(source.options)

    @property
    def root(self) -> Path:
        return Path(self.options.root).expanduser().resolve()

    def canonical_key(self, key: str) -> str:
        """A file's key is its POSIX path relative to the root: ``./a//b.md`` and an absolute path
        under the root name the same file as ``a/b.md``."""
        text = key.strip()
        path = Path(text).expanduser()
        if path.is_absolute():
            # the spelling first (the root's own path), then with symlinks resolved like the root's
            for candidate in (Path(posixpath.normpath(path)), path.resolve()):
                if candidate.is_relative_to(self.root):
                    text = candidate.relative_to(self.root).as_posix()
                    break
            else:
                raise ValueError(f"{key!r} is not under the source root {self.root}")
        norm = posixpath.normpath(text)
        if norm in (".", "") or norm == ".." or norm.startswith("../"):
            raise ValueError(f"{key!r} does not name a file under the source root")
        return norm

    def _files(self) -> list[Path]:
        include = self.options.include or ["**/*"]
        exclude = self.options.exclude
        found: set[Path] = set()
        for pattern in include:
            found.update(p for p in self.root.glob(pattern) if p.is_file() and not p.is_symlink())
        return sorted(p for p in found if not any(p.relative_to(self.root).match(x) for x in exclude))

    def discover(self, request: DiscoveryRequest) -> Discovery:
        if not self.root.is_dir():
            # An unreadable root must never look like "every file was deleted".
            raise FileNotFoundError(f"files source root {self.root} is not a directory")
        changes: list[Change] = []
        keys: set[str] = set()
        for path in self._files():
            key = path.relative_to(self.root).as_posix()
            keys.add(key)
            stat = path.stat()
            mtime = dt.datetime.fromtimestamp(stat.st_mtime, dt.UTC)
            version = VersionEvidence(modified_time=mtime.isoformat(), revision=f"size:{stat.st_size}")
            if request.window_start and mtime < request.window_start:
                continue
            if request.window_end and mtime >= request.window_end:
                continue
            known = request.known.get(key)
            if known is None:
                kind = ChangeKind.NEW
            elif known.modified_time == version.modified_time and known.revision == version.revision:
                kind = ChangeKind.UNCHANGED
            else:
                kind = ChangeKind.CHANGED
            changes.append(Change(key, kind, version, url=path.as_uri(), title=path.name))
        return Discovery(changes, complete=True, all_keys=keys, stats={"files": len(keys)})

    def fetch(self, change: Change) -> RawDocument:
        path = (self.root / change.item_key).resolve()
        if not path.is_relative_to(self.root):
            raise FetchError(f"{change.item_key} escapes the source root", reason="path_traversal", retryable=False)
        limit = self.options.max_file_bytes
        try:
            size = path.stat().st_size
            if size > limit:
                raise FetchError(f"{size} bytes > limit {limit}", reason="too_large", retryable=False)
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise FetchError(f"{change.item_key} vanished before it was read", reason="not_found") from exc
        return RawDocument(
            item_key=change.item_key,
            data=data,
            file_name=path.name,
            media_type=mimetypes.guess_type(path.name)[0],
            url=path.as_uri(),
            title=path.stem,
            version=change.version,
        )

    def input_dataset(self) -> tuple[str, str]:
        return ("file", str(self.root))
