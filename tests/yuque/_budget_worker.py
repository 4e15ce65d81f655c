"""Run in a spawned process by the budget test: kept light, it imports only the client."""

from __future__ import annotations

from plugins.connectors.yuque.budget import RequestBudget
from plugins.connectors.yuque.client import YuqueClient
from plugins.connectors.yuque.errors import YuqueBudgetExhausted


def spend(url: str, token: str, redis_url: str, limit: int, attempts: int) -> tuple[int, int]:
    """Try ``attempts`` requests under the shared budget; -> (sent, refused)."""
    sent = refused = 0
    with YuqueClient(url, token, budget=RequestBudget(token, limit=limit, redis_url=redis_url)) as client:
        for _ in range(attempts):
            try:
                client.get_user()
                sent += 1
            except YuqueBudgetExhausted:
                refused += 1
    return sent, refused
