"""Embedded-by-default stores: item state and run/lineage log (SQLAlchemy)."""

from __future__ import annotations

from include.settings import get_settings
from include.stores.state import ItemState, RunItem, StateStore

__all__ = ["ItemState", "RunItem", "StateStore", "open_state_store"]


def open_state_store(url: str | None = None) -> StateStore:
    """The configured store: ``TRIBUTARY_STATE_URL`` or a SQLite file under TRIBUTARY_HOME."""
    settings = get_settings()
    if url is None:
        settings.ensure_dirs()
    return StateStore(url or settings.state_url)
