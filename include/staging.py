"""The staging area: raw bytes and intermediate results of one DAG run.

Layout: ``<staging_dir>/<dag_id>/<run_id>/`` with one file per stage and batch
(``batch-0003.json`` → ``fetched-0003.json`` → ``parsed-0003.json`` → ``chunked-0003.json`` →
``upserted-0003.json``) plus ``raw/`` for bytes. Names are deterministic, so re-running a task
overwrites its own output and never duplicates it. XCom carries only these paths.

Every file a later stage reads back is recorded (size and SHA-256) in the manifest entry that
points at it, and checked when read (:meth:`StagingArea.read_verified`): a file replaced or
truncated in staging between two tasks (a full disk, another process, an operator's hand) is
refused with :class:`StagingCorruptError` instead of being indexed as if it were the source's.

Local directories by default; the interface is small (read/write bytes and JSON, list, remove)
so an ``ObjectStoragePath`` implementation can replace it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from include.settings import get_settings

__all__ = ["StagedFile", "StagingArea", "StagingCorruptError", "file_digest"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]")


def _safe(name: str) -> str:
    return _UNSAFE.sub("_", name)[:150]


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


class StagingArea:
    def __init__(self, dag_id: str, run_id: str, root: Path | None = None) -> None:
        self.root = Path(root or get_settings().staging_dir) / _safe(dag_id) / _safe(run_id)
        # digests of the raw files this instance staged (a crawler stages during discovery; the
        # plan then records each change's digest beside its staged path)
        self._staged: dict[str, dict[str, Any]] = {}

    @classmethod
    def at(cls, root: str | Path) -> StagingArea:
        """The staging area whose directory is ``root`` (e.g. the parent of a manifest)."""
        area = cls.__new__(cls)
        area.root = Path(root)
        area._staged = {}
        return area

    # -- paths -------------------------------------------------------------------------------
    def path(self, name: str) -> Path:
        return self.root / name

    def stage_path(self, stage: str, batch: int) -> str:
        return str(self.path(f"{stage}-{batch:04d}.json"))

    # -- writing -----------------------------------------------------------------------------
    def write_bytes(self, name: str, data: bytes) -> str:
        target = self.path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)  # atomic: a killed task never leaves half a file behind
        return str(target)

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
        suffix = Path(file_name).suffix.lower()
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
    def read_json(path: str | Path) -> Any:
        return json.loads(Path(path).read_text(encoding="utf-8"))

    @staticmethod
    def read_bytes(path: str | Path) -> bytes:
        return Path(path).read_bytes()

    @staticmethod
    def read_verified(path: str | Path, digest: dict[str, Any] | None) -> bytes:
        """The file's bytes, checked against the size and hash recorded when it was staged.

        ``digest`` None (a manifest written before digests were recorded) reads unchecked.
        The size is compared first, from ``stat``: a truncated or grown file is refused
        without reading it.
        """
        if digest is None:
            return Path(path).read_bytes()
        try:
            size = Path(path).stat().st_size
            if size != digest["size"]:
                raise StagingCorruptError(f"staged file {path}: {size} bytes, {digest['size']} were staged")
            data = Path(path).read_bytes()
        except FileNotFoundError as exc:
            raise StagingCorruptError(f"staged file {path} is gone") from exc
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest["sha256"]:
            raise StagingCorruptError(f"staged file {path}: sha256 {actual[:16]}..., {digest['sha256'][:16]}... staged")
        return data

    @classmethod
    def read_json_verified(cls, path: str | Path, digest: dict[str, Any] | None) -> Any:
        return json.loads(cls.read_verified(path, digest).decode("utf-8"))

    def stage_files(self, stage: str) -> list[str]:
        """This run's manifests of one stage (``upserted-0000.json`` ...), in batch order."""
        return sorted(str(p) for p in self.root.glob(f"{stage}-*.json"))

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file()) if self.root.exists() else 0

    def exists(self) -> bool:
        return self.root.exists()

    def cleanup(self, keep_raw: bool = False) -> None:
        """Remove the run's files; with ``keep_raw`` the raw bytes (``raw/``) stay for audit."""
        if not keep_raw:
            shutil.rmtree(self.root, ignore_errors=True)
            return
        if self.root.exists():
            for child in self.root.iterdir():
                if child.name != "raw":
                    shutil.rmtree(child) if child.is_dir() else child.unlink(missing_ok=True)


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, default=str).encode("utf-8")
