"""Options of a Yuque source (``SourceConfig.options`` for ``kind: yuque``).

Validated when the sources file is loaded (DAG parse), so a typo fails there, naming the key;
the connector still reads ``source.options`` itself (issue 21 moves it onto this model).
Kept free of the connector's imports: loading a sources file imports only this module's
dependencies (pydantic, ``include.config``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from include.config import EngineOptions

__all__ = ["YuqueOptions"]


class YuqueOptions(EngineOptions):
    """``options`` of a ``kind: yuque`` source (see ``plugins/connectors/yuque/connector.py``).

    ``namespaces`` (``login/slug`` repos, or ``all`` / absent for every repo of the owner),
    ``login`` / ``owner_type`` (whose repos ``all`` means), ``repo_types`` (only repos of these
    types), ``breadcrumbs`` (read TOCs for heading paths), ``deleted_listing`` (read explicit
    tombstones), ``max_sheet_bytes`` (inflate cap of lakesheet bodies). Plus the engine's options.
    """

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    namespaces: list[str] | Literal["all"] | None = None
    login: str | None = None
    owner_type: Literal["user", "group"] | None = None
    repo_types: list[str] | None = None
    breadcrumbs: bool = True
    deleted_listing: bool = True
    max_sheet_bytes: int = Field(default=64 * 1024 * 1024, ge=1)
