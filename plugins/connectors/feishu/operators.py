"""The Feishu fetch operator: creates a batch's export tasks, defers while Feishu renders them,
then downloads and writes the same ``fetched`` manifest as the generic fetch task.

The DAG factory uses it instead of the generic fetch task because
``FeishuConnector.fetch_operator`` names it. Waiting happens in
:class:`~plugins.connectors.feishu.trigger.FeishuExportTrigger` so no worker slot is held;
with ``deferrable=False`` (option or argument) the same concurrent polling runs in the task.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from plugins.connectors.base import FetchError
from plugins.connectors.feishu.exports import ExportTicket

__all__ = ["FeishuExportFetchOperator"]


class FeishuExportFetchOperator(BaseOperator):
    # Same signature as the generic plugins.operators.sync.FetchOperator: the DAG factory maps
    # it over discover's batch manifests with ``.partial(source=...).expand(batch=...)``.
    template_fields: Sequence[str] = ("source", "batch")
    ui_color = "#d1f2eb"

    def __init__(self, *, source: str, batch: str, deferrable: bool | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.batch = batch
        self.deferrable = deferrable

    def _connector(self, context: Any):
        from include.engine import open_connector
        from plugins.operators.sync import run_context

        return open_connector(run_context(self.source, context))

    def execute(self, context: Any) -> str:
        from include.engine import read_batch

        changes = read_batch(self.batch)
        with self._connector(context) as connector:
            deferrable = self.deferrable
            if deferrable is None:
                deferrable = bool(connector.options.get("deferrable", True))
            if not deferrable:  # in-task: each export downloaded the moment it is done
                docs, failures = connector.fetch_batch(changes)
                return self._write(docs, [_failure_dict(k, e) for k, e in failures])
            tickets, failures = connector.start_exports(changes)
            pending = [t for t in tickets if t.state == "pending"]
            self.log.info("%d export tasks created, %d refused; deferring", len(tickets), len(failures))
            if pending:
                from plugins.connectors.feishu.trigger import FeishuExportTrigger

                self.defer(
                    trigger=FeishuExportTrigger(
                        conn_id=connector.conn_id,
                        tickets=[t.to_dict() for t in tickets],
                        client_overrides=connector.client_overrides(),
                        **connector.poll_kwargs(),
                    ),
                    method_name="execute_complete",
                    kwargs={"failures": [_failure_dict(k, e) for k, e in failures]},
                )
            return self._finish(connector, changes, tickets, [_failure_dict(k, e) for k, e in failures])

    def execute_complete(self, context: Any, event: dict[str, Any], failures: list[dict] | None = None) -> str:
        from include.engine import read_batch

        if event.get("status") == "error":
            self.log.warning("export polling ended early: %s", event.get("error"))
        tickets = [ExportTicket.from_dict(t) for t in event.get("tickets") or []]
        for t in tickets:
            if t.state == "pending":  # polling stopped without a verdict for this one
                t.state, t.error_reason = "failed", "export_poll_error"
                t.job_error_msg = str(event.get("error") or "polling stopped")[:300]
        with self._connector(context) as connector:
            return self._finish(connector, read_batch(self.batch), tickets, list(failures or []))

    def _finish(self, connector, changes, tickets: list[ExportTicket], failures: list[dict]) -> str:
        docs, more = connector.finish_batch(changes, tickets)
        return self._write(docs, list(failures) + [_failure_dict(k, e) for k, e in more])

    def _write(self, docs, failures: list[dict]) -> str:
        from include.engine import ItemFailure, write_fetched_manifest

        all_failures = [ItemFailure(**f) for f in failures]
        self.log.info("fetched %d documents, %d failures", len(docs), len(all_failures))
        return write_fetched_manifest(self.batch, docs, all_failures)


def _failure_dict(item_key: str, exc: FetchError) -> dict[str, Any]:
    return {"item_key": item_key, "reason": exc.reason, "error": str(exc), "retryable": exc.retryable, "stage": "fetch"}
