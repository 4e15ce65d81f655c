"""The connector interface every source implements, and the connector registry.

A connector owns all I/O with one kind of source. The engine (``plugins.engine``) calls it in
three places, each in its own Airflow task and possibly its own process:

1. ``discover(request)`` in the *discover* task: report what changed since the stored state
   (``request.known``), optionally inside a time window. A connector that must download an
   item to discover it (a crawler reads pages for links) may stage the bytes through
   ``request.stage`` and set ``Change.staged_path``. It returns :class:`Discovery`, which also
   says whether the listing was *complete* and, if so, every current item key: the engine
   derives deletions from that (absent keys), guarded against mass deletion.
2. ``fetch_batch(changes)`` in the mapped *fetch* tasks: each item's bytes as a RawDocument
   (the default calls ``fetch(change)`` per item).
3. ``close()`` when the task ends.

Besides: ``canonical_key(key)`` for every key a user supplies, ``input_dataset()`` for lineage,
and optionally ``partitions()``: disjoint parts of the source (a crawler's hosts) that the engine
may discover in parallel, one ``discover(request)`` with ``request.partition`` set per part, then
merged into one listing. Partitions come from the options alone (:func:`source_partitions`), so
the DAG factory can map a task over them at parse time without importing the connector.
Which operator runs the fetch task is the DAG factory's business (a kind's operator table there),
not the connector's.

A connector never decides what is re-indexed: it reports version evidence, the engine
compares hashes of extracted content and processing options.

Each connector class names its options model (``options_model``, a subclass of the ground's
:class:`~include.config.EngineOptions` that refuses unknown keys) and reads ``source.options``
only through it. :func:`validate_source_options` checks a source against its kind's model
without importing the connector (a sources file is loaded at every DAG parse); the connector
validates the same model again when it is built. Credentials reach a connector as a
:class:`~include.connections.ConnectionRecord`, read with ``include.connections``.
"""

from __future__ import annotations

import abc
import difflib
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Protocol, runtime_checkable

from pydantic import ValidationError

from include.acl import AccessControl, declared_access
from include.config import EngineOptions, SourceConfig
from include.contract import Change, RawDocument, VersionEvidence
from include.loading import load_class
from include.staging import StagedFile

__all__ = [
    "AccessReading",
    "AccessRequest",
    "CallbackSetup",
    "Committed",
    "Connector",
    "ConnectorContext",
    "Discovery",
    "DiscoveryRequest",
    "FetchError",
    "GroupListing",
    "PartitionedOptions",
    "callback_setup",
    "get_connector_class",
    "options_model",
    "read_fail_closed",
    "register_connector",
    "source_partitions",
    "syncs_permissions",
    "validate_source_options",
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
    # one of ``Connector.partitions()``: discover only that part of the source. The Discovery's
    # ``complete`` and ``all_keys`` then speak for that part alone (the engine merges the parts).
    partition: str | None = None
    # (bytes) -> staged file: where a partition's discovery spills a list too long to hold in
    # memory (its hand-offs, ``include/staging/handoffs.py``); None outside a partitioned discovery
    spill: Callable[[bytes], StagedFile] | None = None
    # (running counts: pages, fetched, bytes) -> None: where a long discovery says how far it got
    # (a terminal's progress line); None when nobody is watching
    progress: Callable[[Mapping[str, int]], None] | None = None
    # (change) -> None: a change whose bytes are staged, handed over as soon as it is final while
    # discovery goes on (the engine may parse it early; ``fetch`` of it must give the same
    # document later). None: nobody wants them early
    prepare: Callable[[Change], None] | None = None


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


@dataclass(frozen=True, slots=True)
class AccessRequest:
    """One item whose permissions the engine asks for: its key, URL and the metadata its
    discovery gave (a content sync); a permission sync knows the stored key and URL only."""

    item_key: str
    url: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Committed:
    """What a run's commit left in the index, for a connector's upkeep after it
    (:meth:`Connector.after_commit`): every key of the source now indexed, and the discovery
    metadata of those this run saw (an ``only_keys`` run sees a few)."""

    indexed: frozenset[str]
    metadata: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(slots=True)
class GroupListing:
    """Every group of a source and its members, flattened (nested departments resolved):
    group entry -> user entries (``include.acl``). ``complete`` False (a page failed): the
    engine keeps the stored memberships of the groups it did not get in full."""

    members: dict[str, frozenset[str]] = field(default_factory=dict)
    complete: bool = True
    errors: dict[str, int] = field(default_factory=dict)
    requests: int = 0


_CONNECTORS: dict[str, type[Connector]] = {}


class Connector(abc.ABC):
    """Base class: subclasses set ``kind`` and are registered with :func:`register_connector`."""

    kind: ClassVar[str]
    # the model of ``source.options`` (the one :func:`options_model` names for ``kind``)
    options_model: ClassVar[type[EngineOptions]]
    # Keep fetched bytes in staging after a successful run unless the source config says otherwise
    # (connectors that *build* the bytes, like Yuque's lakesheet -> .xlsx, keep them for audit).
    retain_raw: ClassVar[bool] = False
    # Hands staged changes to ``DiscoveryRequest.prepare`` during discovery (the engine then
    # starts its parse workers before discovery; for a connector that never does, it does not)
    prepares: ClassVar[bool] = False

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

    def read_access(self, items: Sequence[AccessRequest]) -> dict[str, AccessControl]:
        """Each item's permissions, by item key; an item missing from the answer is unknown
        (private). Default: the source entry's declared ``acl`` block (public without one).
        Connectors of sources that hold permissions (Feishu, Yuque) read them from the source,
        fail-closed: what cannot be read is ``AccessControl.unknown(reason)``, never public."""
        return {item.item_key: declared_access(self.source.acl, item.item_key) for item in items}

    def group_memberships(self) -> GroupListing | None:
        """The source's groups and their members, for searches to expand; None: the source
        has no groups of its own (a web site; the principals file's static groups serve it)."""
        return None

    def after_commit(self, committed: Committed) -> dict[str, Any]:
        """Upkeep at the service once the index holds ``committed`` (Feishu keeps its event
        subscriptions in step). Counts for the run log; it must never fail the run. Default: none."""
        return {}

    def partitions(self) -> list[str]:
        """Disjoint parts of the source the engine may discover in parallel (``[]``: one
        discovery, not partitioned). The default asks the options model
        (:func:`source_partitions`), the same answer the DAG factory gets at parse time."""
        return source_partitions(self.source)

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

    def input_dataset(self) -> tuple[str, str]:
        """(namespace, name) of the source for lineage, e.g. ("https://site", "/")."""
        return (self.kind, self.source.name)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients; called when the task ends."""

    def __enter__(self) -> Connector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AccessReading(Protocol):
    """A connector's permission reader: answers by item key, and the causes of its unknowns."""

    @property
    def errors(self) -> Mapping[str, int]: ...

    def read(self, items: Sequence[AccessRequest]) -> dict[str, AccessControl]: ...


def read_fail_closed(
    label: str,
    items: Sequence[AccessRequest],
    make_reader: Callable[[], AccessReading],
    sent: Callable[[], int],
    log: Any,
) -> tuple[dict[str, AccessControl], dict[str, Any]]:
    """``make_reader().read(items)`` and its stats (requests by ``sent()``, causes of unknowns);
    anything it raises (no Connection, a bug) makes the whole batch unknown: private, not lost."""
    try:
        start = sent()
        reader = make_reader()
        found = reader.read(items)
    except Exception as exc:
        log.warning("%s permissions unreadable: %s", label, type(exc).__name__)
        failed = AccessControl.unknown(f"acl_unknown:{type(exc).__name__}", str(exc)[:200])
        return {item.item_key: failed for item in items}, {"requests": 0, "errors": {failed.unknown_reason: len(items)}}
    return found, {"requests": sent() - start, "errors": dict(reader.errors)}


def register_connector(cls: type[Connector]) -> type[Connector]:
    """Register ``cls`` for its ``kind``; it must name its options model (``TypeError`` if not)."""
    model = getattr(cls, "options_model", None)
    if not (isinstance(model, type) and issubclass(model, EngineOptions)):
        raise TypeError(f"{cls.__qualname__}: options_model must be an EngineOptions subclass")
    _CONNECTORS[cls.kind] = cls
    return cls


def get_connector_class(kind: str) -> type[Connector]:
    if kind not in _CONNECTORS:
        # Connectors live in plugins/connectors/<kind>/connector.py; importing it registers them
        # (by name: the packages stay light, the DAG processor imports only their options models).
        try:
            importlib.import_module(f"plugins.connectors.{kind}.connector")
        except ModuleNotFoundError as exc:
            if exc.name not in (f"plugins.connectors.{kind}", f"plugins.connectors.{kind}.connector"):
                raise
    try:
        return _CONNECTORS[kind]
    except KeyError:
        raise KeyError(f"no connector registered for kind {kind!r}") from None


@dataclass(frozen=True, slots=True)
class CallbackSetup:
    """How a kind takes pushed change events (``plugins/connectors/<kind>/events.py``): the
    Connection it reads when the source names none, the extras holding its secrets, the one
    of them (if any) that goes into the callback URL, and the event types to enable at the
    service."""

    default_conn_id: str
    secret_extras: tuple[str, ...]
    event_types: tuple[str, ...]
    url_secret_extra: str | None = None


def callback_setup(kind: str) -> CallbackSetup | None:
    """The kind's :class:`CallbackSetup` (its ``events`` module's ``CALLBACK_SETUP``), or None
    for a kind that takes no callbacks."""
    try:
        module = importlib.import_module(f"plugins.connectors.{kind}.events")
    except ModuleNotFoundError as exc:
        if exc.name not in (f"plugins.connectors.{kind}", f"plugins.connectors.{kind}.events"):
            raise
        return None
    setup = getattr(module, "CALLBACK_SETUP", None)
    return setup if isinstance(setup, CallbackSetup) else None


# kind -> "module:Model" of its options. Names, not imports: checking a sources file (every DAG
# parse) imports these modules (pydantic and the ground only), never a connector and its libraries.
_OPTIONS_MODELS = {
    "web": "plugins.connectors.web.options:WebOptions",
    "files": "plugins.connectors.files.options:FilesOptions",
    "feishu": "plugins.connectors.feishu.options:FeishuOptions",
    "yuque": "plugins.connectors.yuque.options:YuqueOptions",
}


def options_model(kind: str) -> type[EngineOptions]:
    """The options model of a connector kind (``ValueError`` for a kind with none)."""
    try:
        path = _OPTIONS_MODELS[kind]
    except KeyError:
        raise ValueError(f"unknown kind {kind!r} (known: {', '.join(sorted(_OPTIONS_MODELS))})") from None
    return load_class(path, EngineOptions)


def validate_source_options(source: SourceConfig) -> EngineOptions:
    """``source.options`` validated against its kind's model; ``ValueError`` names each bad key
    (``options.max_page: unknown option (did you mean max_pages?)``), never a value."""
    model = options_model(source.kind)
    try:
        return model.model_validate(source.options)
    except ValidationError as exc:
        raise ValueError("; ".join(_describe(e, model) for e in exc.errors(include_input=False))) from None


# kinds whose connectors read permissions (and group memberships) from the source itself
_PERMISSION_KINDS = frozenset({"feishu", "yuque"})


def syncs_permissions(source: SourceConfig) -> bool:
    """Whether ``source`` has permissions to keep current (its ``perms_<kind>_<name>`` DAG, the
    CLI's ``permissions`` command): a kind that reads them from its source, or a declared ``acl``
    block (re-applied on the cadence, so an edited block reaches the index without a resync).
    A web or files source without one is public and has nothing to sync."""
    return source.kind in _PERMISSION_KINDS or source.acl is not None


@runtime_checkable
class PartitionedOptions(Protocol):
    """An options model that can split its source into parts discovered in parallel."""

    def partitions(self) -> list[str]: ...


def source_partitions(source: SourceConfig) -> list[str]:
    """The partitions of ``source`` from its options model alone (``[]`` for a kind whose options
    have none, or when there is at most one part). No connector is imported: the DAG factory calls
    this at parse time to map one task per partition."""
    options = validate_source_options(source)
    if not isinstance(options, PartitionedOptions):
        return []
    parts = list(options.partitions())
    return parts if len(parts) > 1 else []


def _describe(error: Mapping[str, Any], model: type[EngineOptions]) -> str:
    """One pydantic error as ``options.<key>: <what is wrong>`` (never the value)."""
    loc = ".".join(str(p) for p in error.get("loc", ()))
    where = f"options.{loc}" if loc else "options"
    if error.get("type") == "extra_forbidden":
        if len(error["loc"]) != 1:
            return f"{where}: unknown option"
        close = difflib.get_close_matches(str(error["loc"][0]), list(model.model_fields), n=1)
        hint = f"did you mean {close[0]}?" if close else f"valid options: {', '.join(model.model_fields)}"
        return f"{where}: unknown option ({hint})"
    if error.get("type") == "value_error" and "error" in (error.get("ctx") or {}):
        return f"{where}: {error['ctx']['error']}"
    return f"{where}: {error.get('msg', 'invalid')}"
