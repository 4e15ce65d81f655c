"""Where a user's rotating refresh token lives (``auth: user``), and the refresh under its lock.

OAuth v2 refresh tokens are single-use (authen/v2/oauth/token: each refresh answers a new one
and spends the old; reuse answers 20064/20073). A chain kept in one process dies with it, and
the next task process, holding only the Connection's spent token, is refused. So the chain is
kept where every process finds it:

1. the state database (:class:`StoredUserToken`), encrypted with a Fernet key from the
   Connection's ``extra.token_store_key``, else ``TRIBUTARY_SECRET_KEY``, else Airflow's
   ``AIRFLOW__CORE__FERNET_KEY``; refreshed under the row lock, the new refresh token committed
   before the access token is handed out;
2. else Redis (``token.UserTokenCache``), when the worker has one;
3. else user mode is refused (:class:`FeishuTokenStoreError`) before any token is spent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from include.settings import get_settings
from include.stores.credentials import CredentialStore, CredentialStoreError, LockedSecret, secret_key_from_env
from plugins.connectors.feishu.errors import FeishuTokenStoreError
from plugins.connectors.feishu.token import UserTokenCache, cache_life, user_subject

if TYPE_CHECKING:
    from plugins.connectors.feishu.client import FeishuSettings

__all__ = ["StoredUserToken", "open_user_tokens"]

Refresh = Callable[[str], tuple[str, int, str, int]]


class StoredUserToken:
    """One user's access token and refresh chain in the state database, shared by every process.

    ``refresh(refresh_token)`` returns ``(access_token, expires_in, new_refresh_token,
    refresh_expires_in)``. An access token is kept in process until ``token_margin`` before its
    end; a miss locks the row, takes a still-good access token another process stored, or
    refreshes with the newest refresh token and stores both before returning.
    """

    kind = "user"

    def __init__(
        self, app_id: str, initial_refresh_token: str, refresh: Refresh, *, store: CredentialStore, margin: float
    ) -> None:
        self.app_id = app_id
        self.scope = f"feishu:user_token:{app_id}:{user_subject(initial_refresh_token)}"
        self._initial = initial_refresh_token
        self._refresh = refresh
        self._store = store
        self._margin = margin
        self._cached: tuple[str, float] | None = None  # (access token, wall-clock end of use)
        self._lock = threading.Lock()

    @contextmanager
    def _row(self) -> Iterator[LockedSecret]:
        try:
            with self._store.locked(self.scope) as row:
                yield row
        except CredentialStoreError as exc:
            raise FeishuTokenStoreError(f"user token store for app {self.app_id}: {exc}") from exc

    def get(self) -> str:
        with self._lock:
            if self._cached and self._cached[1] > time.time():
                return self._cached[0]
            with self._row() as row:
                value = row.value or {}
                if value.get("access_token") and float(value.get("access_until") or 0) > time.time():
                    self._cached = (str(value["access_token"]), float(value["access_until"]))
                else:
                    token, expire, new_refresh, refresh_expire = self._refresh(
                        value.get("refresh_token") or self._initial
                    )
                    now = time.time()
                    row.put(
                        {
                            "refresh_token": new_refresh,
                            "refresh_until": now + refresh_expire if refresh_expire else None,
                            "access_token": token,
                            "access_until": now + cache_life(expire, self._margin),
                        }
                    )
                    self._cached = (token, now + cache_life(expire, self._margin))
            return self._cached[0]  # committed: the new refresh token is stored before use

    def invalidate(self, token: str) -> None:
        """Forget ``token`` here and in the store, if it is still the one kept there."""
        with self._lock:
            if self._cached and self._cached[0] == token:
                self._cached = None
            with self._row() as row:
                if row.value and row.value.get("access_token") == token:
                    row.put({**row.value, "access_token": None, "access_until": 0})

    def close(self) -> None:
        self._store.close()


def open_user_tokens(settings: FeishuSettings, refresh: Refresh, redis_client: Any) -> StoredUserToken | UserTokenCache:
    """The user-token chain of ``settings``: the state database when a key is configured, else
    Redis, else :class:`FeishuTokenStoreError` (no store would survive this process)."""
    if not settings.refresh_token:
        raise ValueError("auth 'user' needs the user's OAuth refresh_token in the Connection")
    key = settings.token_store_key or secret_key_from_env()
    if key:
        url = settings.token_store_url
        if url is None:
            state = get_settings()
            state.ensure_dirs()  # the default state DB is a file under TRIBUTARY_HOME
            url = state.state_url
        try:
            store = CredentialStore(url, key)
        except CredentialStoreError as exc:
            raise FeishuTokenStoreError(f"user token store for app {settings.app_id}: {exc}") from exc
        return StoredUserToken(
            settings.app_id, settings.refresh_token, refresh, store=store, margin=settings.token_margin
        )
    if redis_client is not None:
        return UserTokenCache(settings.app_id, settings.refresh_token, refresh, redis_client=redis_client,
                              safety_margin=settings.token_margin)  # fmt: skip
    raise FeishuTokenStoreError(
        f"auth 'user' for app {settings.app_id} needs a place for the rotating refresh token (it is "
        "single-use: kept in one process, the next task is refused): set the Connection's "
        "extra.token_store_key or TRIBUTARY_SECRET_KEY (a Fernet key; AIRFLOW__CORE__FERNET_KEY also "
        "works) to keep it encrypted in the state database, or configure TRIBUTARY_REDIS_URL"
    )
