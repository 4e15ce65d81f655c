"""What every route module shares: the store per request, the configured sources, the page renderer."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, Query, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from include.config import SourceConfig, load_sources_report
from include.index.base import SEARCH_MODES
from include.settings import get_settings
from include.stores import StateStore
from plugins.connectors.base import validate_source_options
from plugins.engine import lineage
from plugins.tributary_airflow.hooks import StateStoreHook
from plugins.tributary_airflow.ui import views

__all__ = ["MAX_LIMIT", "Limit", "Pages", "Store", "parse_since", "root_path", "source_config", "valid_sources"]

_TEMPLATES = Path(__file__).parent / "templates"
MAX_LIMIT = 500
# ``?limit=``: validated, not clamped (``min(limit, 500)`` let ``-1`` through: SQLite reads a
# negative LIMIT as "no limit", so one request could read the whole run log).
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description=f"1..{MAX_LIMIT}")]


def _store() -> Iterator[StateStore]:
    """One store per request, closed when the response is sent."""
    with StateStoreHook() as store:
        yield store


Store = Annotated[StateStore, Depends(_store)]


def valid_sources() -> list[SourceConfig]:
    """The sources file's valid sources: a typo in another one is no 500."""
    return load_sources_report(get_settings().sources_file, validate_source_options)[0]


def source_config(source_id: str) -> SourceConfig | None:
    return next((s for s in valid_sources() if s.source_id == source_id), None)


def root_path(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(_TEMPLATES), autoescape=select_autoescape(["html"]))
    env.filters.update(
        short=lambda value, n=12: "" if value is None else str(value)[:n],
        version=views.version_text,
        q=lambda s: quote(str(s), safe=""),
        warnings=lineage.warnings_text,
        when=views.when,
        ms=views.ms_text,
        stages=views.stage_text,
    )
    env.globals.update(
        run_link=views.run_link, actions=lineage.ACTIONS, modes=SEARCH_MODES, outcome=views.outcome, len=len
    )
    return env


class Pages:
    """Renders the templates with the app's root path (``/tributary`` inside Airflow)."""

    def __init__(self) -> None:
        self.env = _environment()

    def render(self, request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        html = self.env.get_template(name).render(root=root_path(request), **ctx)
        return HTMLResponse(html, status_code=status)

    def missing(self, request: Request, what: str, **ctx: Any) -> HTMLResponse:
        return self.render(request, "missing.html", status=404, what=what, **ctx)


def parse_since(text: str | None) -> tuple[dt.datetime | None, str | None]:
    """``changed since`` from a form (a date or an ISO time, UTC if naive) -> (moment, error)."""
    if not text:
        return None, None
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None, f"changed since: {text!r} is not a date (YYYY-MM-DD or ISO 8601)"
    # the run log's times are UTC, naive in SQLite: compare like with like
    return (moment.astimezone(dt.UTC).replace(tzinfo=None) if moment.tzinfo else moment), None
