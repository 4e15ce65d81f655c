"""The Feishu fetch operator: creates a batch's export tasks, defers while Feishu renders them,
then downloads and writes the same ``fetched`` manifest as the generic fetch task.

The DAG factory's fetch-operator table maps the ``feishu`` kind to it. It is the generic
:class:`~plugins.tributary_airflow.operators.sync.FetchOperator` with another step,
:class:`FeishuExportFetchStep` (a :class:`~plugins.engine.steps.FetchStep`), so a cleared task
of a finished run does nothing here too, and failpoints, timing and OpenLineage facets are the
fetch step's. Waiting happens in
:class:`~plugins.tributary_airflow.triggers.feishu.FeishuExportTrigger` so no worker slot is held;
not deferrable, the same concurrent polling runs in the task.

Deferrable or not: the ``deferrable`` argument if given, else the source's ``deferrable`` option
if set, else Airflow's ``[operators] default_deferrable`` (as Airflow's providers default).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from typing import Any, NoReturn

from airflow.configuration import conf
from airflow.sdk import Context

from include.contract import Change, RawDocument
from include.staging import StagingArea
from include.stores import StateStore
from plugins.connectors.base import Connector, FetchError
from plugins.connectors.feishu.connector import FeishuConnector
from plugins.connectors.feishu.exports import ExportTicket
from plugins.connectors.feishu.options import FeishuOptions
from plugins.engine import ItemFailure, RunContext, read_batch, write_fetched_manifest
from plugins.engine.process import read_batch_access
from plugins.engine.steps import ConnectorOpener, FetchStep, ManifestResult
from plugins.tributary_airflow.operators.base import run_context
from plugins.tributary_airflow.operators.sync import FetchOperator, _connector
from plugins.tributary_airflow.triggers.feishu import FeishuExportTrigger

__all__ = ["FeishuExportFetchOperator", "FeishuExportFetchStep"]

log = logging.getLogger("tributary")

# (connector, tickets still rendering, failures so far, documents staged so far) -> defers
Defer = Callable[[FeishuConnector, list[ExportTicket], list[dict[str, Any]], list[dict[str, Any]]], NoReturn]


class FeishuExportFetchStep(FetchStep):
    """Fetch one batch through Feishu's export tasks; ``defer`` hands the waiting to the
    triggerer (it raises), after which :meth:`resume` continues with the trigger's event."""

    def __init__(
        self, ctx: RunContext, manifest: str, connect: ConnectorOpener, *, deferrable: bool, defer: Defer
    ) -> None:
        super().__init__(ctx, manifest, connect)
        self.deferrable = deferrable
        self.defer = defer

    def _execute(self, store: StateStore) -> ManifestResult:
        changes = read_batch(self.manifest)
        with self.connect() as connector:
            feishu = _feishu(connector)
            if not self.deferrable:  # in-task: each export downloaded the moment it is done
                docs, failures = feishu.fetch_batch(changes)
                return self._write(connector, changes, docs, [_failure_dict(k, e) for k, e in failures])
            tickets, failures = feishu.start_exports(changes)
            log.info("%d export tasks created, %d refused; deferring", len(tickets), len(failures))
            refused = [_failure_dict(k, e) for k, e in failures]
            if any(t.state == "pending" for t in tickets):
                self.defer(feishu, tickets, refused, [])
            docs, more = feishu.finish_batch(changes, tickets)
            return self._write(connector, changes, docs, refused + [_failure_dict(k, e) for k, e in more])

    def resume(
        self, store: StateStore, event: dict[str, Any], failures: list[dict[str, Any]], staged: list[dict[str, Any]]
    ) -> ManifestResult:
        """Continue after the trigger fired ``event`` (under the same rules as :meth:`run`)."""
        return self._guarded(store, lambda: self._resume(event, failures, staged))

    def _resume(
        self, event: dict[str, Any], failures: list[dict[str, Any]], staged: list[dict[str, Any]]
    ) -> ManifestResult:
        tickets = [ExportTicket.from_dict(t) for t in event.get("tickets") or []]
        changes = read_batch(self.manifest)
        with self.connect() as connector:
            feishu = _feishu(connector)
            if event.get("status") == "partial":
                self._download_ready(feishu, changes, tickets, failures, staged)
            if event.get("status") == "error":
                log.warning("export polling ended early: %s", event.get("error"))
            for t in tickets:
                if t.state == "pending":  # polling stopped without a verdict for this one
                    t.state, t.error_reason = "failed", "export_poll_error"
                    t.job_error_msg = str(event.get("error") or "polling stopped")[:300]
            handled = {s["item_key"] for s in staged} | {f["item_key"] for f in failures}
            rest = [c for c in changes if c.item_key not in handled]
            docs, more = feishu.finish_batch(rest, [t for t in tickets if t.item_key not in handled])
            fetched = _unstage(staged) + docs
            return self._write(connector, changes, fetched, failures + [_failure_dict(k, e) for k, e in more])

    def _download_ready(
        self,
        feishu: FeishuConnector,
        changes: list[Change],
        tickets: list[ExportTicket],
        failures: list[dict[str, Any]],
        staged: list[dict[str, Any]],
    ) -> NoReturn:
        """Download what is finished now (its file expires 10 minutes after its task ended),
        stage it, and wait again for the rest."""
        ready, waiting = _split_ready(tickets)
        ready_keys = {t.item_key for t in ready}
        docs, more = feishu.finish_batch([c for c in changes if c.item_key in ready_keys], ready)
        staged = staged + _stage(self.manifest, docs)
        self.defer(feishu, waiting, failures + [_failure_dict(k, e) for k, e in more], staged)

    def _write(
        self, connector: Connector, changes: list[Change], docs: list[RawDocument], failures: list[dict[str, Any]]
    ) -> ManifestResult:
        all_failures = [ItemFailure(**f) for f in failures]
        log.info("fetched %d documents, %d failures", len(docs), len(all_failures))
        # the permissions of what was fetched, read while the connector is open (as fetch_stage does)
        fetched = {d.item_key for d in docs}
        access = read_batch_access(connector, [c for c in changes if c.item_key in fetched])
        return ManifestResult.of(write_fetched_manifest(self.manifest, docs, all_failures, access=access))


class FeishuExportFetchOperator(FetchOperator):
    # Same signature as the generic FetchOperator (plus ``deferrable``): the DAG factory maps it
    # over discover's batch manifests with ``.partial(source=...).expand(batch=...)``.
    ui_color = "#d1f2eb"

    def __init__(self, *, deferrable: bool | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.deferrable = deferrable

    def make_step(self, ctx: RunContext) -> FeishuExportFetchStep:
        return FeishuExportFetchStep(
            ctx, self.batch, lambda: _connector(ctx), deferrable=self._deferrable(ctx), defer=self._defer
        )

    def _deferrable(self, ctx: RunContext) -> bool:
        if self.deferrable is not None:
            return self.deferrable
        if (option := FeishuOptions.model_validate(ctx.source.options).deferrable) is not None:
            return bool(option)
        return conf.getboolean("operators", "default_deferrable", fallback=False)

    def execute_complete(
        self,
        context: Context,
        event: dict[str, Any],
        failures: list[dict[str, Any]] | None = None,
        staged: list[dict[str, Any]] | None = None,
    ) -> str:
        step = self.make_step(run_context(self.source, context))
        self._step = step
        with self.state_hook as store:
            result = step.resume(store, event, list(failures or []), list(staged or []))
        return result.manifest

    def _defer(
        self,
        connector: FeishuConnector,
        tickets: list[ExportTicket],
        failures: list[dict[str, Any]],
        staged: list[dict[str, Any]],
    ) -> NoReturn:
        resume = connector.options.export_resume_after_done_seconds
        poll = connector.poll_kwargs()
        self.defer(
            trigger=FeishuExportTrigger(
                conn_id=connector.conn_id,
                tickets=[t.to_dict() for t in tickets],
                deadline=poll["deadline"],
                interval=poll["interval"],
                max_interval=poll["max_interval"],
                client_overrides=connector.client_overrides(),
                resume_after_done=resume,
            ),
            method_name="execute_complete",
            kwargs={"failures": failures, "staged": staged},
        )


def _feishu(connector: Connector) -> FeishuConnector:
    if not isinstance(connector, FeishuConnector):
        raise TypeError(f"the Feishu export fetch needs a feishu source, not {connector.kind!r}")
    return connector


def _failure_dict(item_key: str, exc: FetchError) -> dict[str, Any]:
    return {"item_key": item_key, "reason": exc.reason, "error": str(exc), "retryable": exc.retryable, "stage": "fetch"}


def _split_ready(tickets: list[ExportTicket]) -> tuple[list[ExportTicket], list[ExportTicket]]:
    """Tickets of items whose every ticket is terminal (a CSV item has one per sheet), and the rest."""
    waiting_keys = {t.item_key for t in tickets if t.state == "pending"}
    ready = [t for t in tickets if t.item_key not in waiting_keys]
    return ready, [t for t in tickets if t.item_key in waiting_keys]


def _stage(batch_manifest: str, docs: list[RawDocument]) -> list[dict[str, Any]]:
    """Bytes into the batch's staging area; what travels to the next resume is small."""
    staging = StagingArea.of(batch_manifest)
    out = []
    for doc in docs:
        entry = doc.to_dict()
        entry.pop("data_b64")
        entry["staged_path"] = staging.stage_raw(doc.item_key, doc.data, doc.file_name)
        out.append(entry)
    return out


def _unstage(staged: list[dict[str, Any]]) -> list[RawDocument]:
    docs = []
    for entry in staged:
        data = StagingArea.read_bytes(entry["staged_path"])
        fields = {k: v for k, v in entry.items() if k != "staged_path"}
        docs.append(RawDocument.from_dict({**fields, "data_b64": base64.b64encode(data).decode("ascii")}))
    return docs
