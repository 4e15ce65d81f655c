"""The state store and run log, as an Airflow hook.

An operator holds one as a ``@cached_property`` and uses it around its engine call::

    @cached_property
    def state_hook(self) -> StateStoreHook:
        return StateStoreHook()

    def execute(self, context):
        with self.state_hook as store:
            return commit_stage(ctx, store, ...)

The store is opened from settings (``TRIBUTARY_STATE_URL``, else the SQLite file under
``TRIBUTARY_HOME``); it is not an Airflow Connection because the state store belongs to the
platform, not to one source.
"""

from __future__ import annotations

from types import TracebackType

from airflow.sdk import BaseHook

from include.stores import StateStore, open_state_store

__all__ = ["StateStoreHook"]


class StateStoreHook(BaseHook):
    """Owns one :class:`~include.stores.StateStore` for as long as the task needs it.

    ``get_conn()`` opens the store on first use and returns the same one until ``close()``
    (an SQLAlchemy engine and its pool: one per task, not one per call). After ``close()`` the
    next ``get_conn()`` opens a fresh store. As a context manager it yields the store and
    closes it on exit, error or not.
    """

    hook_name = "Tributary state store"

    def __init__(self, url: str | None = None, *, logger_name: str | None = None) -> None:
        super().__init__(logger_name=logger_name)
        self.url = url  # None: the configured store (settings)
        self._store: StateStore | None = None

    def get_conn(self) -> StateStore:
        """The open store (opened now if it is not)."""
        if self._store is None:
            self._store = open_state_store(self.url)
        return self._store

    def close(self) -> None:
        """Dispose of the store's connection pool; a no-op when nothing is open."""
        store, self._store = self._store, None
        if store is not None:
            store.close()

    def __enter__(self) -> StateStore:
        return self.get_conn()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
