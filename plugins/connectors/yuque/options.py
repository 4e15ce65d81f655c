"""Options of a Yuque source (``SourceConfig.options`` for ``kind: yuque``).

Validated when the sources file is loaded (DAG parse), so a typo fails there, naming the key,
and again when the connector is built: the connector reads its options only through this model.
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
    types), ``include_drafts`` (sync unpublished docs too), ``breadcrumbs`` (read TOCs for heading
    paths), ``toc_headings``, ``deleted_listing`` (read explicit tombstones),
    ``incremental_listing`` / ``incremental_overlap_minutes`` (list only what changed since the
    oldest listing that vouched for a stored version, minus this overlap),
    ``full_listing_every`` (list each repo in full at least every that many runs, whatever
    ``changed_at_gte`` filters on), ``max_sheet_bytes`` (inflate cap of lakesheet bodies). Plus
    the engine's options.
    """

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    namespaces: list[str] | Literal["all"] | None = None
    login: str | None = None
    owner_type: Literal["user", "group"] | None = None
    repo_types: list[str] | None = None
    include_drafts: bool = False
    breadcrumbs: bool = True
    toc_headings: bool = True
    deleted_listing: bool = True
    incremental_listing: bool = True
    incremental_overlap_minutes: float = Field(default=10, ge=0)
    full_listing_every: int = Field(default=24, ge=1)
    max_sheet_bytes: int = Field(default=64 * 1024 * 1024, ge=1)
