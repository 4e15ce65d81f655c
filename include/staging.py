"""The staging area: raw bytes and intermediate results of one DAG run.

Layout: ``<staging_dir>/<dag_id>/<run_id>/`` with one file per stage and batch
(``batch-0003.json`` → ``fetched-0003.json`` → ``parsed-0003.json`` → ``chunked-0003.json`` →
``upserted-0003.json``) plus ``raw/`` for bytes. Names are deterministic, so re-running a task
overwrites its own output and never duplicates it. XCom carries only these paths.

Local directories by default; the interface is small (read/write bytes and JSON, list, remove)
so an ``ObjectStoragePath`` implementation can replace it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from include.settings import get_settings

__all__ = ["StagingArea"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]")


def _safe(name: str) -> str:
    return _UNSAFE.sub("_", name)[:150]


class StagingArea:
    def __init__(self, dag_id: str, run_id: str, root: Path | None = None) -> None:
        self.root = Path(root or get_settings().staging_dir) / _safe(dag_id) / _safe(run_id)

    @classmethod
    def at(cls, root: str | Path) -> StagingArea:
        """The staging area whose directory is ``root`` (e.g. the parent of a manifest)."""
        area = cls.__new__(cls)
        area.root = Path(root)
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
        return self.write_bytes(name, json.dumps(obj, ensure_ascii=False, default=str).encode("utf-8"))

    def stage_raw(self, item_key: str, data: bytes, file_name: str = "") -> str:
        """Store an item's raw bytes under a name derived from its key (keeping the file's
        extension, so a retained file opens with the right program)."""
        digest = hashlib.sha256(item_key.encode("utf-8")).hexdigest()[:32]
        suffix = Path(file_name).suffix.lower()
        if not re.fullmatch(r"\.[a-z0-9]{1,8}", suffix):
            suffix = ".bin"
        return self.write_bytes(f"raw/{digest}{suffix}", data)

    # -- reading -----------------------------------------------------------------------------
    @staticmethod
    def read_json(path: str | Path) -> Any:
        return json.loads(Path(path).read_text(encoding="utf-8"))

    @staticmethod
    def read_bytes(path: str | Path) -> bytes:
        return Path(path).read_bytes()

    def stage_files(self, stage: str) -> list[str]:
        """This run's manifests of one stage (``upserted-0000.json`` ...), in batch order."""
        return sorted(str(p) for p in self.root.glob(f"{stage}-*.json"))

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file()) if self.root.exists() else 0

    def cleanup(self, keep_raw: bool = False) -> None:
        """Remove the run's files; with ``keep_raw`` the raw bytes (``raw/``) stay for audit."""
        if not keep_raw:
            shutil.rmtree(self.root, ignore_errors=True)
            return
        if self.root.exists():
            for child in self.root.iterdir():
                if child.name != "raw":
                    shutil.rmtree(child) if child.is_dir() else child.unlink(missing_ok=True)
