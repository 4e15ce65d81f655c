"""The trigger that waits for a batch's export tickets in the triggerer, not a worker slot."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from plugins.connectors.feishu.exports import AsyncExportPoller, ExportTicket, poll_tickets
from plugins.connectors.feishu.hook import asettings_from_connection

__all__ = ["FeishuExportTrigger"]


class FeishuExportTrigger(BaseTrigger):
    """Polls every ticket concurrently with per-ticket backoff until all are terminal or the
    deadline (epoch seconds) passes, then fires one event carrying every ticket's state.

    Only the connection id travels in the (stored) kwargs; the secret is read from the
    connection inside the triggerer.
    """

    def __init__(
        self,
        *,
        conn_id: str,
        tickets: list[dict[str, Any]],
        deadline: float,
        interval: float = 1.0,
        max_interval: float = 15.0,
        redis_url: str | None = None,
        client_overrides: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.conn_id = conn_id
        self.tickets = tickets
        self.deadline = deadline
        self.interval = interval
        self.max_interval = max_interval
        self.redis_url = redis_url
        self.client_overrides = client_overrides or {}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "conn_id": self.conn_id,
                "tickets": self.tickets,
                "deadline": self.deadline,
                "interval": self.interval,
                "max_interval": self.max_interval,
                "redis_url": self.redis_url,
                "client_overrides": self.client_overrides,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        tickets = [ExportTicket.from_dict(t) for t in self.tickets]
        try:
            redis_url = self.redis_url
            if redis_url is None:  # the triggerer's own settings: no Redis URL in stored kwargs
                from include.settings import get_settings

                redis_url = get_settings().redis_url
            settings = await asettings_from_connection(self.conn_id, redis_url=redis_url, **self.client_overrides)
            poller = AsyncExportPoller(settings)
            try:
                await poll_tickets(
                    poller, tickets, deadline=self.deadline, interval=self.interval, max_interval=self.max_interval
                )
            finally:
                await poller.aclose()
        except Exception as exc:  # reported to execute_complete, which records per-item failures
            self.log.warning("export polling stopped: %s", type(exc).__name__)
            yield TriggerEvent(
                {"status": "error", "error": f"{type(exc).__name__}: {exc}", "tickets": [t.to_dict() for t in tickets]}
            )
            return
        done = sum(t.state == "done" for t in tickets)
        self.log.info("exports terminal: %d done, %d failed", done, len(tickets) - done)
        yield TriggerEvent({"status": "done", "tickets": [t.to_dict() for t in tickets]})
