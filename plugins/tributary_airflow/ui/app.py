"""Audit pages and JSON for Tributary's lineage, as a FastAPI app mounted in Airflow's API server.

HTML (linked from Airflow's navigation):
  /                      runs per configured source
  /runs/{run_id}         one run: counts, items with actions, versions, errors (?action= filter)
  /items?source=&key=    an item's history across runs
  /chunks/{chunk_id}     a chunk traced to its run, source version and stages
  /diff?a=&b=            two runs compared item by item
  /search?q=&mode=       the index searched (bm25, vector or hybrid), each hit linked to its lineage
JSON: the same under /api/... (the dicts of ``plugins.engine.lineage``; ``/api/search`` the rows of
``plugins.engine.search.search_index``, each with its run, source version and lineage links).

Every route requires an Airflow user (the API server's JWT, as a bearer token or the UI's
cookie): lineage names documents and errors, which are no one else's business. A missing,
expired, forged or unreadable token is answered 401 with ``WWW-Authenticate: Bearer`` (RFC 6750
s3.1), never an error page. ``limit`` is 1..500 and ``mode`` one of bm25/vector/hybrid; anything
else is a 422, not a silent clamp or a fallback. A search the configuration cannot serve (vector
search of a BM25-only source, an unknown source) is a 400 naming why. A query that could not be
embedded is ``{"error", "detail"}`` with 502 (a bad answer) or 503 (unreachable, timed out, rate
limited, busy) in ``vector`` mode; a ``hybrid`` search then answers its BM25 ranking, each row
with ``"degraded": "bm25_only"`` and ``"note"`` (and the header ``X-Search-Degraded``). An index
search past its time limit is a 504. The page says all of this beside the form.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from include.config import SourceConfig, load_sources_report
from include.index.base import SEARCH_MODES, SearchMode, SearchTimeout
from include.settings import get_settings
from include.stores import StateStore
from plugins.connectors.base import validate_source_options
from plugins.engine import lineage
from plugins.engine.search import SearchError, SearchResult, VectorSearchUnavailable, run_search
from plugins.tributary_airflow.hooks import StateStoreHook

__all__ = ["MAX_LIMIT", "create_app"]

log = logging.getLogger("tributary.ui")

_TEMPLATES = Path(__file__).parent / "templates"
MAX_LIMIT = 500
# ``?limit=``: validated, not clamped (``min(limit, 500)`` let ``-1`` through: SQLite reads a
# negative LIMIT as "no limit", so one request could read the whole run log).
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description=f"1..{MAX_LIMIT}")]
SearchQuery = Annotated[str, Query(min_length=1, max_length=2000, description="the search text")]


def _store() -> Iterator[StateStore]:
    """One store per request, closed when the response is sent."""
    with StateStoreHook() as store:
        yield store


Store = Annotated[StateStore, Depends(_store)]


def _valid_sources() -> list[SourceConfig]:
    """The sources file's valid sources: a typo in another one is no 500."""
    return load_sources_report(get_settings().sources_file, validate_source_options)[0]


def _sources() -> list[dict[str, Any]]:
    return [
        {
            "source": s.source_id,
            "dag_id": s.dag_id,
            "kind": s.kind,
            "index": f"{s.index.backend}/{s.index.name}",
            "embedding": s.embedding.provider if s.embedding.enabled else None,
        }
        for s in _valid_sources()
    ]


def _search(request: Request, q: str, mode: SearchMode, source: str | None, limit: int) -> SearchResult:
    """The engine's search, each row with links to its chunk's lineage and its run (page and JSON).
    :class:`VectorSearchUnavailable` and :class:`SearchTimeout` go to the caller (see ``_search_failure``)."""
    try:
        result = run_search(_valid_sources(), q, k=limit, source=source or None, mode=mode)
    except SearchError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None
    root = request.scope.get("root_path", "").rstrip("/")
    for hit in result.hits:
        chunk = f"{quote(hit['chunk_id'], safe='')}?source={quote(hit['source'], safe='')}"
        hit["lineage"] |= {"page": f"{root}/chunks/{chunk}", "api": f"{root}/api/chunks/{chunk}"}
        if hit.get("run_id"):
            run = f"{quote(hit['run_id'], safe='')}?source={quote(hit['source'], safe='')}"
            hit["lineage"] |= {"run_page": f"{root}/runs/{run}", "run_api": f"{root}/api/runs/{run}"}
        if result.notes:
            hit["note"] = "; ".join(result.notes)
        if result.degraded:
            hit["degraded"] = result.degraded
    return result


SEARCH_FAILURES = (VectorSearchUnavailable, SearchTimeout)


def _search_failure(exc: Exception) -> tuple[int, dict[str, str]]:
    """A failed search's status and JSON body: 502/503 for the query embedding, 504 for the index."""
    if isinstance(exc, VectorSearchUnavailable):
        return exc.status, {"error": exc.reason, "detail": f"vector search unavailable: {exc}"}
    return 504, {"error": "search_timeout", "detail": str(exc)}


def _embeds(run: dict[str, Any]) -> bool:
    """Whether a run's page speaks of vectors: its source embeds (by the config) or it embedded
    or reused some (a source whose embedding was turned off since)."""
    counts = run.get("counts") or {}
    if counts.get("chunks_embedded") or counts.get("chunks_vector_reused"):
        return True
    return any(s.source_id == run.get("source") and s.embedding.enabled for s in _valid_sources())


def vector_origin(chunk_id: str, row: dict[str, Any] | None) -> str:
    """Whether the run that wrote a chunk ``computed`` its vector or ``reused`` the index's ("" if not embedded)."""
    if not row or not row.get("embedding_model"):
        return ""
    if chunk_id in (row.get("chunks_vector_reused") or ()):
        return "reused"
    return "computed" if chunk_id in (row.get("chunks_embedded") or ()) else ""


def _unauthorized(detail: str, error: str | None = "invalid_token") -> HTTPException:
    """401 with the challenge RFC 6750 s3 requires; ``error`` only when a token was presented."""
    challenge = f'Bearer realm="tributary", error="{error}"' if error else 'Bearer realm="tributary"'
    return HTTPException(status_code=401, detail=detail, headers={"WWW-Authenticate": challenge})


def _presented_token(request: Request) -> str | None:
    """The bearer token (RFC 6750 s2.1; the scheme is case-insensitive) or else the UI's cookie."""
    # deferred: the API server's auth modules load only where requests are served (every
    # Airflow process imports the plugin; see _require_user)
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return credentials.strip()
    return request.cookies.get(COOKIE_NAME_JWT_TOKEN)


async def _require_user(request: Request) -> Any:
    """An Airflow user from the API server's JWT: ``Authorization: Bearer`` or the UI's cookie.

    Airflow's ``resolve_user_from_token`` answers an invalid token 403 ("Invalid JWT token") and
    translates only pyjwt's ``InvalidTokenError``: anything else its validator or the auth
    manager raises would surface as a 500. Both mean the credentials did not authenticate, which
    RFC 6750 s3.1 answers 401 ``invalid_token`` (403 is for a valid token lacking scope). The
    reason is logged by type only: a token is a secret.

    Airflow's security module is imported here, not at import time: every Airflow process loads
    the plugin, only the API server serves it.
    """
    # deferred: the API server's security module, for requests only (see the docstring)
    from airflow.api_fastapi.core_api.security import resolve_user_from_token

    token = _presented_token(request)
    if not token:
        raise _unauthorized("Not authenticated", error=None)
    try:
        return await resolve_user_from_token(token)
    except HTTPException as exc:
        # Airflow: 401 for an expired token, 403 for any other invalid one
        raise _unauthorized("Token expired" if exc.status_code == 401 else "Invalid token") from None
    except Exception as exc:  # the validator's own failure: still not an authenticated request
        log.warning("audit request refused: token validation raised %s", type(exc).__name__)
        raise _unauthorized("Invalid token") from None


def _short(value: Any, n: int = 12) -> str:
    return "" if value is None else str(value)[:n]


def _version(v: dict[str, Any] | None) -> str:
    if not v:
        return ""
    parts = [f"{k}={v[k]}" for k in ("revision", "etag", "modified_time", "last_modified") if v.get(k)]
    return ", ".join(parts)


def _run_link(run: dict[str, Any]) -> str | None:
    """The run's page in Airflow's UI (runs made outside Airflow, e.g. by the CLI, have none)."""
    if not run.get("dag_id") or (run.get("run_type") or "") == "inline":
        return None
    return f"/dags/{quote(run['dag_id'])}/runs/{quote(run['run_id'], safe='')}"


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(_TEMPLATES), autoescape=select_autoescape(["html"]))
    env.filters.update(
        short=_short, version=_version, q=lambda s: quote(str(s), safe=""), warnings=lineage.warnings_text
    )
    env.globals.update(run_link=_run_link, actions=lineage.ACTIONS, vector_origin=vector_origin, modes=SEARCH_MODES)
    return env


def create_app(*, require_auth: bool = True) -> FastAPI:
    """The audit app; ``require_auth=False`` only for tests that serve it outside Airflow."""
    deps = [Depends(_require_user)] if require_auth else []
    app = FastAPI(title="Tributary audit", dependencies=deps, docs_url=None, redoc_url=None, openapi_url=None)
    _add_json_routes(app)
    _add_html_routes(app, _environment())
    return app


def _search_response(result: SearchResult) -> JSONResponse:
    headers = {"X-Search-Degraded": result.degraded} if result.degraded else None
    return JSONResponse(result.hits, headers=headers)


def _add_json_routes(app: FastAPI) -> None:
    @app.get("/api/runs")
    def api_runs(store: Store, source: str | None = None, limit: Limit = 50) -> Any:
        return lineage.list_runs(store, source, limit=limit)

    @app.get("/api/runs/{run_id}")
    def api_run(run_id: str, store: Store, action: str | None = None, source: str | None = None) -> Any:
        return _found(lineage.run_report(store, run_id, action, source), f"run {run_id}")

    @app.get("/api/items")
    def api_item(source: str, key: str, store: Store) -> Any:
        return _found(lineage.item_history(store, source, key), f"item {key}")

    @app.get("/api/chunks/{chunk_id}")
    def api_chunk(chunk_id: str, store: Store, source: str | None = None) -> Any:
        return _found(lineage.chunk_lineage(store, chunk_id, source), f"chunk {chunk_id}")

    @app.get("/api/diff")
    def api_diff(a: str, b: str, store: Store, source: str | None = None) -> Any:
        return _found(lineage.diff_runs(store, a, b, source), f"runs {a} / {b}")

    @app.get("/api/search")
    def api_search(
        request: Request, q: SearchQuery, mode: SearchMode = "bm25", source: str | None = None, limit: Limit = 10
    ) -> Any:
        try:
            return _search_response(_search(request, q, mode, source, limit))
        except SEARCH_FAILURES as exc:
            status, body = _search_failure(exc)
            return JSONResponse(body, status_code=status)


def _add_html_routes(app: FastAPI, env: Environment) -> None:
    def page(request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return HTMLResponse(env.get_template(name).render(root=root, **ctx), status_code=status)

    def found_or_missing(request: Request, value: Any, name: str, what: str, **ctx: Any) -> HTMLResponse:
        return page(request, "missing.html", what=what) if value is None else page(request, name, **ctx)

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request, store: Store) -> HTMLResponse:
        sources = _sources()
        runs = lineage.list_runs(store, None, limit=MAX_LIMIT)
        known = {s["source"] for s in sources}
        # sources removed from the config still have history worth showing
        sources += [
            {"source": s, "dag_id": None, "kind": s.split(":")[0], "index": ""}
            for s in sorted({r["source"] for r in runs} - known)
        ]
        by_source = {s["source"]: [r for r in runs if r["source"] == s["source"]][:20] for s in sources}
        return page(request, "index.html", sources=sources, by_source=by_source)

    @app.get("/runs/{run_id}", response_class=HTMLResponse)
    def run_page(
        request: Request,
        run_id: str,
        store: Store,
        action: str | None = None,
        source: str | None = None,
        dag_id: str | None = None,
    ) -> HTMLResponse:
        if not source and dag_id:  # the DAG-run tab knows the DAG, not the source
            source = next((s["source"] for s in _sources() if s["dag_id"] == dag_id), None)
        report = lineage.run_report(store, run_id, action or None, source or None)
        run = report["run"] if report else None
        embeds = run is not None and _embeds(run)
        return found_or_missing(request, report, "run.html", f"run {run_id}", r=report, run=run, embeds=embeds)

    @app.get("/items", response_class=HTMLResponse)
    def item_page(request: Request, source: str, key: str, store: Store) -> HTMLResponse:
        found = lineage.item_history(store, source, key)
        return found_or_missing(request, found, "item.html", f"item {key} of {source}", h=found)

    @app.get("/chunks/{chunk_id}", response_class=HTMLResponse)
    def chunk_page(request: Request, chunk_id: str, store: Store, source: str | None = None) -> HTMLResponse:
        found = lineage.chunk_lineage(store, chunk_id, source)
        return found_or_missing(request, found, "chunk.html", f"chunk {chunk_id}", c=found)

    @app.get("/search", response_class=HTMLResponse)
    def search_page(
        request: Request, q: str = "", mode: SearchMode = "bm25", source: str | None = None, limit: Limit = 10
    ) -> HTMLResponse:
        result, error, status = None, None, 200
        if q.strip():
            try:
                result = _search(request, q, mode, source, limit)
            except HTTPException as exc:  # shown on the page, beside the form that asked
                error = exc.detail
            except SEARCH_FAILURES as exc:  # the same, with the API's status
                status, body = _search_failure(exc)
                error = body["detail"]
        return page(
            request,
            "search.html",
            status,
            q=q,
            mode=mode,
            source=source or "",
            hits=result.hits if result else [],
            notes=result.notes if result else [],
            error=error,
            sources=_sources(),
        )

    @app.get("/diff", response_class=HTMLResponse)
    def diff_page(request: Request, a: str, b: str, store: Store, source: str | None = None) -> HTMLResponse:
        found = lineage.diff_runs(store, a, b, source or None)
        return found_or_missing(request, found, "diff.html", f"runs {a} / {b}", d=found)


def _found(value: Any, what: str) -> Any:
    if value is None:
        raise HTTPException(status_code=404, detail=f"no {what}")
    return JSONResponse(value)
