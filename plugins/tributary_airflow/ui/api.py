"""The JSON API under ``/api``: the dicts of ``plugins.engine.lineage`` (search: ``routes_search``)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from include.stores.browse import ItemFilter, browse_items
from plugins.engine import lineage
from plugins.tributary_airflow.ui.common import Limit, Store
from plugins.tributary_airflow.ui.dag_access import readable, require_source

__all__ = ["add_json_routes"]


def _found(value: Any, what: str) -> Any:
    if value is None:
        raise HTTPException(status_code=404, detail=f"no {what}")
    return JSONResponse(value)


def _readable_runs(request: Request, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    allowed = readable(request, {r["source"] for r in runs})
    return [r for r in runs if r["source"] in allowed]


def add_json_routes(app: FastAPI) -> None:
    @app.get("/api/runs")
    def api_runs(request: Request, store: Store, source: str | None = None, limit: Limit = 50) -> Any:
        require_source(request, source)
        return _readable_runs(request, lineage.list_runs(store, source, limit=limit))

    @app.get("/api/runs/{run_id}")
    def api_run(
        request: Request, run_id: str, store: Store, action: str | None = None, source: str | None = None
    ) -> Any:
        report = lineage.run_report(store, run_id, action, source)
        require_source(request, report["run"]["source"] if report else source)
        return _found(report, f"run {run_id}")

    @app.get("/api/items")
    def api_item(request: Request, source: str, key: str, store: Store) -> Any:
        require_source(request, source)
        return _found(lineage.item_history(store, source, key), f"item {key}")

    @app.get("/api/sources/{source_id}/items")
    def api_source_items(
        request: Request,
        source_id: str,
        store: Store,
        failing: bool = False,
        contains: str = "",
        offset: int = 0,
        limit: Limit = 50,
    ) -> Any:
        require_source(request, source_id)
        page = browse_items(
            store, source_id, ItemFilter(failing=failing, key_contains=contains or None), offset=offset, limit=limit
        )
        return {"total": page.total, "offset": page.offset, "items": lineage.jsonable(page.rows)}

    @app.get("/api/chunks/{chunk_id}")
    def api_chunk(request: Request, chunk_id: str, store: Store, source: str | None = None) -> Any:
        found = lineage.chunk_lineage(store, chunk_id, source)
        require_source(request, found["source"] if found else source)
        return _found(found, f"chunk {chunk_id}")

    @app.get("/api/diff")
    def api_diff(request: Request, a: str, b: str, store: Store, source: str | None = None) -> Any:
        found = lineage.diff_runs(store, a, b, source)
        require_source(request, source)
        if found is not None:
            require_source(request, found["a"]["source"])
            require_source(request, found["b"]["source"])
        return _found(found, f"runs {a} / {b}")
