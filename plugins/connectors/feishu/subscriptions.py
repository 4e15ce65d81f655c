"""Drive event subscriptions kept in step with the index (issue 37, point 4).

Feishu sends a document's drive events (edit, title update, trash, delete, permission changes)
only to an app that subscribed that document, and the creations in a folder only to an app that
subscribed the folder. The calls, as larksuite/oapi-sdk-python builds them
(``lark_oapi/api/drive/v1/model/{subscribe,get_subscribe,delete_subscribe}_file_request.py``)::

    POST   /open-apis/drive/v1/files/:file_token/subscribe?file_type=...[&event_type=...]
    GET    /open-apis/drive/v1/files/:file_token/get_subscribe?file_type=...   -> {"is_subscribe": bool}
    DELETE /open-apis/drive/v1/files/:file_token/delete_subscribe?file_type=...

``file_type`` is one of doc, docx, sheet, bitable, file, folder, slides; ``event_type`` is given
for a folder only, and then is ``file.created_in_folder_v1``. The three share one request budget
(``subscribe``: 50/s and 1000/min, :mod:`.budget`). Their business error codes (the 10696xx
family) could not be checked here, so failures are judged by the client's error classes (which
fall back to the HTTP status), never by a code.

After each committed sync the connector compares the index with what the state database says it
holds (:class:`include.stores.subscriptions.SubscriptionStore`) and sends only the difference:
unsubscribe files that left the index, subscribe files new to it (and the configured folders),
then re-check subscriptions confirmed more than ``recheck_days`` ago (get_subscribe; a lapsed one
is made again) and retry failed ones as old. At most ``max_requests_per_run`` requests a run;
what is left is counted ``deferred`` and done by the next run. Nothing here fails the sync.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from include.settings import get_settings
from include.stores.subscriptions import Subscription, SubscriptionStore
from plugins.connectors.feishu.client import FeishuClient
from plugins.connectors.feishu.discovery import resolve_folders
from plugins.connectors.feishu.errors import FeishuAuthError, FeishuError, FeishuNotFoundError

if TYPE_CHECKING:
    from plugins.connectors.base import Committed
    from plugins.connectors.feishu.connector import FeishuConnector

__all__ = [
    "FOLDER_EVENT",
    "SUBSCRIBABLE_TYPES",
    "SubscriptionCounts",
    "SubscriptionKeeper",
    "is_subscribed",
    "maintain_subscriptions",
    "subscribe",
    "unsubscribe",
]

log = logging.getLogger(__name__)

FOLDER_EVENT = "file.created_in_folder_v1"
# the file_type values the subscribe call takes for a file (folder: a folder subscription)
SUBSCRIBABLE_TYPES = frozenset({"doc", "docx", "sheet", "bitable", "file", "slides"})


def _params(file_type: str) -> dict[str, str]:
    params = {"file_type": file_type}
    if file_type == "folder":
        params["event_type"] = FOLDER_EVENT
    return params


def subscribe(client: FeishuClient, token: str, file_type: str) -> None:
    client.call("POST", f"/drive/v1/files/{token}/subscribe", api="subscribe", params=_params(file_type))


def is_subscribed(client: FeishuClient, token: str, file_type: str) -> bool:
    path = f"/drive/v1/files/{token}/get_subscribe"
    return bool(client.call("GET", path, api="subscribe", params=_params(file_type)).get("is_subscribe"))


def unsubscribe(client: FeishuClient, token: str, file_type: str) -> None:
    path = f"/drive/v1/files/{token}/delete_subscribe"
    client.call("DELETE", path, api="subscribe", params=_params(file_type))


@dataclass(slots=True)
class SubscriptionCounts:
    """One pass: requests sent and what came of them (the run log's ``counts.subscriptions``)."""

    subscribed: int = 0
    unsubscribed: int = 0
    renewed: int = 0  # a re-check found the subscription gone and made it again
    checked: int = 0  # a re-check found it in place
    failed: int = 0
    deferred: int = 0  # over this run's request cap: the next run does them
    requests: int = 0
    active: int = 0  # subscriptions held after the pass
    errors: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "subscribed": self.subscribed,
            "unsubscribed": self.unsubscribed,
            "renewed": self.renewed,
            "checked": self.checked,
            "failed": self.failed,
            "deferred": self.deferred,
            "requests": self.requests,
            "active": self.active,
            "errors": dict(self.errors),
        }


@dataclass(frozen=True, slots=True)
class _Want:
    token: str
    file_type: str
    scope: str  # file | folder


class SubscriptionKeeper:
    """Compares the index with the stored subscriptions of one source and sends the difference."""

    def __init__(
        self,
        client: FeishuClient,
        store: SubscriptionStore,
        source_id: str,
        *,
        max_requests: int = 900,
        recheck_after: dt.timedelta = dt.timedelta(days=7),
        now: dt.datetime | None = None,
    ) -> None:
        self.client, self.store, self.source_id = client, store, source_id
        self.max_requests = max_requests
        self.now = now or dt.datetime.now(dt.UTC)
        self.stale_before = self.now - recheck_after
        self.counts = SubscriptionCounts()

    def sync(self, indexed: Mapping[str, str | None], folders: Sequence[str]) -> SubscriptionCounts:
        """``indexed``: every indexed file token -> its file type (None: not known this run; such
        a file is subscribed once a run lists it). ``folders``: folder tokens to subscribe."""
        rows = self.store.all(self.source_id)
        wanted = {t: _Want(t, kind, "file") for t, kind in indexed.items() if kind in SUBSCRIBABLE_TYPES}
        wanted.update({f: _Want(f, "folder", "folder") for f in folders})
        # files gone from the index (and folders no longer configured), then new ones, then the
        # stale: a file that left must not keep sending events while new ones wait
        held = {t: r for t, r in rows.items() if t in wanted or (r.scope == "file" and t in indexed)}
        gone = [r for t, r in rows.items() if t not in held]
        new = [w for t, w in wanted.items() if t not in rows]
        stale = sorted((r for r in held.values() if r.checked_at < self.stale_before), key=lambda r: r.checked_at)
        try:
            self._each(gone, self._remove)
            self._each(new, self._add)
            self._each(stale, self._recheck)
        except FeishuAuthError as exc:  # every further request would be refused alike
            self.failed(exc)
            log.warning("%s: subscriptions stopped: %s", self.source_id, exc)
        self.counts.active = sum(1 for r in self.store.all(self.source_id).values() if r.active)
        return self.counts

    def _each(self, todo: Sequence[Any], step: Any) -> None:
        for entry in todo:
            if self.counts.requests >= self.max_requests:
                self.counts.deferred += 1
                continue
            step(entry)

    def failed(self, exc: FeishuError) -> None:
        self.counts.failed += 1
        name = type(exc).__name__
        self.counts.errors[name] = self.counts.errors.get(name, 0) + 1

    def _send(self, fn: Any, token: str, file_type: str) -> Any:
        self.counts.requests += 1
        return fn(self.client, token, file_type)

    def _add(self, want: _Want) -> None:
        try:
            self._send(subscribe, want.token, want.file_type)
        except FeishuAuthError:
            raise
        except FeishuError as exc:
            self.failed(exc)
            if not exc.retryable:  # e.g. not allowed on this file: tried again after recheck_days
                self.store.mark_failed(self.source_id, want.token, want.file_type, want.scope, str(exc), self.now)
            return
        self.store.mark_subscribed(self.source_id, want.token, want.file_type, want.scope, self.now)
        self.counts.subscribed += 1

    def _remove(self, row: Subscription) -> None:
        if not row.active:  # never held: nothing to cancel at the service
            self.store.forget(self.source_id, [row.token])
            return
        try:
            self._send(unsubscribe, row.token, row.file_type)
        except FeishuAuthError:
            raise
        except FeishuNotFoundError:
            pass  # trashed or deleted at the service: its subscription went with it
        except FeishuError as exc:
            self.failed(exc)
            if exc.retryable:
                return  # kept: the next run tries again
            self.store.forget(self.source_id, [row.token])  # refused for good: not ours to cancel
            return
        self.counts.unsubscribed += 1
        self.store.forget(self.source_id, [row.token])

    def _recheck(self, row: Subscription) -> None:
        want = _Want(row.token, row.file_type, row.scope)
        if not row.active:
            self._add(want)
            return
        try:
            held = self._send(is_subscribed, row.token, row.file_type)
        except FeishuAuthError:
            raise
        except FeishuError as exc:
            self.failed(exc)
            return
        if held:
            self.store.mark_subscribed(self.source_id, row.token, row.file_type, row.scope, self.now)
            self.counts.checked += 1
            return
        before = self.counts.subscribed
        self._add(want)
        if self.counts.subscribed > before:
            self.counts.subscribed, self.counts.renewed = before, self.counts.renewed + 1


def maintain_subscriptions(connector: FeishuConnector, committed: Committed) -> dict[str, Any]:
    """The connector's after-commit upkeep: only with ``events`` on and ``subscribe`` set."""
    events = connector.source.events
    if not (events.enabled and events.subscribe):
        return {}
    settings = get_settings()
    settings.ensure_dirs()  # the default state database is a file under TRIBUTARY_HOME
    store = SubscriptionStore(settings.state_url)
    try:
        options = connector.options.subscriptions
        keeper = SubscriptionKeeper(
            connector.client,
            store,
            connector.source.source_id,
            max_requests=options.max_requests_per_run,
            recheck_after=dt.timedelta(days=options.recheck_days),
        )
        indexed = {key: _file_type(committed.metadata.get(key)) for key in committed.indexed}
        try:
            folders = resolve_folders(connector.client, connector.options.folders)
        except FeishuError as exc:  # the root folder lookup failed: files still kept in step
            keeper.failed(exc)
            folders = []
        return {"subscriptions": keeper.sync(indexed, folders).to_dict()}
    finally:
        store.close()


def _file_type(metadata: Mapping[str, Any] | None) -> str | None:
    kind = (metadata or {}).get("feishu_type")
    return str(kind) if kind else None
