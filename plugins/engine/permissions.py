"""The light permission sync: re-read every indexed item's permissions, update the index's
entries of the documents whose permissions changed, and the group memberships searches expand.

Nothing is fetched, parsed, chunked or embedded: :func:`sync_permissions` asks the connector for
the stored items' permissions in batches (``read_access``, one call per batch), compares each
answer's digest with the stored one (:class:`include.stores.access.AccessStore`), and writes
only the changed documents' entries (``IndexBackend.set_access``, no chunk rewritten), then their
rows (after the index write: a crash in between leaves the index ahead, and the next sync finds
the digest still differing and writes it again). Fail-closed as everywhere: an answer missing
or a read that raises makes the item unknown, so private, and the run ``partial``.

Each sync is a run in the run log (``params={"kind": "permissions"}``, run type
``permissions``, id ``permissions__<run id>``, so it never collides with the content DAG's run
of the same schedule), with one lineage row per item whose permissions changed (action
``changed``, ``access``: the :class:`include.acl.AccessChange`). Revocation reaches the index at
the next permission sync: the lag is the source's ``permission_sync_minutes``.

:func:`sync_groups` stores the source's group memberships (``group_memberships``), which
``AccessStore.groups_of`` expands a searcher's identities through.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from include.acl import ACL_UNKNOWN, AccessChange, AccessControl
from include.config import SourceConfig
from include.index import IndexBackend
from include.stores import ItemState, RunItem
from include.stores.access import AccessStore, StoredAccess
from plugins.connectors.base import AccessRequest, Connector
from plugins.engine.access import access_lineage
from plugins.engine.alerts import acl_unknown_breach, build_failure_summary, post_failure_summary
from plugins.engine.reaper import process_owner

__all__ = ["PERMISSIONS_KIND", "GroupSyncResult", "PermissionSyncResult", "sync_groups", "sync_permissions"]

log = logging.getLogger("tributary")

PERMISSIONS_KIND = "permissions"  # the run log's params["kind"] and run_type of a permission sync
_MAX_CHANGES_SHOWN = 200  # to_dict() (an XCom, a CLI answer) lists this many changes


@dataclass(slots=True)
class PermissionSyncResult:
    source: str
    run_id: str
    checked: int = 0  # indexed items whose permissions were read
    changed: int = 0  # ... whose entries changed (written to the index)
    unchanged: int = 0
    unknown: int = 0  # ... whose permissions are unknown now (private)
    errors: dict[str, int] = field(default_factory=dict)  # read_access failures by kind
    requests: int = 0  # read_access calls (one per batch)
    seconds: float = 0.0
    changes: list[dict[str, Any]] = field(default_factory=list)  # {item_key, doc_id, **AccessChange}
    outcome: str = "success"

    def counts(self) -> dict[str, Any]:
        """The run log's counts of this sync."""
        reasons = {ACL_UNKNOWN: self.unknown} if self.unknown else {}
        note = f"{self.unknown} of {self.checked} documents private: permissions unreadable" if self.unknown else ""
        return {
            "kind": PERMISSIONS_KIND,
            **{k: getattr(self, k) for k in ("checked", "changed", "unchanged", "unknown", "requests")},
            "acl_changed": self.changed,
            "acl_unknown": self.unknown,
            "errors": dict(self.errors),
            "seconds": self.seconds,
            "chunks_embedded": 0,  # a permission sync never embeds, parses or chunks
            "outcome": self.outcome,
            "reasons": reasons,
            "outcome_note": note,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "run_id": self.run_id,
            **self.counts(),
            "changes": self.changes[:_MAX_CHANGES_SHOWN],
            "changes_total": len(self.changes),
        }


@dataclass(slots=True)
class GroupSyncResult:
    source: str
    synced: bool  # False: the source has no groups of its own (nothing stored)
    groups: int = 0
    memberships: int = 0
    kept_groups: int = 0  # groups an incomplete listing did not list, whose stored members stay
    complete: bool = True
    errors: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _run_id(run_id: str | None) -> str:
    if run_id is None:
        run_id = f"inline__{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}_{uuid.uuid4().hex[:6]}"
    return run_id if run_id.startswith(f"{PERMISSIONS_KIND}__") else f"{PERMISSIONS_KIND}__{run_id}"


def sync_permissions(
    source: SourceConfig,
    *,
    store: AccessStore,
    index: IndexBackend,
    connector: Connector,
    batch_size: int = 100,
    run_id: str | None = None,
    dag_id: str | None = None,
    only_keys: Collection[str] | None = None,
    trigger: Mapping[str, Any] | None = None,
) -> PermissionSyncResult:
    """Re-read the permissions of every indexed item of ``source`` (of those in ``only_keys``
    only, when given: a permission event's documents); write the changed ones to the index, then
    to ``store``; record the run (with ``trigger``, what started it, in its params). Raises what the index or the store raise (the
    run is then closed as failed); a connector's failure to read permissions does not raise."""
    sid, start = source.source_id, time.perf_counter()
    result = PermissionSyncResult(sid, _run_id(run_id))
    state = store.state
    state.start_run(
        result.run_id,
        sid,
        dag_id=dag_id,
        run_type=PERMISSIONS_KIND,
        params={
            "kind": PERMISSIONS_KIND,
            **({"only_keys": sorted(only_keys)} if only_keys is not None else {}),
            **({"trigger": dict(trigger)} if trigger else {}),
        },
        index_backend=source.index.backend,
        index_name=source.index.name,
        owner=process_owner(),  # who runs it, for the reaper (plugins.engine.reaper)
    )
    try:
        only = set(only_keys) if only_keys is not None else None
        items = [st for st in state.items(sid).values() if st.indexed and (only is None or st.item_key in only)]
        lineage: list[RunItem] = []
        for begin in range(0, len(items), max(batch_size, 1)):
            lineage += _sync_batch(items[begin : begin + batch_size], sid, store, index, connector, result)
            state.heartbeat(result.run_id, sid)
        state.record_run_items(result.run_id, sid, lineage)
    except Exception as exc:
        result.seconds = round(time.perf_counter() - start, 3)
        state.finish_run(result.run_id, "failed", result.counts(), f"{type(exc).__name__}: {exc}"[:2000], source=sid)
        raise
    result.seconds = round(time.perf_counter() - start, 3)
    result.outcome = "partial" if result.unknown else "success"
    counts = result.counts()
    state.finish_run(result.run_id, result.outcome, counts, counts["outcome_note"] or None, source=sid)
    _alert(source, result, dag_id)
    log.info("%s: permission sync %s", sid, {k: v for k, v in counts.items() if k != "reasons"})
    return result


def _read(
    connector: Connector, requests: Sequence[AccessRequest], result: PermissionSyncResult
) -> tuple[dict[str, AccessControl], str | None]:
    """One ``read_access`` call: (answers by key, why the call failed). A failure counts in
    ``errors`` and answers nothing, so every item of the batch is unknown (private)."""
    result.requests += 1
    try:
        return dict(connector.read_access(requests)), None
    except Exception as exc:
        result.errors[type(exc).__name__] = result.errors.get(type(exc).__name__, 0) + 1
        log.warning("%s: reading permissions failed: %s: %s", result.source, type(exc).__name__, exc)
        return {}, f"reading permissions failed: {type(exc).__name__}: {exc}"[:500]


def _answer(
    found: Mapping[str, AccessControl], key: str, failed: str | None, result: PermissionSyncResult
) -> AccessControl:
    access = found.get(key)
    if isinstance(access, AccessControl):
        return access
    if failed is None:  # the call worked but said nothing of this item
        result.errors["no_answer"] = result.errors.get("no_answer", 0) + 1
    return AccessControl.unknown(ACL_UNKNOWN, failed or "the connector returned no permissions for this item")


def _sync_batch(
    items: Sequence[ItemState],
    sid: str,
    store: AccessStore,
    index: IndexBackend,
    connector: Connector,
    result: PermissionSyncResult,
) -> list[RunItem]:
    """Read, compare and write one batch; its lineage rows (the changed items)."""
    found, failed = _read(connector, [AccessRequest(st.item_key, st.url) for st in items], result)
    stored = store.get(sid, [st.item_key for st in items])
    # items indexed before permissions were stored: compare with what the index holds
    in_index = index.access_of(sid, [st.doc_id for st in items if st.item_key not in stored])
    rows: list[StoredAccess] = []
    updates: dict[str, tuple[str, ...]] = {}
    lineage: list[RunItem] = []
    for st in items:
        access = _answer(found, st.item_key, failed, result)
        result.checked += 1
        result.unknown += not access.known
        old = stored.get(st.item_key)
        if old is None or _differs(old, in_index.get(st.doc_id), access):
            rows.append(StoredAccess.of(st.item_key, st.doc_id, access, result.run_id))
        if not _differs(old, in_index.get(st.doc_id), access):
            result.unchanged += 1
            continue
        result.changed += 1
        updates[st.doc_id] = access.entries()
        detail = access_lineage(AccessChange.between(old.access if old is not None else None, access), access)
        result.changes.append({"item_key": st.item_key, "doc_id": st.doc_id, **detail})
        lineage.append(RunItem(st.item_key, "changed", doc_id=st.doc_id, reason="permissions changed", access=detail))
    if updates:
        index.set_access(sid, updates)  # the index first: a stored digest never runs ahead of it
    store.save(sid, rows)
    return lineage


def _differs(old: StoredAccess | None, indexed: tuple[str, ...] | None, access: AccessControl) -> bool:
    if old is not None:
        return old.digest != access.digest()
    return indexed != access.entries()


def _alert(source: SourceConfig, result: PermissionSyncResult, dag_id: str | None) -> None:
    """A sync that made documents private (``acl_unknown``) alerts like a content run does."""
    breaches = acl_unknown_breach(result.counts(), source.options or {})
    if not breaches:
        return
    try:
        summary = build_failure_summary(
            source=result.source,
            dag_id=dag_id or f"perms_{source.kind}_{source.name}",
            run_id=result.run_id,
            failed_stage=None,
            run={"counts": result.counts()},
            items=[],
        )
        summary["outcome"] = "; ".join(breaches)
        post_failure_summary(summary)
    except Exception as exc:  # a broken alert must not fail a finished sync
        log.warning("alert for permission sync %s failed: %s", result.run_id, type(exc).__name__)


def sync_groups(source: SourceConfig, *, store: AccessStore, connector: Connector) -> GroupSyncResult:
    """Store the source's group memberships (replacing its groups; an incomplete listing keeps
    the stored members of the groups it did not list). A source without groups of its own
    (``group_memberships()`` is None) stores nothing. A listing that raises propagates: the
    stored memberships stay as they were and the task fails (and alerts)."""
    start = time.perf_counter()
    listing = connector.group_memberships()
    if listing is None:
        return GroupSyncResult(source.source_id, synced=False, seconds=round(time.perf_counter() - start, 3))
    stored: Mapping[str, int] = store.replace_groups(source.source_id, listing)
    return GroupSyncResult(
        source.source_id,
        synced=True,
        groups=stored["groups"],
        memberships=stored["memberships"],
        kept_groups=stored["kept_groups"],
        complete=listing.complete,
        errors=dict(listing.errors),
        requests=listing.requests,
        seconds=round(time.perf_counter() - start, 3),
    )
