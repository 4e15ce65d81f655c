"""The trigger that waits for a batch's export tickets in the triggerer, not a worker slot."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from include.settings import get_settings
from plugins.connectors.feishu.exports import AsyncExportPoller, ExportTicket, poll_tickets
from plugins.tributary_airflow.hooks.feishu import asettings_from_connection

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
        resume_after_done: float | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow's BaseTrigger is untyped
        self.conn_id = conn_id
        self.tickets = tickets
        self.deadline = deadline
        self.interval = interval
        self.max_interval = max_interval
        self.redis_url = redis_url
        self.client_overrides = client_overrides or {}
        self.resume_after_done = resume_after_done

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
                "resume_after_done": self.resume_after_done,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        tickets = [ExportTicket.from_dict(t) for t in self.tickets]
        try:
            # without a stored Redis URL, the triggerer's own settings name it
            redis_url = self.redis_url if self.redis_url is not None else get_settings().redis_url
            settings = await asettings_from_connection(self.conn_id, redis_url=redis_url, **self.client_overrides)
            poller = AsyncExportPoller(settings)
            try:
                partial = await self._poll(poller, tickets)
            finally:
                await poller.aclose()
        except Exception as exc:  # reported to execute_complete, which records per-item failures
            self.log.warning("export polling stopped: %s", type(exc).__name__)
            yield _event(
                {"status": "error", "error": f"{type(exc).__name__}: {exc}", "tickets": [t.to_dict() for t in tickets]}
            )
            return
        done = sum(t.state == "done" for t in tickets)
        if partial:
            self.log.info("resuming to download %d finished exports before they expire", done)
            yield _event({"status": "partial", "tickets": [t.to_dict() for t in tickets]})
            return
        self.log.info("exports terminal: %d done, %d failed", done, len(tickets) - done)
        yield _event({"status": "done", "tickets": [t.to_dict() for t in tickets]})

    async def _poll(self, poller: AsyncExportPoller, tickets: list[ExportTicket]) -> bool:
        """Poll to the end, or return True early once a finished export has waited
        ``resume_after_done`` seconds: its file is deleted 10 minutes after its task ended, so
        the task resumes to download what is done and defers again for the rest."""
        polling = asyncio.ensure_future(
            poll_tickets(
                poller, tickets, deadline=self.deadline, interval=self.interval, max_interval=self.max_interval
            )
        )
        if self.resume_after_done is None:
            await polling
            return False
        while not polling.done():
            await asyncio.wait({polling}, timeout=min(1.0, self.resume_after_done))
            finished = [t.done_at for t in tickets if t.state == "done" and t.done_at is not None]
            still_pending = any(t.state == "pending" for t in tickets)
            if still_pending and finished and time.time() - min(finished) >= self.resume_after_done:
                polling.cancel()
                await asyncio.gather(polling, return_exceptions=True)
                return True
        polling.result()
        return False


def _event(payload: dict[str, Any]) -> TriggerEvent:
    return TriggerEvent(payload)  # type: ignore[no-untyped-call]  # Airflow's TriggerEvent is untyped
