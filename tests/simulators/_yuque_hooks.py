"""The Yuque simulator's webhooks (issue 37): a knowledge base's webhook URL, pushed to on
every publish, update and delete of one of its docs.

Yuque configures webhooks per knowledge base (repo settings) with a URL only: it signs nothing,
so a receiver authenticates the call by a secret it put in the URL itself. The body is the doc's
serialization with ``webhook_subject_type`` (``publish`` for a new published doc, ``update`` for
an edit, ``delete``) and its repo under ``book``, in ``{"data": {...}}``, as the webhook
consumers in the wild read it (e.g. ``data.webhook_subject_type``, ``data.book.namespace``).
Yuque documents no retry schedule: deliveries use :mod:`._callbacks` with a short configurable
one (``retry_delays``), duplicates and reordering knobs included.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tests.simulators._callbacks import CallbackSender, DeliveryKnobs, OwnsSender

if TYPE_CHECKING:
    from tests.simulators._yuque_space import SimDoc, SimRepo, YuqueSpace

__all__ = ["YUQUE_RETRY_DELAYS", "YuqueWebhooks"]

YUQUE_RETRY_DELAYS = (10.0, 60.0, 600.0)  # undocumented: this simulator's choice


@dataclass
class YuqueWebhooks(OwnsSender):
    space: YuqueSpace
    urls: dict[int, str] = field(default_factory=dict)  # repo id -> webhook URL
    sent: list[dict[str, Any]] = field(default_factory=list)
    _sender: CallbackSender | None = None

    def configure(self, repo: SimRepo, url: str, **knobs: Any) -> None:
        """Set ``repo``'s webhook URL (Yuque sends no verification request)."""
        self.urls[repo.id] = url
        if self._sender is None:
            knobs.setdefault("retry_delays", YUQUE_RETRY_DELAYS)
            self._sender = CallbackSender(DeliveryKnobs(**knobs))

    def emit(self, doc: SimDoc, subject: str) -> None:
        repo = next((r for r in self.space.repos.values() if doc.id in r.docs), None)
        if repo is None or repo.id not in self.urls:
            return
        data = {
            **self.space._doc_json(repo, doc, listing=True),
            "webhook_subject_type": subject,
            "book": self.space._repo_json(repo),
            "actor_id": 1,
        }
        payload = {"data": data}
        self.sent.append(payload)
        if self._sender is not None:
            # Yuque's body carries no event id: the receiver derives one from what it names
            self._sender.send(self.urls[repo.id], f"yuque-{secrets.token_hex(6)}", payload, _plain)


def _plain(payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(payload, ensure_ascii=False).encode()
    return body, {"Content-Type": "application/json", "User-Agent": "Yuque-Webhook"}
