"""The run, chunk and diff pages: a run's counts and reasons, a chunk traced to its run (or to
the run that removed it), two runs compared."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse

from include.stores import StateStore
from include.stores.browse import chunk_events
from plugins.engine import lineage
from plugins.engine.event_runs import trigger_text
from plugins.tributary_airflow.ui import views
from plugins.tributary_airflow.ui.common import Pages, Store, valid_sources
from plugins.tributary_airflow.ui.dag_access import require_source

__all__ = ["add_run_routes", "embeds", "vector_origin"]


def embeds(run: dict[str, Any]) -> bool:
    """Whether a run's page speaks of vectors: its source embeds (by the config) or it embedded
    or reused some (a source whose embedding was turned off since)."""
    counts = run.get("counts") or {}
    if counts.get("chunks_embedded") or counts.get("chunks_vector_reused"):
        return True
    return any(s.source_id == run.get("source") and s.embedding.enabled for s in valid_sources())


def vector_origin(chunk_id: str, row: dict[str, Any] | None) -> str:
    """Whether the run that wrote a chunk ``computed`` its vector or ``reused`` the index's ("" if not embedded)."""
    if not row or not row.get("embedding_model"):
        return ""
    if chunk_id in (row.get("chunks_vector_reused") or ()):
        return "reused"
    return "computed" if chunk_id in (row.get("chunks_embedded") or ()) else ""


def _neighbours(store: StateStore, chunk: dict[str, Any]) -> dict[str, Any]:
    """The chunk's place among its item's indexed chunks (their stored order is the document's)."""
    state = store.get_item(chunk["source"], chunk["item_key"])
    ids = state.chunk_ids if state else []
    if chunk["chunk_id"] not in ids:
        return {"position": None, "of": len(ids), "previous": None, "next": None}
    at = ids.index(chunk["chunk_id"])
    return {
        "position": at + 1,
        "of": len(ids),
        "previous": ids[at - 1] if at > 0 else None,
        "next": ids[at + 1] if at + 1 < len(ids) else None,
    }


def _previous_run(store: StateStore, run: dict[str, Any]) -> str | None:
    """The source's run before this one (the diff link's other side)."""
    runs = store.runs(run["source"], limit=200)
    ids = [r["run_id"] for r in runs]
    if run["run_id"] in ids and ids.index(run["run_id"]) + 1 < len(ids):
        return str(ids[ids.index(run["run_id"]) + 1])
    return None


def _run_context(store: StateStore, report: dict[str, Any]) -> dict[str, Any]:
    run = report["run"]
    every = store.run_items(run["run_id"], source=run["source"]) if report["filter"] else report["items"]
    return {
        "r": report,
        "run": run,
        "embeds": embeds(run),
        "reasons": views.error_reasons(run, every),
        # the trigger is said in words above the table ("started by events: ...")
        "params": views.params_rows({k: v for k, v in (run.get("params") or {}).items() if k != "trigger"}),
        "started_by": trigger_text(run.get("params")),
        "counts": views.counts_groups(run.get("counts")),
        "window": views.window_text(run),
        "deferred": views.deferred_text(run),
        "previous": _previous_run(store, run),
    }


def _chunk_page(pages: Pages, request: Request, store: StateStore, chunk_id: str, source: str | None) -> HTMLResponse:
    found = lineage.chunk_lineage(store, chunk_id, source)
    require_source(request, found["source"] if found else source)
    if found is not None:
        return pages.render(request, "chunk.html", c=found, place=_neighbours(store, found), origin=vector_origin)
    events = chunk_events(store, chunk_id, source or None)
    if events["removed"] is not None:
        require_source(request, events["removed"].get("source"))
        return pages.render(
            request, "chunk_removed.html", chunk_id=chunk_id, removed=events["removed"], added=events["added"]
        )
    return pages.missing(request, f"chunk {chunk_id}")


def add_run_routes(app: FastAPI, pages: Pages) -> None:
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
            source = next((s.source_id for s in valid_sources() if s.dag_id == dag_id), None)
        report = lineage.run_report(store, run_id, action or None, source or None)
        if report is None:
            return pages.missing(request, f"run {run_id}")
        require_source(request, report["run"]["source"])
        return pages.render(request, "run.html", **_run_context(store, report))

    @app.get("/chunks/{chunk_id}", response_class=HTMLResponse)
    def chunk_page(request: Request, chunk_id: str, store: Store, source: str | None = None) -> HTMLResponse:
        return _chunk_page(pages, request, store, chunk_id, source)

    @app.get("/diff", response_class=HTMLResponse)
    def diff_page(request: Request, b: str, store: Store, a: str = "", source: str | None = None) -> HTMLResponse:
        if not a:  # the runs list links "diff with previous" by the later run alone
            later = store.get_run(b, source or None)
            a = (_previous_run(store, later) if later else None) or ""
        found = lineage.diff_runs(store, a, b, source or None) if a else None
        if found is None:
            return pages.missing(request, f"runs {a} / {b}")
        require_source(request, found["a"]["source"])
        require_source(request, found["b"]["source"])
        counts = [
            (k.replace("_", " "), found["a"]["counts"].get(k, 0), found["b"]["counts"].get(k, 0), delta)
            for k, delta in found["counts_delta"].items()
        ]
        return pages.render(request, "diff.html", d=found, counts=counts, source=source or found["b"]["source"])
