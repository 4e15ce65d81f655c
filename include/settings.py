"""Process-wide settings, from environment variables with embedded defaults.

Everything defaults to files under ``$TRIBUTARY_HOME`` (``<project>/.tributary``) so that a
fresh machine needs no server: SQLite state, SQLite FTS5 index, a local staging directory and
no Redis. Each setting can be pointed at a real service by one variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent

__all__ = ["PROJECT_ROOT", "Settings", "get_settings"]


@dataclass(frozen=True, slots=True)
class Settings:
    home: Path
    state_url: str
    index_path: Path
    staging_dir: Path
    # where staging lives: a local directory (staging_dir) unless TRIBUTARY_STAGING_URL names a
    # shared one (include/staging/locations.py: backends by URL scheme)
    staging_url: str
    sources_file: Path
    redis_url: str | None

    def ensure_dirs(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        if self.staging_url == str(self.staging_dir):
            self.staging_dir.mkdir(parents=True, exist_ok=True)
        self.index_path.parent.mkdir(parents=True, exist_ok=True)


def get_settings() -> Settings:
    """Read settings now (not at import time) so tests can change the environment."""
    home = Path(os.environ.get("TRIBUTARY_HOME", PROJECT_ROOT / ".tributary")).resolve()
    staging_dir = Path(os.environ.get("TRIBUTARY_STAGING_DIR", home / "staging"))
    return Settings(
        home=home,
        state_url=os.environ.get("TRIBUTARY_STATE_URL", f"sqlite:///{home / 'state.db'}"),
        index_path=Path(os.environ.get("TRIBUTARY_INDEX_PATH", home / "index.db")),
        staging_dir=staging_dir,
        staging_url=os.environ.get("TRIBUTARY_STAGING_URL") or str(staging_dir),
        sources_file=Path(os.environ.get("TRIBUTARY_SOURCES", PROJECT_ROOT / "include" / "sources.yaml")),
        redis_url=os.environ.get("TRIBUTARY_REDIS_URL") or None,
    )
