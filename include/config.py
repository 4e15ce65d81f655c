"""Source configuration: the YAML under ``include/`` that the DAG factory turns into DAGs.

One entry per source::

    sources:
      - kind: web                # which connector (plugins/connectors/<kind>)
        name: demo               # DAG id becomes sync_<kind>_<name>
        schedule: "@daily"
        conn_id: null            # Airflow Connection holding secrets / headers
        options: {...}           # connector-specific
        parser: {...}            # options handed to parsers
        chunker: {name: token, options: {chunk_token_num: 512}}
        index: {backend: sqlite, name: tributary}

Values of the form ``${VAR}`` or ``${VAR:-default}`` are expanded from the environment, so the
same file serves the demo, the tests and a deployment.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from include.contract import options_hash

__all__ = ["ChunkerConfig", "IndexConfig", "SourceConfig", "load_sources"]

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ChunkerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "token"
    options: dict[str, Any] = Field(default_factory=dict)


class IndexConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backend: str = "sqlite"
    name: str = "tributary"
    options: dict[str, Any] = Field(default_factory=dict)


class SourceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str
    name: str = Field(pattern=r"^[A-Za-z0-9_]+$")
    schedule: str | None = "@daily"
    conn_id: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    parser: dict[str, Any] = Field(default_factory=dict)
    chunker: ChunkerConfig = Field(default_factory=ChunkerConfig)
    index: IndexConfig = Field(default_factory=IndexConfig)
    batch_size: int = Field(default=50, ge=1)
    max_items: int | None = None
    # deletions: an item absent from this many complete listings in a row is deleted
    delete_after_missing_runs: int = Field(default=1, ge=1)
    # a run that would delete more than this share of the source's items deletes nothing
    mass_delete_threshold: float = Field(default=0.2, ge=0.0, le=1.0)
    # keep the run's raw bytes (e.g. rebuilt spreadsheets) in staging after success, for audit;
    # None lets the connector decide (Connector.retain_raw)
    retain_raw: bool | None = None
    tags: list[str] = Field(default_factory=list)
    description: str | None = None

    @property
    def source_id(self) -> str:
        """The key under which state, lineage and index documents are filed."""
        return f"{self.kind}:{self.name}"

    @property
    def dag_id(self) -> str:
        return f"sync_{self.kind}_{self.name}"

    def processing_hash(self) -> str:
        """Hash of everything that changes what a document turns into in the index.

        Stored per item: a different hash on the next run re-processes the item even if the
        source says it did not change.
        """
        return options_hash({"parser": self.parser, "chunker": self.chunker.model_dump()})


def _expand(value: Any) -> Any:
    if isinstance(value, str):
        return _ENV_REF.sub(lambda m: os.environ.get(m.group(1), m.group(2) or ""), value)
    if isinstance(value, list):
        return [_expand(v) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    return value


def load_sources(path: Path) -> list[SourceConfig]:
    """Parse and validate a sources file. Raises ``ValueError`` naming the bad entry."""
    if not path.exists():
        return []
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    entries = _expand(raw.get("sources") or [])
    sources: list[SourceConfig] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        try:
            src = SourceConfig.model_validate(entry)
        except Exception as exc:
            raise ValueError(f"{path}: source #{i}: {exc}") from exc
        if src.dag_id in seen:
            raise ValueError(f"{path}: duplicate source {src.dag_id}")
        seen.add(src.dag_id)
        sources.append(src)
    return sources
