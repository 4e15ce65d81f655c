"""The list of sources and a page per source: its health, totals, trend, and the actions an
operator takes from it (sync now, full resync, re-sync failed items, pause / resume), each a
call to Airflow's REST API with the signed-in user's token (see ``airflow_api``)."""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from include.config import SourceConfig
from include.stores import StateStore
from include.stores.browse import last_run, source_totals
from include.stores.events import EventStore
from include.stores.subscriptions import SubscriptionStore
from plugins.engine import lineage
from plugins.engine.access import source_visibility
from plugins.tributary_airflow.ui import airflow_api, views
from plugins.tributary_airflow.ui.charts import Series, bar_chart
from plugins.tributary_airflow.ui.common import MAX_LIMIT, Pages, Store, root_path, source_config, valid_sources
from plugins.tributary_airflow.ui.dag_access import readable, require_source
from plugins.tributary_airflow.ui.freshness import freshness

__all__ = ["ACTIONS", "add_source_routes", "source_summary"]

TREND_RUNS = 30
SYNCED = ("success", "partial")  # outcomes after which the index reflects the source
# action -> (what the run's conf is, in words)
ACTIONS = {
    "sync": "Sync now",
    "full_resync": "Full resync",
    "resync_failed": "Re-sync failed items",
    "pause": "Pause",
    "resume": "Resume",
}


def _naive_utc(value: Any) -> dt.datetime | None:
    if not isinstance(value, dt.datetime):
        return None
    return value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value


def source_summary(store: StateStore, config: SourceConfig, now: dt.datetime) -> dict[str, Any]:
    """What the list and the source page show of one source."""
    latest = last_run(store, config.source_id)
    # a partial run committed what it could: the index is as fresh as that run (its failures
    # are counted apart, on the page and in the outcome)
    success = last_run(store, config.source_id, statuses=SYNCED)
    started = _naive_utc(success["started_at"]) if success else None
    return {
        "source": config.source_id,
        "kind": config.kind,
        "dag_id": config.dag_id,
        "schedule": config.schedule,
        "index": f"{config.index.backend}/{config.index.name}",
        "embedding": f"{config.embedding.provider}" if config.embedding.enabled else None,
        "last": lineage.jsonable(latest) if latest else None,
        "last_success": lineage.jsonable(success) if success else None,
        "freshness": freshness(config.schedule, started.replace(tzinfo=dt.UTC) if started else None, now),
        "totals": source_totals(store, config.source_id, config.engine_options.quarantine_after),
        "access": source_visibility(store, config.source_id),
        "events": _events(store, config),
        "subscriptions": _subscriptions(store, config),
    }


def _subscriptions(store: StateStore, config: SourceConfig) -> dict[str, Any] | None:
    """Event subscriptions the source holds at its service (Feishu with events on), else None."""
    if config.kind != "feishu" or not (config.events.enabled and config.events.subscribe):
        return None
    return SubscriptionStore(store).summary(config.source_id)


def _events(store: StateStore, config: SourceConfig) -> dict[str, Any]:
    """The source's events mode and, when on, its event store's counts (last event, received,
    coalesced, runs started, duplicates, refused by reason); with events off the store is not read."""
    if not config.events.enabled:
        return {"mode": "off"}
    return {"mode": config.events.mode, **EventStore(store).stats(config.source_id).to_dict()}


def _trend(runs: list[dict[str, Any]]) -> list[Any]:
    """Small charts of the last runs (oldest left): items by action, duration, bytes fetched."""
    runs = list(reversed(runs))
    labels = [f"{r['run_id']} ({views.outcome(r)})" for r in runs]

    def series(key: str) -> list[float]:
        return [float((r.get("counts") or {}).get(key) or 0) for r in runs]

    return [
        bar_chart(
            "items new / changed / deleted / failed",
            labels,
            [
                Series("new", series("new"), "#12b76a"),
                Series("changed", series("changed"), "#2e90fa"),
                Series("deleted", series("deleted"), "#f79009"),
                Series("failed", series("failed"), "#d92d20"),
            ],
        ),
        bar_chart(
            "duration", labels, [Series("duration", [float(r.get("duration_s") or 0) for r in runs], "#7a5af8")], "s"
        ),
        bar_chart("bytes fetched", labels, [Series("bytes", series("bytes_fetched"), "#475467")], "B"),
    ]


def _same_origin(request: Request) -> bool:
    """A form posted from our own pages (a cross-site form must not act with the user's cookie)."""
    origin = request.headers.get("origin") or request.headers.get("referer")
    if not origin:
        return True  # not a browser form (a script with a bearer token)
    return urlsplit(origin).netloc == request.headers.get("host", "")


async def _act(request: Request, config: SourceConfig, action: str, store: StateStore) -> airflow_api.AirflowAnswer:
    if action == "pause" or action == "resume":
        return await airflow_api.pause_dag(request, config.dag_id, action == "pause")
    conf: dict[str, Any] = {}
    if action == "full_resync":
        conf = {"full_resync": True}
    elif action == "resync_failed":
        keys = source_totals(store, config.source_id, config.engine_options.quarantine_after).failing_keys
        if not keys:
            return airflow_api.AirflowAnswer(0, error="no item is failing: nothing to re-sync")
        conf = {"only_keys": keys}
    return await airflow_api.trigger_dag_run(request, config.dag_id, conf)


def _index_page(pages: Pages, request: Request, store: StateStore) -> HTMLResponse:
    now = dt.datetime.now(dt.UTC)
    runs = lineage.list_runs(store, None, limit=MAX_LIMIT)
    every = valid_sources()
    allowed = readable(request, {c.source_id for c in every} | {r["source"] for r in runs})
    configs = [c for c in every if c.source_id in allowed]
    runs = [r for r in runs if r["source"] in allowed]
    summaries = [source_summary(store, c, now) for c in configs]
    known = {c.source_id for c in configs}
    retired = sorted({r["source"] for r in runs} - known)  # removed from the config, history kept
    order = [c.source_id for c in configs] + retired
    by_source = {s: [r for r in runs if r["source"] == s][:10] for s in order}
    return pages.render(request, "index.html", summaries=summaries, retired=retired, order=order, by_source=by_source)


async def _source_page(pages: Pages, request: Request, store: StateStore, config: SourceConfig) -> HTMLResponse:
    summary = source_summary(store, config, dt.datetime.now(dt.UTC))
    runs = lineage.list_runs(store, config.source_id, limit=TREND_RUNS)
    dag = await airflow_api.dag_info(request, config.dag_id)
    done = request.query_params.get("done")
    created = request.query_params.get("dag_run")
    created_run = await airflow_api.dag_run(request, config.dag_id, created) if created else None
    return pages.render(
        request,
        "source.html",
        s=summary,
        runs=runs,
        charts=_trend(runs),
        dag=dag.body if dag.ok else None,
        dag_error=None if dag.ok else dag.detail,
        done=ACTIONS.get(done or ""),
        created=created,
        created_run=created_run.body if created_run and created_run.ok else None,
        failed=request.query_params.get("failed"),
    )


def add_source_routes(app: FastAPI, pages: Pages) -> None:
    @app.get("/", response_class=HTMLResponse)
    def index(request: Request, store: Store) -> HTMLResponse:
        return _index_page(pages, request, store)

    @app.get("/sources/{source_id}", response_class=HTMLResponse)
    async def source_page(request: Request, source_id: str, store: Store) -> HTMLResponse:
        require_source(request, source_id)
        config = source_config(source_id)
        if config is None:
            return pages.missing(request, f"configured source {source_id}")
        return await _source_page(pages, request, store, config)

    @app.get("/sources/{source_id}/confirm-full-resync", response_class=HTMLResponse)
    def confirm_full_resync(request: Request, source_id: str, store: Store) -> HTMLResponse:
        require_source(request, source_id)
        config = source_config(source_id)
        if config is None:
            return pages.missing(request, f"configured source {source_id}")
        summary = source_summary(store, config, dt.datetime.now(dt.UTC))
        return pages.render(request, "confirm.html", s=summary, embeds=config.embedding.enabled)

    @app.post("/sources/{source_id}/actions/{action}")
    async def act(request: Request, source_id: str, action: str, store: Store) -> RedirectResponse:
        require_source(request, source_id)
        config = source_config(source_id)
        if config is None or action not in ACTIONS:
            raise HTTPException(status_code=404, detail=f"no action {action!r} for source {source_id!r}")
        if not _same_origin(request):
            raise HTTPException(status_code=403, detail="cross-site request refused")
        answer = await _act(request, config, action, store)
        query = {"done": action}
        if answer.ok and "dag_run_id" in answer.body:
            query["dag_run"] = answer.body["dag_run_id"]
        elif not answer.ok:
            query["failed"] = f"{ACTIONS[action]}: {answer.detail}"
        target = f"{root_path(request)}/sources/{quote(source_id, safe=':')}?{urlencode(query)}"
        return RedirectResponse(target, status_code=303)
