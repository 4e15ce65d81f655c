"""What every stage knows about the run it belongs to."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from include.config import SourceConfig, load_sources_report, url_secret
from include.settings import get_settings
from include.staging import StagingArea
from include.stores import StateStore
from plugins.connectors.base import validate_source_options
from plugins.engine.progress import Progress

if TYPE_CHECKING:
    from plugins.engine.early import EarlyWork

__all__ = ["MassDeleteError", "RunContext", "RunParams", "closed_run", "get_source", "is_closed"]

log = logging.getLogger("tributary")


class MassDeleteError(RuntimeError):
    """A run would delete more than the configured share of a source's documents."""


def _checked_keys(keys: Any) -> list[str] | None:
    """``only_keys`` as a list, refusing a URL that carries a credential before the run log (or
    any state) records it: item keys are shown in lineage, the UI and logs."""
    if not keys:
        return None
    if isinstance(keys, str):
        keys = [keys]
    for number, key in enumerate(keys):
        if secret := url_secret(str(key)):
            raise ValueError(
                f"only_keys: entry #{number} is a URL with {secret}; item keys are shown in lineage and the UI, "
                "so credentials go in the Airflow Connection named by the source's conn_id, never in a key"
            )
    return [str(k) for k in keys]


@dataclass(slots=True)
class RunParams:
    """The manual-trigger knobs (Airflow Params / ``run_pipeline(params=...)``)."""

    full_resync: bool = False
    dry_run: bool = False
    max_items: int | None = None
    window_start: dt.datetime | None = None
    window_end: dt.datetime | None = None
    allow_mass_delete: bool = False
    only_keys: list[str] | None = None

    @classmethod
    def from_mapping(cls, data: dict[str, Any] | None) -> RunParams:
        data = dict(data or {})

        def _dt(value: Any) -> dt.datetime | None:
            if value in (None, ""):
                return None
            if isinstance(value, dt.datetime):
                return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
            parsed = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)

        return cls(
            full_resync=bool(data.get("full_resync", False)),
            dry_run=bool(data.get("dry_run", False)),
            max_items=int(data["max_items"]) if data.get("max_items") not in (None, "", 0) else None,
            window_start=_dt(data.get("window_start")),
            window_end=_dt(data.get("window_end")),
            allow_mass_delete=bool(data.get("allow_mass_delete", False)),
            only_keys=_checked_keys(data.get("only_keys")),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "full_resync": self.full_resync,
            "dry_run": self.dry_run,
            "max_items": self.max_items,
            "window_start": self.window_start.isoformat() if self.window_start else None,
            "window_end": self.window_end.isoformat() if self.window_end else None,
            "allow_mass_delete": self.allow_mass_delete,
            "only_keys": self.only_keys,
        }


@dataclass(slots=True)
class RunContext:
    source: SourceConfig
    run_id: str
    params: RunParams = field(default_factory=RunParams)
    dag_id: str | None = None
    run_type: str | None = None
    # the event batches whose asset events started this run (plugins.engine.event_runs), and
    # the run log's record of them once discover loaded them
    event_batches: list[str] = field(default_factory=list)
    trigger: dict[str, Any] | None = None
    # where the steps report how far they got (a terminal's progress line); None in Airflow
    progress: Progress | None = field(default=None, repr=False, compare=False)
    # pages parsed while the crawl still fetches (plugins.engine.early); None in Airflow
    early: EarlyWork | None = field(default=None, repr=False, compare=False)

    @property
    def staging(self) -> StagingArea:
        return StagingArea(self.dag_id or self.source.dag_id, self.run_id)


def get_source(name: str) -> SourceConfig:
    """Look a source up by ``kind:name``, DAG id or bare name in the configured sources file.

    Another source's bad entry does not stop this one (its DAG was built from the same file);
    asking for an invalid source raises its validation error.
    """
    settings = get_settings()
    sources, errors = load_sources_report(settings.sources_file, validate_source_options)
    for src in sources:
        if name in (src.source_id, src.dag_id, src.name):
            return src
    for error in errors:
        if name in (error.label, error.dag_id, error.label.partition(":")[2]):
            raise ValueError(error.message)
    raise KeyError(f"source {name!r} not found in {settings.sources_file}")


def is_closed(run: dict[str, Any] | None) -> bool:
    """A run-log row of a run that finished: closed by its summary as ``success`` or ``partial``,
    or as ``failed`` with an outcome judged at commit (``counts["outcome"]``: its commit stands,
    nothing was reached). A run that failed on an error (a task raised) has no outcome: not closed.
    """
    if run is None:
        return False
    status = run.get("status")
    return status in ("success", "partial") or (
        status == "failed" and (run.get("counts") or {}).get("outcome") == "failed"
    )


def closed_run(ctx: RunContext, store: StateStore) -> dict[str, Any] | None:
    """The run-log row of this run if it already finished (:func:`is_closed`), else None.

    A finished run is closed: clearing and re-running any of its tasks in Airflow must leave
    index, state and run log as they are (its staging area is gone), so steps treat it as
    nothing to do instead of re-planning, failing, or reopening the run (the base of every
    step checks it: ``plugins.engine.steps.Step``).
    """
    run = store.get_run(ctx.run_id, ctx.source.source_id)
    return run if is_closed(run) else None
