"""Search, as JSON (``/api/search``) and as a page: the engine's rows, each linked to its lineage.

A search the configuration cannot serve is a 400 naming why; a query that could not be embedded
is 502/503 in ``vector`` mode (``hybrid`` answers its BM25 ranking with a note); an index
search past its time limit is a 504. The page says all of this beside the form.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse

from include.acl import Principal
from include.index.base import SearchMode, SearchTimeout
from include.index.query_text import search_terms
from include.stores import StateStore
from include.stores.access import AccessStore
from plugins.engine.cli_format import searcher_json
from plugins.engine.principals import PrincipalsError, describe_principal, is_admin, resolve_principal
from plugins.engine.search import SearchError, SearchResult, VectorSearchUnavailable, run_search
from plugins.tributary_airflow.ui import views
from plugins.tributary_airflow.ui.common import Limit, Pages, Store, parse_since, root_path, valid_sources
from plugins.tributary_airflow.ui.dag_access import readable, readable_configs, require_source

__all__ = ["SEARCH_FAILURES", "add_search_routes", "search", "search_failure", "searcher"]

SearchQuery = Annotated[str, Query(min_length=1, max_length=2000, description="the search text")]
SEARCH_FAILURES = (VectorSearchUnavailable, SearchTimeout)


def searcher(request: Request, store: StateStore) -> Principal | None:
    """Who a search from these pages runs as: the signed-in Airflow user, resolved like
    ``search --as`` (their username, their account's e-mail); an admin of the principals file
    searches unrestricted (None). An app served without Airflow's auth (``create_app(
    require_auth=False)``, tests only) has no user and is unrestricted. A broken principals file
    is a 503: no search rather than one as the wrong person."""
    user = getattr(request.state, "airflow_user", None)
    if user is None:
        return None
    name = str(user.get_name())
    try:
        if is_admin(name):
            return None
        email = getattr(user, "email", None)
        return resolve_principal(name, email=str(email) if email else None, store=AccessStore(store))
    except PrincipalsError as exc:
        raise HTTPException(status_code=503, detail=f"cannot tell who is searching: {exc}") from None


def searcher_text(principal: Principal | None) -> str:
    """The page's line on who the search ran as (the CLI's words, without its flags)."""
    if principal is None:
        return "unrestricted: every document, whatever its permissions"
    return f"as {describe_principal(principal)}"


def search(
    request: Request, q: str, mode: SearchMode, source: str | None, limit: int, principal: Principal | None
) -> SearchResult:
    """The engine's search as ``principal``, each row with links to its chunk's lineage and its run
    (page and JSON). :class:`VectorSearchUnavailable` and :class:`SearchTimeout` go to the caller
    (see ``search_failure``)."""
    require_source(request, source)
    configs = valid_sources()
    allowed = readable_configs(request, configs)
    if configs and not allowed:
        raise HTTPException(status_code=403, detail="your Airflow user may read none of the sources' DAGs")
    # one index may hold several sources: without a named source, read deeper and leave out
    # the hits of sources whose DAG the user may not read (retired ones included)
    partial = source is None and len(allowed) < len(configs)
    try:
        result = run_search(
            allowed, q, k=min(limit * 5, 500) if partial else limit,
            source=source or None, mode=mode, principal=principal,
        )  # fmt: skip
    except SearchError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None
    keep = readable(request, {h["source"] for h in result.hits})
    result.hits = [h for h in result.hits if h["source"] in keep][:limit]
    if partial:
        result.notes.append("sources whose Airflow DAG you may not read are left out")
    root = root_path(request)
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


def search_failure(exc: Exception) -> tuple[int, dict[str, str]]:
    """A failed search's status and JSON body: 502/503 for the query embedding, 504 for the index."""
    if isinstance(exc, VectorSearchUnavailable):
        return exc.status, {"error": exc.reason, "detail": f"vector search unavailable: {exc}"}
    return 504, {"error": "search_timeout", "detail": str(exc)}


def _score_text(hit: dict[str, Any]) -> str:
    """The score the hit was ranked by, named: BM25, cosine, or RRF with both ranks."""
    score = float(hit.get("score") or 0)
    if hit.get("mode") == "hybrid":
        ranks = ", ".join(f"{name} #{n}" for name, n in (hit.get("ranks") or {}).items()) or "no rank"
        return f"RRF {score:.4f} ({ranks})"
    return f"{'cosine' if hit.get('mode') == 'vector' else 'BM25'} {score:.4g}"


def _written_since(store: StateStore, hits: list[dict[str, Any]], cutoff: dt.datetime) -> list[dict[str, Any]]:
    """Hits whose chunk was written by a run that started at or after ``cutoff`` (naive UTC)."""
    started: dict[tuple[str, str], dt.datetime | None] = {}
    kept = []
    for hit in hits:
        key = (hit["source"], hit.get("run_id") or "")
        if key not in started:
            run = store.get_run(key[1], key[0]) if key[1] else None
            began = run["started_at"] if run else None
            started[key] = began.astimezone(dt.UTC).replace(tzinfo=None) if began and began.tzinfo else began
        moment = started[key]
        if moment is not None and moment >= cutoff:
            kept.append(hit)
    return kept


def _rows(hits: list[dict[str, Any]], q: str) -> list[dict[str, Any]]:
    terms = search_terms(q).kept
    return [
        {
            "hit": h,
            "label": views.hit_label(h),
            "snippet": views.highlight(views.snippet(h), terms),
            "score": _score_text(h),
        }
        for h in hits
    ]


def add_search_routes(app: FastAPI, pages: Pages) -> None:
    @app.get("/api/search")
    def api_search(
        request: Request,
        store: Store,
        q: SearchQuery,
        mode: SearchMode = "bm25",
        source: str | None = None,
        limit: Limit = 10,
    ) -> Any:
        principal = searcher(request, store)
        try:
            result = search(request, q, mode, source, limit, principal)
        except SEARCH_FAILURES as exc:
            status, body = search_failure(exc)
            return JSONResponse(body, status_code=status)
        who = searcher_json(principal)
        # the body stays the list of hits; who it ran as rides in headers
        headers = {"X-Search-Access": who["access"]}
        if who["as"]:
            headers["X-Search-As"] = quote(who["as"]["name"], safe="@")
        if result.degraded:
            headers["X-Search-Degraded"] = result.degraded
        return JSONResponse(result.hits, headers=headers)

    @app.get("/search", response_class=HTMLResponse)
    def search_page(
        request: Request,
        store: Store,
        q: str = "",
        mode: SearchMode = "bm25",
        source: str | None = None,
        changed_since: str = "",
        limit: Limit = 10,
    ) -> HTMLResponse:
        result, status = None, 200
        cutoff, error = parse_since(changed_since)
        principal = searcher(request, store)
        if q.strip() and error is None:
            try:
                # a date filter drops hits after ranking: read deeper so a page still fills
                result = search(request, q, mode, source, min(limit * 5, 500) if cutoff else limit, principal)
            except HTTPException as exc:  # shown on the page, beside the form that asked
                error = exc.detail
            except SEARCH_FAILURES as exc:  # the same, with the API's status
                status, body = search_failure(exc)
                error = body["detail"]
        hits = result.hits if result else []
        if cutoff is not None:
            hits = _written_since(store, hits, cutoff)[:limit]
        return pages.render(
            request,
            "search.html",
            status,
            q=q,
            mode=mode,
            source=source or "",
            changed_since=changed_since,
            rows=_rows(hits, q),
            searched=result is not None,
            notes=result.notes if result else [],
            searcher=searcher_text(principal),
            error=error,
            sources=readable_configs(request, valid_sources()),
        )
