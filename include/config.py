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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from include.contract import options_hash

__all__ = [
    "ChunkerConfig",
    "EmbeddingConfig",
    "EngineOptions",
    "EventsConfig",
    "IndexConfig",
    "OptionsCheck",
    "SourceConfig",
    "SourceError",
    "load_sources",
    "load_sources_report",
    "url_secret",
]

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
# Query parameters that carry a credential in signed or token-authenticated URLs (OAuth 2.0
# bearer ``access_token``, RFC 6750 s2.3; API ``key``/``api_key``; pre-signed ``sig``/``signature``).
# Beyond the credential words above, these short names are secrets only as *query* names.
_SECRET_QUERY_NAMES = frozenset({"key", "sig", "signature", "pass", "pwd"})


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


def _is_secret_query_name(name: str) -> bool:
    norm = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    return _is_credential_key(norm) or norm in _SECRET_QUERY_NAMES or norm.endswith("_signature")


def url_secret(value: str) -> str | None:
    """What makes ``value`` (an absolute URL) carry a credential, or None.

    The answer names the part (``a password``, ``the query parameter access_token``), never its
    value: it ends up in DAG import errors every scheduler logs.
    """
    text = value.strip()
    if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text):
        return None
    if _has_url_password(text):
        return "a password"
    try:
        query = urlsplit(text).query
    except ValueError:
        return None  # not a URL a component could use; the component's own validation says so
    names = sorted({k for k, _ in parse_qsl(query, keep_blank_values=True) if _is_secret_query_name(k)})
    return f"the query parameter {', '.join(names)}" if names else None


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
    elif isinstance(value, str) and (secret := url_secret(value)):
        found.append(f"{path} (a URL with {secret})")
    return found


class EngineOptions(BaseModel):
    """Options the engine itself reads from ``source.options``, accepted by every kind.

    Each connector's options model derives from this one, so one ``extra="forbid"`` model per
    kind knows every key a source may set: ``quarantine_after`` (an item failing this many runs
    in a row is skipped until it changes or is named in ``only_keys``; read by discover),
    ``window_overlap_minutes`` (scheduled windows start this much earlier; read by the sync
    operator), ``fetch_operator`` (dotted path of an operator replacing the fetch task; read by
    the DAG factory).
    """

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    quarantine_after: int = Field(default=5, ge=1)
    # a run that succeeds with this many failed items, or this share of the items it attempted
    # (and at least 2), posts an alert; null turns a rule off (read by plugins.engine.alerts)
    alert_failed_items: int | None = Field(default=10, ge=1)
    alert_failed_share: float | None = Field(default=0.25, gt=0.0, le=1.0)
    # a run that made this many documents private because their permissions could not be read
    # (acl_unknown) posts an alert; null: never (read by plugins.engine.alerts)
    alert_acl_unknown: int | None = Field(default=1, ge=1)
    window_overlap_minutes: float | None = Field(default=None, ge=0)
    fetch_operator: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_.]*\.[A-Za-z_][A-Za-z0-9_]*$")
    # run-log retention (read by plugins.engine.retention): finished runs older than this many days
    # go with their lineage, except the last retention_keep_runs; null: TRIBUTARY_RETENTION_* or 90 / 20
    retention_days: float | None = Field(default=None, ge=0)
    retention_keep_runs: int | None = Field(default=None, ge=0)


class ChunkerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    name: str = "token"
    options: dict[str, Any] = Field(default_factory=dict)


class EmbeddingConfig(BaseModel):
    """A source's ``embedding:`` block: which model turns its chunks into vectors.

    ``provider``: ``none`` (BM25 only, the default: nothing is embedded), ``local`` (a model a
    registry package ships, run in process; ``model`` defaults to the provider's) or ``openai``
    (an OpenAI-compatible ``/v1/embeddings`` endpoint whose URL and key are in the Airflow
    Connection ``conn_id``). ``dimensions``: the vector size the index stores; for ``openai`` it
    is sent as the request's ``dimensions`` (models that support shortening) and every answer is
    checked against it. ``batch_size``: texts per model call or request. ``max_input_tokens``
    caps what one chunk may send (the model's own limit when unset). ``requests_per_minute``:
    the endpoint's request budget, shared by every worker through Redis. ``timeout_seconds``:
    the deadline of one request (of a whole query embedding). ``max_in_flight``: requests of one
    ``openai`` call sent at once (1: one after another), each still taking its place in the
    budget. ``allow_private_networks``: let
    the ``openai`` endpoint be a link-local or reserved address (loopback and private networks
    always are; cloud metadata addresses never).
    """

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    provider: Literal["none", "local", "openai"] = "none"
    model: str | None = None
    dimensions: int | None = Field(default=None, ge=1, le=8192)
    batch_size: int = Field(default=32, ge=1, le=2048)
    conn_id: str | None = None
    max_input_tokens: int | None = Field(default=None, ge=1)
    requests_per_minute: int | None = Field(default=None, ge=1)
    timeout_seconds: float = Field(default=60.0, gt=0)
    max_in_flight: int = Field(default=4, ge=1, le=32)
    allow_private_networks: bool = False

    @property
    def enabled(self) -> bool:
        return self.provider != "none"


class EventsConfig(BaseModel):
    """A source's ``events:`` block: change events the source pushes (Feishu drive events, Yuque
    webhooks) schedule its sync within a minute; the scheduled poll stays as the safety net.

    ``mode``: ``off`` (the default: polling only, nothing received) or ``callback`` (the
    receiver ``/tributary/events/<kind>/<name>`` in Airflow's API server takes them). The
    secrets that authenticate a callback (Feishu's Encrypt Key and Verification Token, Yuque's
    URL secret) live in the source's Airflow Connection, never here. ``debounce_seconds``: how
    long the oldest stored event waits for others before they become one run.
    ``lease_seconds``: how long a batch waits for a run to take it before its events are
    released to the next batch. ``max_body_bytes``, ``max_skew_seconds`` (how far a callback's
    timestamp may be from now) and ``max_per_minute`` (callbacks a minute, per source) bound what
    a caller can make the receiver do. ``subscribe``: Feishu only; subscribe every indexed file
    (and each configured folder) for its events through the API.
    """

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    mode: Literal["off", "callback"] = "off"
    debounce_seconds: float = Field(default=30.0, ge=0, le=3600)
    lease_seconds: float = Field(default=900.0, ge=10, le=86_400)
    max_body_bytes: int = Field(default=1_048_576, ge=1024, le=16 * 1_048_576)
    max_skew_seconds: int = Field(default=300, ge=10, le=86_400)
    max_per_minute: int = Field(default=600, ge=1, le=100_000)
    subscribe: bool = True

    @property
    def enabled(self) -> bool:
        return self.mode != "off"


class IndexConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    backend: str = "sqlite"
    name: str = "tributary"
    options: dict[str, Any] = Field(default_factory=dict)


class AclRule(BaseModel):
    """Who may read the items whose key (a URL, a path) matches ``match`` (an fnmatch glob)."""

    model_config = ConfigDict(extra="forbid")
    match: str
    public: bool = False
    users: list[str] = Field(default_factory=list)  # e-mail addresses
    groups: list[str] = Field(default_factory=list)  # names of the principals file's static groups


class AclConfig(BaseModel):
    """A source entry's declared permissions (web and local files, whose servers say none):
    ``public``, or named ``users`` (e-mail) and ``groups``; ``rules`` override it per item key,
    the first matching rule winning. A source without an ``acl`` block is public (README)."""

    model_config = ConfigDict(extra="forbid")
    public: bool = False
    users: list[str] = Field(default_factory=list)
    groups: list[str] = Field(default_factory=list)
    rules: list[AclRule] = Field(default_factory=list)


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
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    events: EventsConfig = Field(default_factory=EventsConfig)
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
    # declared permissions (web, files); connectors that read permissions from their source ignore it
    acl: AclConfig | None = None
    # how often the permissions DAG re-reads permissions and group memberships (minutes)
    permission_sync_minutes: int = Field(default=30, ge=1, le=7 * 24 * 60)

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
    def engine_options(self) -> EngineOptions:
        """The engine's own options of this source (validated again: a SourceConfig built in
        code never went through :func:`validate_options`)."""
        fields = EngineOptions.model_fields
        return EngineOptions.model_validate({k: v for k, v in self.options.items() if k in fields})

    @property
    def source_id(self) -> str:
        """The key under which state, lineage and index documents are filed."""
        return f"{self.kind}:{self.name}"

    @property
    def dag_id(self) -> str:
        return f"sync_{self.kind}_{self.name}"

    def processing_hash(self, versions: Mapping[str, Any] | None = None) -> str:
        """Hash of everything that changes what a document turns into in the index.

        Stored per item: a different hash on the next run re-processes the item even if the
        source says it did not change. ``versions``: what the caller knows and this layer cannot
        (the chunker's scheme version, the embedding model's id and dimensions), hashed with the
        configuration. BM25-only sources hash as before, so enabling nothing re-processes nothing.
        """
        parts: dict[str, Any] = {"parser": self.parser, "chunker": self.chunker.model_dump()}
        if self.embedding.enabled:
            parts["embedding"] = self.embedding.model_dump(
                exclude={"batch_size", "requests_per_minute", "timeout_seconds", "allow_private_networks"}
            )
        if versions:
            parts["versions"] = dict(versions)
        return options_hash(parts)


def _expand(value: Any) -> Any:
    if isinstance(value, str):
        return _ENV_REF.sub(lambda m: os.environ.get(m.group(1), m.group(2) or ""), value)
    if isinstance(value, list):
        return [_expand(v) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    return value


@dataclass(frozen=True, slots=True)
class SourceError:
    """A source entry that does not validate: where it is, which DAG it would have been, why."""

    index: int
    label: str  # "web:docs", or "#3" when the entry has no usable kind/name
    dag_id: str | None
    message: str

    def __str__(self) -> str:
        return self.message


def _entry_label(entry: Any, i: int) -> tuple[str, str | None]:
    if isinstance(entry, dict) and isinstance(entry.get("kind"), str) and isinstance(entry.get("name"), str):
        return f"{entry['kind']}:{entry['name']}", f"sync_{entry['kind']}_{entry['name']}"
    return f"#{i}", None


# Checks a source's options (raising ``ValueError``): the connector registry's
# ``validate_source_options``, which knows each kind's options model. The ground cannot import a
# component, so every caller above it passes the registry's check in.
OptionsCheck = Callable[[SourceConfig], object]


def load_sources_report(path: Path, validate: OptionsCheck) -> tuple[list[SourceConfig], list[SourceError]]:
    """Every valid source of a sources file, and one :class:`SourceError` per invalid entry.

    An entry is valid when its fields *and* its options (against its kind's model) validate, so
    a typo such as ``max_page`` is caught when the DAG file is parsed rather than when a run
    starts. One bad entry does not invalidate the others. ``validate`` checks the options
    (:data:`OptionsCheck`).
    """
    if not path.exists():
        return [], []
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    entries = _expand(raw.get("sources") or [])
    sources: list[SourceConfig] = []
    errors: list[SourceError] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        label, dag_id = _entry_label(entry, i)
        try:
            src = SourceConfig.model_validate(entry)
            validate(src)
        except Exception as exc:
            errors.append(SourceError(i, label, dag_id, f"{path}: source #{i} ({label}): {exc}"))
            continue
        if src.dag_id in seen:
            errors.append(SourceError(i, label, dag_id, f"{path}: duplicate source {src.dag_id}"))
            continue
        seen.add(src.dag_id)
        sources.append(src)
    return sources, errors


def load_sources(path: Path, validate: OptionsCheck) -> list[SourceConfig]:
    """Parse and validate a sources file. Raises ``ValueError`` naming the bad entries."""
    sources, errors = load_sources_report(path, validate)
    if errors:
        raise ValueError("\n".join(e.message for e in errors))
    return sources
