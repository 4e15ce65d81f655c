"""The staging area: raw bytes and intermediate results of one DAG run.

Layout: ``<staging_dir>/<dag_id>/<run_id>/`` with one file per stage and batch
(``batch-0003.json`` → ``fetched-0003.json`` → ``parsed-0003.json`` → ``chunked-0003.json`` →
``upserted-0003.json``) plus ``raw/`` for bytes. Names are deterministic, so re-running a task
overwrites its own output and never duplicates it. XCom carries only these paths.

Every file a later stage reads back is recorded (size and SHA-256) in the manifest entry that
points at it, and checked when read (:meth:`StagingArea.read_verified`): a file replaced or
truncated in staging between two tasks (a full disk, another process, an operator's hand) is
refused with :class:`StagingCorruptError` instead of being indexed as if it were the source's.
The manifests themselves are handed from task to task as *refs* (:meth:`StagedFile.ref`,
``<location>#<size>:<sha256>``), so the task reading one checks it against what the writing
task recorded in XCom, not against anything kept in the staging area it may have changed in.

Where the area lives is a location (:mod:`include.staging.locations`): a local directory by
default (``TRIBUTARY_STAGING_URL`` unset: ``$TRIBUTARY_STAGING_DIR``, ``$TRIBUTARY_HOME/staging``)
or a URL whose scheme names a backend, so that tasks on different hosts share one area. Every
path this class hands out is such a location, and every reader resolves the backend from it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from include.settings import get_settings
from include.staging.locations import backend_for, join, location_parent

__all__ = [
    "StagedFile",
    "StagingArea",
    "StagingCorruptError",
    "StagingTooLargeError",
    "file_digest",
    "segment",
    "split_ref",
]

_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]")
# ``#`` never occurs in a staged name (``segment`` and the stage names keep to _UNSAFE's set)
_REF = re.compile(r"(?P<location>.+)#(?P<size>\d+):(?P<sha256>[0-9a-f]{64})")
_SEGMENT_MAX = 150


def segment(name: str) -> str:
    """One path segment per DAG id or run id, injective on every backend.

    A name that is already a safe segment is kept as it is (readable; older runs keep their
    prefix). Any other name — separators, ``:`` (Airflow's run ids), ``.`` and ``..`` (which on
    a file system name the parent: a run id ``..`` once deleted the whole staging tree), the
    empty name, or one longer than the cap — becomes a readable part plus ``~`` and a SHA-256 of
    the full name: ``~`` never occurs in a kept name, and the hash tells apart names the readable
    part would merge (``T10:00:00`` and ``T10_00_00``, ids that differ after the cap)."""
    if name not in ("", ".", "..") and len(name) <= _SEGMENT_MAX and not _UNSAFE.search(name):
        return name
    readable = _UNSAFE.sub("_", name)[:100].strip(".") or "_"
    return f"{readable}~{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:32]}"


class StagingTooLargeError(ValueError):
    """One object over its backend's size cap (the database backend's ``MAX_OBJECT_BYTES``):
    the item it belongs to fails, not its batch."""

    reason = "staging_too_large"


class StagingCorruptError(RuntimeError):
    """A staged file is not what was written: another size or hash (or it is gone)."""

    reason = "staging_corrupt"


def file_digest(data: bytes) -> dict[str, Any]:
    """What a manifest records of a staged file: ``{"size": n, "sha256": hex}``."""
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


@dataclass(frozen=True, slots=True)
class StagedFile:
    path: str
    size: int
    sha256: str

    def digest(self) -> dict[str, Any]:
        return {"size": self.size, "sha256": self.sha256}

    def ref(self) -> str:
        """The file as one string that carries its digest: ``<location>#<size>:<sha256>``."""
        return f"{self.path}#{self.size}:{self.sha256}"


def split_ref(ref: str) -> tuple[str, dict[str, Any] | None]:
    """A ref's location and digest (:meth:`StagedFile.ref`); a bare location (handed on by a
    task of an engine before refs, in a run resumed after an upgrade) has no digest: None."""
    match = _REF.fullmatch(str(ref))
    if match is None:
        return str(ref), None
    return match["location"], {"size": int(match["size"]), "sha256": match["sha256"]}


class StagingArea:
    def __init__(self, dag_id: str, run_id: str, root: str | os.PathLike[str] | None = None) -> None:
        self.root = join(str(root or get_settings().staging_url), f"{segment(dag_id)}/{segment(run_id)}")
        self._backend = backend_for(self.root)
        # digests of the raw files this instance staged (a crawler stages during discovery; the
        # plan then records each change's digest beside its staged path)
        self._staged: dict[str, dict[str, Any]] = {}

    @classmethod
    def at(cls, root: str | os.PathLike[str]) -> StagingArea:
        """The staging area whose location is ``root``."""
        area = cls.__new__(cls)
        area.root = str(root).rstrip("/")
        area._backend = backend_for(area.root)
        area._staged = {}
        return area

    @classmethod
    def of(cls, location: str) -> StagingArea:
        """The staging area holding the file at ``location`` (e.g. a stage manifest; a ref too)."""
        return cls.at(location_parent(split_ref(location)[0]))

    # -- paths -------------------------------------------------------------------------------
    def path(self, name: str) -> str:
        return join(self.root, name)

    def stage_path(self, stage: str, batch: int) -> str:
        return self.path(f"{stage}-{batch:04d}.json")

    def has(self, name: str) -> bool:
        return self._backend.size(self.path(name)) is not None

    # -- writing -----------------------------------------------------------------------------
    def write_bytes(self, name: str, data: bytes) -> str:
        target = self.path(name)
        self._backend.write(target, data)  # atomic in every backend
        return target

    def write_json(self, name: str, obj: Any) -> str:
        return self.write_bytes(name, _json_bytes(obj))

    def put_json(self, name: str, obj: Any) -> StagedFile:
        """``write_json``, returning the size and hash a manifest records for the later check."""
        return self.put_bytes(name, _json_bytes(obj))

    def put_bytes(self, name: str, data: bytes) -> StagedFile:
        """``write_bytes``, returning the size and hash a manifest records for the later check."""
        digest = file_digest(data)
        return StagedFile(self.write_bytes(name, data), digest["size"], digest["sha256"])

    def stage_raw(self, item_key: str, data: bytes, file_name: str = "") -> str:
        """Store an item's raw bytes under a name derived from its key (keeping the file's
        extension, so a retained file opens with the right program). Its size and hash are
        remembered (:meth:`staged_digest`)."""
        digest = hashlib.sha256(item_key.encode("utf-8")).hexdigest()[:32]
        suffix = PurePosixPath(file_name).suffix.lower()
        if not re.fullmatch(r"\.[a-z0-9]{1,8}", suffix):
            suffix = ".bin"
        path = self.write_bytes(f"raw/{digest}{suffix}", data)
        self._staged[path] = file_digest(data)
        return path

    def staged_digest(self, path: str | None) -> dict[str, Any] | None:
        """Size and hash of a file :meth:`stage_raw` wrote through this instance, else None."""
        return self._staged.get(path) if path else None

    # -- reading -----------------------------------------------------------------------------
    @staticmethod
    def exists_at(location: str) -> bool:
        return backend_for(str(location)).size(str(location)) is not None

    @staticmethod
    def read_json(path: str) -> Any:
        return json.loads(StagingArea.read_bytes(path).decode("utf-8"))

    @staticmethod
    def read_bytes(path: str) -> bytes:
        return backend_for(str(path)).read(str(path))

    @staticmethod
    def read_verified(path: str, digest: dict[str, Any] | None) -> bytes:
        """The file's bytes, checked against the size and hash recorded when it was staged.

        ``digest`` None (a manifest written before digests were recorded) reads unchecked.
        The size is compared first (a ``stat`` or a HEAD): a truncated or grown file is
        refused without reading it.
        """
        location = str(path)
        backend = backend_for(location)
        if digest is None:
            return backend.read(location)
        size = backend.size(location)
        if size is None:
            raise StagingCorruptError(f"staged file {location} is gone")
        if size != digest["size"]:
            raise StagingCorruptError(f"staged file {location}: {size} bytes, {digest['size']} were staged")
        try:
            data = backend.read(location)
        except FileNotFoundError as exc:
            raise StagingCorruptError(f"staged file {location} is gone") from exc
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest["sha256"]:
            raise StagingCorruptError(
                f"staged file {location}: sha256 {actual[:16]}..., {digest['sha256'][:16]}... staged"
            )
        return data

    @classmethod
    def read_json_verified(cls, path: str, digest: dict[str, Any] | None) -> Any:
        return json.loads(cls.read_verified(path, digest).decode("utf-8"))

    def _files(self) -> list[tuple[str, int]]:
        return list(self._backend.walk(self.root))

    def stage_files(self, stage: str) -> list[str]:
        """This run's manifests of one stage (``upserted-0000.json`` ...), in batch order."""
        pattern = re.compile(re.escape(stage) + r"-\d+\.json")
        top = self.root + "/"
        return sorted(loc for loc, _ in self._files() if loc.startswith(top) and pattern.fullmatch(loc[len(top) :]))

    def size_bytes(self) -> int:
        return sum(size for _, size in self._files())

    def exists(self) -> bool:
        return bool(self._files())

    def holds_more_than_raw(self) -> bool:
        """Whether anything but ``raw/`` is left (what a cleanup with ``keep_raw`` removes)."""
        raw = self.path("raw") + "/"
        return any(not loc.startswith(raw) for loc, _ in self._files())

    def cleanup(self, keep_raw: bool = False) -> None:
        """Remove the run's files; with ``keep_raw`` the raw bytes (``raw/``) stay for audit."""
        self._backend.remove(self.root, keep="raw" if keep_raw else None)


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, default=str).encode("utf-8")
