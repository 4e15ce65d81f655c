"""The connector interface every source implements, and the connector registry.

A connector owns all I/O with one kind of source. The engine (``plugins.engine``) calls it in
three places, each in its own Airflow task and possibly its own process:

1. ``discover(request)`` in the *discover* task: report what changed since the stored state
   (``request.known``), optionally inside a time window. A connector that must download an
   item to discover it (a crawler reads pages for links) may stage the bytes through
   ``request.stage`` and set ``Change.staged_path``. It returns :class:`Discovery`, which also
   says whether the listing was *complete* and, if so, every current item key: the engine
   derives deletions from that (absent keys), guarded against mass deletion.
2. ``fetch(change)`` in the mapped *fetch* tasks: return the item's bytes as a RawDocument.
3. ``close()`` when the task ends.

A connector never decides what is re-indexed: it reports version evidence, the engine
compares hashes of extracted content and processing options.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from include.config import SourceConfig
from include.contract import Change, RawDocument, VersionEvidence

__all__ = [
    "Connector",
    "ConnectorContext",
    "Discovery",
    "DiscoveryRequest",
    "FetchError",
    "get_connector_class",
    "register_connector",
]


class FetchError(Exception):
    """An item could not be fetched. ``retryable`` False means retrying next run is pointless
    until the source changes (e.g. 403); it is still recorded with its reason."""

    def __init__(self, message: str, *, reason: str = "fetch_error", retryable: bool = True) -> None:
        super().__init__(message)
        self.reason = reason
        self.retryable = retryable


@dataclass(slots=True)
class ConnectorContext:
    """Process-level services handed to a connector."""

    redis_url: str | None = None
    run_id: str | None = None
    log: Any = None  # a logging.Logger-like object


@dataclass(slots=True)
class DiscoveryRequest:
    """What the engine asks a connector for.

    ``known`` maps item keys to the version evidence stored after the last successful index
    write. Items that must be re-processed regardless (full resync, changed options) are left
    out of ``known`` so the connector treats them as new and sends no validators.
    ``stage(item_key, data)`` stores bytes in this run's staging area and returns the path.
    """

    known: Mapping[str, VersionEvidence]
    window_start: datetime | None = None
    window_end: datetime | None = None
    max_items: int | None = None
    full_resync: bool = False
    only_keys: list[str] | None = None
    # (item_key, bytes, file name) -> staged path; the file name keeps the extension
    stage: Callable[[str, bytes, str], str] | None = None
    # every indexed key, ``known`` or withheld from it (forced): what ``Discovery.renames`` may rename
    stored: frozenset[str] = frozenset()


@dataclass(slots=True)
class Discovery:
    changes: list[Change]
    complete: bool = False
    all_keys: set[str] | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    # old item key -> new key of the same item (a source that changed its key scheme): the engine
    # moves the stored state to the new key, keeping its doc id and chunk ids, so nothing is
    # re-indexed or deleted for it. ``changes`` and ``all_keys`` already use the new keys.
    renames: dict[str, str] = field(default_factory=dict)


_CONNECTORS: dict[str, type[Connector]] = {}


class Connector(abc.ABC):
    """Base class: subclasses set ``kind`` and are registered with :func:`register_connector`."""

    kind: ClassVar[str]
    # Dotted path of an operator that replaces the generic fetch task (e.g. a deferrable one
    # that waits for exports in the triggerer). Same input and output manifests as the generic one.
    fetch_operator: ClassVar[str | None] = None
    # Keep fetched bytes in staging after a successful run unless the source config says otherwise
    # (connectors that *build* the bytes, like Yuque's lakesheet -> .xlsx, keep them for audit).
    retain_raw: ClassVar[bool] = False

    def __init__(self, source: SourceConfig, context: ConnectorContext | None = None) -> None:
        self.source = source
        self.context = context or ConnectorContext()

    @abc.abstractmethod
    def discover(self, request: DiscoveryRequest) -> Discovery: ...

    @abc.abstractmethod
    def fetch(self, change: Change) -> RawDocument: ...

    def fetch_batch(self, changes: list[Change]) -> tuple[list[RawDocument], list[tuple[str, FetchError]]]:
        """Fetch a whole batch: (documents, [(item_key, error)]).

        The default calls :meth:`fetch` per change; connectors whose source works in batches
        (Feishu creates every export of a batch, then polls them together) override it.
        """
        docs: list[RawDocument] = []
        failures: list[tuple[str, FetchError]] = []
        for change in changes:
            try:
                docs.append(self.fetch(change))
            except FetchError as exc:
                failures.append((change.item_key, exc))
            except Exception as exc:  # a connector bug on one item must not lose the batch
                failures.append((change.item_key, FetchError(f"{type(exc).__name__}: {exc}")))
        return docs, failures

    def canonical_key(self, key: str) -> str:
        """The item key ``key`` names, in the form :meth:`discover` reports keys.

        The engine passes every key a user supplies (``only_keys`` from the trigger form, the
        REST API's conf, the CLI) through this before comparing it with stored state, so two
        spellings of one item never become two documents. Raises ``ValueError`` for a key that
        cannot name an item of this source. The default only trims surrounding whitespace.
        """
        canonical = key.strip()
        if not canonical:
            raise ValueError("an empty item key")
        return canonical

    def list_keys(self) -> set[str] | None:
        """Every current item key, or None when the source cannot list completely.

        The default re-runs an unconstrained discovery with nothing known; connectors with a
        cheaper listing override it.
        """
        found = self.discover(DiscoveryRequest(known={}))
        return found.all_keys if found.complete else None

    def input_dataset(self) -> tuple[str, str]:
        """(namespace, name) of the source for lineage, e.g. ("https://site", "/")."""
        return (self.kind, self.source.name)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients; called when the task ends."""

    def __enter__(self) -> Connector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def register_connector(cls: type[Connector]) -> type[Connector]:
    _CONNECTORS[cls.kind] = cls
    return cls


def get_connector_class(kind: str) -> type[Connector]:
    if kind not in _CONNECTORS:
        # Connectors live in plugins/connectors/<kind>/connector.py; importing it registers them
        # (the package itself stays light: the DAG processor imports its options model).
        import importlib

        try:
            importlib.import_module(f"plugins.connectors.{kind}.connector")
        except ModuleNotFoundError as exc:
            if exc.name not in (f"plugins.connectors.{kind}", f"plugins.connectors.{kind}.connector"):
                raise
    try:
        return _CONNECTORS[kind]
    except KeyError:
        raise KeyError(f"no connector registered for kind {kind!r}") from None
