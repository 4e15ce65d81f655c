"""``/items``: a source's item browser (filters, pages), or one item's history with ``key``."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse

from include.stores.browse import ItemFilter, browse_items
from plugins.engine import lineage
from plugins.tributary_airflow.ui.common import Limit, Pages, Store, parse_since, source_config
from plugins.tributary_airflow.ui.dag_access import require_source

__all__ = ["add_item_routes"]

PAGE_SIZE = 50


def _item_page(pages: Pages, request: Request, store: Any, source: str, key: str) -> HTMLResponse:
    found = lineage.item_history(store, source, key)
    if found is None:
        return pages.missing(request, f"item {key} of {source}")
    return pages.render(request, "item.html", h=found)


def add_item_routes(app: FastAPI, pages: Pages) -> None:
    @app.get("/items", response_class=HTMLResponse)
    def items_page(
        request: Request,
        source: str,
        store: Store,
        key: str | None = None,
        action: str = "",
        failing: bool = False,
        quarantined: bool = False,
        parser: str = "",
        changed_since: str = "",
        contains: str = "",
        page: Annotated[int, Query(ge=1, le=100_000)] = 1,
        limit: Limit = PAGE_SIZE,
    ) -> HTMLResponse:
        require_source(request, source)
        if key:
            return _item_page(pages, request, store, source, key)
        since, error = parse_since(changed_since)
        config = source_config(source)
        where = ItemFilter(
            action=action or None,
            failing=failing,
            quarantined_after=(config.engine_options.quarantine_after if config else 5) if quarantined else None,
            parser=parser or None,
            changed_since=since,
            key_contains=contains or None,
        )
        found = browse_items(store, source, where, offset=(page - 1) * limit, limit=limit)
        form = {
            "source": source,
            "action": action,
            "failing": failing,
            "quarantined": quarantined,
            "parser": parser,
            "changed_since": changed_since,
            "contains": contains,
        }
        query: dict[str, Any] = {k: "true" if v is True else v for k, v in form.items() if v not in ("", False)}
        if limit != PAGE_SIZE:
            query["limit"] = limit
        pages_total = max(1, -(-found.total // limit))
        return pages.render(
            request,
            "items.html",
            source=source,
            found=found,
            form=form,
            error=error,
            page=page,
            pages_total=pages_total,
            page_link=lambda n: "?" + urlencode({**query, "page": n}),
        )
