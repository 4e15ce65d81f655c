"""Audit pages and JSON for Tributary's lineage, as a FastAPI app mounted in Airflow's API server.

HTML (linked from Airflow's navigation):
  /                          the configured sources: last run, freshness, totals; recent runs
  /sources/{id}              one source: health, totals, trend charts, actions (sync now, full
                             resync, re-sync failed items, pause/resume) through Airflow's REST API
  /runs/{run_id}             one run: error panel, params and counts, items with actions and chunks
  /items?source=             the source's item browser (filters, pages); with &key= an item's history
  /chunks/{chunk_id}         a chunk traced to its run, version, place and stages (or who removed it)
  /diff?a=&b=                two runs compared: only what differs
  /search?q=&mode=           the index searched, hits highlighted and linked to their lineage
JSON: the same under /api/... (the dicts of ``plugins.engine.lineage``; ``/api/search`` the rows of
``plugins.engine.search.run_search``, each with its run, source version and lineage links).

Every route requires an Airflow user (``auth``): lineage names documents and errors, which are no
one else's business. A source's pages and JSON also need read access to its sync DAG in
Airflow (``dag_access``: a 403 otherwise), and lists and search leave out what the user may not read. A browser asking for a page without a session is sent to Airflow's login
page; the JSON API (and any bearer-token client) gets a 401 with an RFC 6750 challenge. ``limit``
is 1..500 and ``mode`` one of bm25/vector/hybrid; anything else is a 422, not a silent clamp.
Everything a page needs is served from here (inline CSS and SVG; nothing from a CDN).
"""

from __future__ import annotations

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from plugins.tributary_airflow.ui.api import add_json_routes
from plugins.tributary_airflow.ui.auth import LoginRequired, login_redirect, require_user
from plugins.tributary_airflow.ui.common import MAX_LIMIT, Pages, root_path
from plugins.tributary_airflow.ui.dag_access import SourceForbidden
from plugins.tributary_airflow.ui.routes_items import add_item_routes
from plugins.tributary_airflow.ui.routes_runs import add_run_routes, vector_origin
from plugins.tributary_airflow.ui.routes_search import add_search_routes
from plugins.tributary_airflow.ui.routes_sources import add_source_routes

__all__ = ["MAX_LIMIT", "create_app", "vector_origin"]


def create_app(*, require_auth: bool = True) -> FastAPI:
    """The audit app; ``require_auth=False`` only for tests that serve it outside Airflow."""
    deps = [Depends(require_user)] if require_auth else []
    app = FastAPI(title="Tributary audit", dependencies=deps, docs_url=None, redoc_url=None, openapi_url=None)
    app.add_exception_handler(LoginRequired, login_redirect)
    pages = Pages()

    async def forbidden(request: Request, exc: Exception) -> Response:
        """403: the page (or JSON) says which DAG the user would need to read."""
        if not isinstance(exc, SourceForbidden):
            raise exc
        detail = f"your Airflow user may not read DAG {exc.dag_id} (source {exc.source_id})"
        if request.url.path[len(root_path(request)) :].startswith("/api/"):
            return JSONResponse({"detail": detail}, status_code=403)
        return pages.render(request, "forbidden.html", status=403, source=exc.source_id, dag_id=exc.dag_id)

    app.add_exception_handler(SourceForbidden, forbidden)
    add_json_routes(app)
    add_search_routes(app, pages)
    add_source_routes(app, pages)
    add_run_routes(app, pages)
    add_item_routes(app, pages)
    return app
