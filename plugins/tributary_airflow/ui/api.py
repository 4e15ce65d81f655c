"""The JSON API under ``/api``: the dicts of ``plugins.engine.lineage`` (search: ``routes_search``)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse

from include.stores.browse import ItemFilter, browse_items
from plugins.engine import lineage
from plugins.tributary_airflow.ui.common import Limit, Store

__all__ = ["add_json_routes"]


def _found(value: Any, what: str) -> Any:
    if value is None:
        raise HTTPException(status_code=404, detail=f"no {what}")
    return JSONResponse(value)


def add_json_routes(app: FastAPI) -> None:
    @app.get("/api/runs")
    def api_runs(store: Store, source: str | None = None, limit: Limit = 50) -> Any:
        return lineage.list_runs(store, source, limit=limit)

    @app.get("/api/runs/{run_id}")
    def api_run(run_id: str, store: Store, action: str | None = None, source: str | None = None) -> Any:
        return _found(lineage.run_report(store, run_id, action, source), f"run {run_id}")

    @app.get("/api/items")
    def api_item(source: str, key: str, store: Store) -> Any:
        return _found(lineage.item_history(store, source, key), f"item {key}")

    @app.get("/api/sources/{source_id}/items")
    def api_source_items(
        source_id: str, store: Store, failing: bool = False, contains: str = "", offset: int = 0, limit: Limit = 50
    ) -> Any:
        page = browse_items(
            store, source_id, ItemFilter(failing=failing, key_contains=contains or None), offset=offset, limit=limit
        )
        return {"total": page.total, "offset": page.offset, "items": lineage.jsonable(page.rows)}

    @app.get("/api/chunks/{chunk_id}")
    def api_chunk(chunk_id: str, store: Store, source: str | None = None) -> Any:
        return _found(lineage.chunk_lineage(store, chunk_id, source), f"chunk {chunk_id}")

    @app.get("/api/diff")
    def api_diff(a: str, b: str, store: Store, source: str | None = None) -> Any:
        return _found(lineage.diff_runs(store, a, b, source), f"runs {a} / {b}")
