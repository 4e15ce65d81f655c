"""The Feishu fetch operator: creates a batch's export tasks, defers while Feishu renders them,
then downloads and writes the same ``fetched`` manifest as the generic fetch task.

The DAG factory uses it instead of the generic fetch task because
``FeishuConnector.fetch_operator`` names it. Waiting happens in
:class:`~plugins.tributary_airflow.triggers.feishu.FeishuExportTrigger` so no worker slot is held;
with ``deferrable=False`` (option or argument) the same concurrent polling runs in the task.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator

from plugins.connectors.base import FetchError
from plugins.connectors.feishu.exports import ExportTicket

__all__ = ["FeishuExportFetchOperator"]


class FeishuExportFetchOperator(BaseOperator):
    # Same signature as the generic plugins.tributary_airflow.operators.sync.FetchOperator: the DAG factory maps
    # it over discover's batch manifests with ``.partial(source=...).expand(batch=...)``.
    template_fields: Sequence[str] = ("source", "batch")
    ui_color = "#d1f2eb"

    def __init__(self, *, source: str, batch: str, deferrable: bool | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.batch = batch
        self.deferrable = deferrable

    def _connector(self, context: Any):
        from plugins.engine import open_connector
        from plugins.tributary_airflow.operators.sync import run_context

        return open_connector(run_context(self.source, context))

    def execute(self, context: Any) -> str:
        from plugins.engine import read_batch

        changes = read_batch(self.batch)
        with self._connector(context) as connector:
            deferrable = self.deferrable
            if deferrable is None:
                deferrable = bool(connector.options.get("deferrable", True))
            if not deferrable:  # in-task: each export downloaded the moment it is done
                docs, failures = connector.fetch_batch(changes)
                return self._write(docs, [_failure_dict(k, e) for k, e in failures])
            tickets, failures = connector.start_exports(changes)
            self.log.info("%d export tasks created, %d refused; deferring", len(tickets), len(failures))
            refused = [_failure_dict(k, e) for k, e in failures]
            if any(t.state == "pending" for t in tickets):
                self._defer(connector, tickets, refused, [])
            return self._finish(connector, changes, tickets, refused)

    def _defer(self, connector, tickets: list[ExportTicket], failures: list[dict], staged: list[dict]) -> None:
        from plugins.tributary_airflow.triggers.feishu import FeishuExportTrigger

        resume = connector.options.get("export_resume_after_done_seconds", 120)
        self.defer(
            trigger=FeishuExportTrigger(
                conn_id=connector.conn_id,
                tickets=[t.to_dict() for t in tickets],
                client_overrides=connector.client_overrides(),
                resume_after_done=None if resume is None else float(resume),
                **connector.poll_kwargs(),
            ),
            method_name="execute_complete",
            kwargs={"failures": failures, "staged": staged},
        )

    def execute_complete(
        self,
        context: Any,
        event: dict[str, Any],
        failures: list[dict] | None = None,
        staged: list[dict] | None = None,
    ) -> str:
        from plugins.engine import read_batch

        failures, staged = list(failures or []), list(staged or [])
        tickets = [ExportTicket.from_dict(t) for t in event.get("tickets") or []]
        changes = read_batch(self.batch)
        with self._connector(context) as connector:
            if event.get("status") == "partial":
                # Download what is finished now (its file expires 10 minutes after its task
                # ended), stage it, and wait again for the rest.
                ready, waiting = _split_ready(tickets)
                ready_keys = {t.item_key for t in ready}
                docs, more = connector.finish_batch([c for c in changes if c.item_key in ready_keys], ready)
                staged += _stage(self.batch, docs)
                failures += [_failure_dict(k, e) for k, e in more]
                self._defer(connector, waiting, failures, staged)
            if event.get("status") == "error":
                self.log.warning("export polling ended early: %s", event.get("error"))
            for t in tickets:
                if t.state == "pending":  # polling stopped without a verdict for this one
                    t.state, t.error_reason = "failed", "export_poll_error"
                    t.job_error_msg = str(event.get("error") or "polling stopped")[:300]
            handled = {s["item_key"] for s in staged} | {f["item_key"] for f in failures}
            rest = [c for c in changes if c.item_key not in handled]
            docs, more = connector.finish_batch(rest, [t for t in tickets if t.item_key not in handled])
            return self._write(_unstage(staged) + docs, failures + [_failure_dict(k, e) for k, e in more])

    def _finish(self, connector, changes, tickets: list[ExportTicket], failures: list[dict]) -> str:
        docs, more = connector.finish_batch(changes, tickets)
        return self._write(docs, list(failures) + [_failure_dict(k, e) for k, e in more])

    def _write(self, docs, failures: list[dict]) -> str:
        from plugins.engine import ItemFailure, write_fetched_manifest

        all_failures = [ItemFailure(**f) for f in failures]
        self.log.info("fetched %d documents, %d failures", len(docs), len(all_failures))
        return write_fetched_manifest(self.batch, docs, all_failures)


def _failure_dict(item_key: str, exc: FetchError) -> dict[str, Any]:
    return {"item_key": item_key, "reason": exc.reason, "error": str(exc), "retryable": exc.retryable, "stage": "fetch"}


def _split_ready(tickets: list[ExportTicket]) -> tuple[list[ExportTicket], list[ExportTicket]]:
    """Tickets of items whose every ticket is terminal (a CSV item has one per sheet), and the rest."""
    waiting_keys = {t.item_key for t in tickets if t.state == "pending"}
    ready = [t for t in tickets if t.item_key not in waiting_keys]
    return ready, [t for t in tickets if t.item_key in waiting_keys]


def _stage(batch_manifest: str, docs: list[Any]) -> list[dict[str, Any]]:
    """Bytes into the batch's staging area; what travels to the next resume is small."""
    from include.staging import StagingArea

    staging = StagingArea.at(Path(batch_manifest).parent)
    out = []
    for doc in docs:
        entry = doc.to_dict()
        entry.pop("data_b64")
        entry["staged_path"] = staging.stage_raw(doc.item_key, doc.data, doc.file_name)
        out.append(entry)
    return out


def _unstage(staged: list[dict[str, Any]]) -> list[Any]:
    from include.contract import RawDocument

    docs = []
    for entry in staged:
        data = Path(entry["staged_path"]).read_bytes()
        fields = {k: v for k, v in entry.items() if k != "staged_path"}
        docs.append(RawDocument.from_dict({**fields, "data_b64": base64.b64encode(data).decode("ascii")}))
    return docs
