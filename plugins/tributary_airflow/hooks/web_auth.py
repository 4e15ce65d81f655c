"""Airflow hook for a web source's credentials: the Connection -> :class:`Credentials`.

A web source's Connection (its ``conn_id``) holds what a login needs: ``login``/``password``
(HTTP basic auth) and ``extra`` ``{"headers": {...}, "cookies": {...}}``. The hook reads it
through the ground (``include.connections``) and builds the same :class:`Credentials` the
connector sends, each only to the origins its :class:`CredentialScope` admits (the source's
seeds); it gives the Connection a form in the Airflow UI. Nothing is read at import or DAG parse.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow.sdk import BaseHook

from include.connections import get_connection
from plugins.connectors.web.auth import Credentials, CredentialScope, credentials_from_conn

__all__ = ["WebAuthHook"]


class WebAuthHook(BaseHook):
    conn_name_attr = "web_conn_id"
    default_conn_name = "web_default"
    conn_type = "http"
    hook_name = "Tributary web source"

    def __init__(self, web_conn_id: str = default_conn_name, *, seeds: Iterable[str] = (), scope: str = "host") -> None:
        super().__init__()
        self.web_conn_id = web_conn_id
        # no seeds: a scope that admits nothing, so the credentials go nowhere (fail closed)
        self.credential_scope = CredentialScope(list(seeds), scope) if seeds else None
        self._credentials: Credentials | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema", "port", "host"],
            "relabeling": {"login": "Basic auth user", "password": "Basic auth password"},
            "placeholders": {"extra": '{"headers": {"X-Api-Key": "..."}, "cookies": {"session": "..."}}'},
        }

    def get_conn(self) -> Credentials:
        if self._credentials is None:
            self._credentials = credentials_from_conn(get_connection(self.web_conn_id), self.credential_scope)
        return self._credentials

    def headers_for(self, url: str) -> dict[str, str]:
        """The credential headers a request for ``url`` carries (empty outside the scope)."""
        return self.get_conn().headers_for(url)
