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

Credentials never live here: they come from the Airflow Connection ``conn_id`` (metadata DB,
``AIRFLOW_CONN_<ID>`` or a secrets backend) or from ``TRIBUTARY_*``/service environment variables
read by the code itself. Validation refuses an option whose name says it is a credential
(``app_secret``, ``token``, ``password``, an ``Authorization`` header...) or a URL carrying a
password, at any depth of ``options``, ``parser``, ``chunker.options`` and ``index.options`` — the
source file is rendered into DAGs, parsed by every scheduler and shown in the UI.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from include.contract import options_hash

__all__ = ["ChunkerConfig", "IndexConfig", "SourceConfig", "load_sources"]

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

# A key naming one of these (``token``, ``app_secret``, ``X-Auth-Token``...) holds a credential.
# Only whole trailing words count: ``token_margin`` and ``chunk_token_num`` are tuning knobs.
_CREDENTIAL_WORDS = (
    "secret",
    "password",
    "passwd",
    "token",
    "api_key",
    "apikey",
    "access_key",
    "private_key",
    "credential",
    "credentials",
    "authorization",
    "auth",
    "cookie",
    "cookies",
)
_URL_WITH_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@")


def _is_credential_key(key: object) -> bool:
    norm = re.sub(r"[^a-z0-9]+", "_", str(key).lower()).strip("_")
    return any(norm == w or norm.endswith("_" + w) for w in _CREDENTIAL_WORDS)


def _has_url_password(value: str) -> bool:
    if not _URL_WITH_USERINFO.match(value.strip()):
        return False
    try:
        return urlsplit(value.strip()).password is not None
    except ValueError:
        return True  # unparsable userinfo: refuse rather than guess


def _credential_paths(value: Any, path: str) -> list[str]:
    """Dotted paths under ``value`` that hold a credential (names only, never values)."""
    found: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{path}.{k}"
            if _is_credential_key(k):
                found.append(sub)
            else:
                found.extend(_credential_paths(v, sub))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found.extend(_credential_paths(v, f"{path}[{i}]"))
    elif isinstance(value, str) and _has_url_password(value):
        found.append(f"{path} (a URL with a password)")
    return found


class ChunkerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    name: str = "token"
    options: dict[str, Any] = Field(default_factory=dict)


class IndexConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    backend: str = "sqlite"
    name: str = "tributary"
    options: dict[str, Any] = Field(default_factory=dict)


class SourceConfig(BaseModel):
    # hide_input_in_errors: a validation error must not echo a refused credential back into a log
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

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

    @model_validator(mode="after")
    def _no_credentials(self) -> SourceConfig:
        found = (
            _credential_paths(self.options, "options")
            + _credential_paths(self.parser, "parser")
            + _credential_paths(self.chunker.options, "chunker.options")
            + _credential_paths(self.index.options, "index.options")
        )
        if found:
            raise ValueError(
                f"{', '.join(found)}: credentials are not accepted in a source's configuration; put them in "
                f"the Airflow Connection named by conn_id (login/password/extra; e.g. an AIRFLOW_CONN_<ID> "
                f"environment variable or a secrets backend) or in the environment variable the component reads"
            )
        return self

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
