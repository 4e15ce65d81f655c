"""Records of the run log turned into what the pages show: table rows, words, reasons.

Pure functions of plain dicts (``plugins.engine.lineage``'s JSON), so the templates stay dumb
and every rule here can be tested without a browser.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from markupsafe import Markup, escape

__all__ = [
    "Reason",
    "counts_groups",
    "deferred_text",
    "error_reasons",
    "highlight",
    "hit_label",
    "ms_text",
    "outcome",
    "params_rows",
    "run_link",
    "snippet",
    "stage_text",
    "version_text",
    "when",
    "window_text",
]

# counts grouped as a person reads them; keys not named here go to "Other"
_COUNT_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Items", ("new", "changed", "unchanged", "deleted", "failed", "skipped", "missing_not_deleted")),
    # reprocessed: why items the source did not change went through again ("parser pdf 2.0 -> 3.0" 4)
    ("Stages", ("fetched", "parsed", "chunked", "reprocessed", "batches")),
    (
        "Chunks",
        (
            "chunks_written",
            "chunks_unchanged",
            "chunks_deleted",
            "chunks_embedded",
            "chunks_vector_reused",
            "chunks_truncated",
            "chunks_truncated_share",
        ),
    ),
    ("Bytes", ("bytes_fetched", "staging_bytes")),
    ("Dry run", ("would_add", "would_update", "would_delete")),
    ("Housekeeping", ("pruned_runs", "pruned_run_items", "failed_staging_removed")),
)
# keys shown elsewhere on the page (the error panel, the source's own counters) or not counts at all
_NOT_COUNTS = {"source_stats", "listing_complete", "dry_run", "errors", "reasons", "outcome", "outcome_note"}
_OK_ROBOTS = {"ok", "loaded", "allowed", "missing", "absent", "none", "not_found"}


@dataclass(frozen=True, slots=True)
class Reason:
    """One line of a run's error panel: why, how many times, and an example."""

    reason: str
    count: int
    detail: str = ""


def when(value: Any) -> str:
    """An ISO time (or datetime) as ``2026-12-05 11:54:08 UTC``; "" for none."""
    if not value:
        return ""
    try:
        moment = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + " UTC"  # the run log's naive times are UTC


def ms_text(value: Any) -> str:
    """Milliseconds as a person reads them: ``150 ms``, ``2.4 s``."""
    if value is None:
        return ""
    ms = float(value)
    return f"{ms:.0f} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"


def stage_text(stage_ms: Mapping[str, Any] | None) -> str:
    """``parse 150 ms · chunk 219 ms``."""
    return " · ".join(f"{stage} {ms_text(ms)}" for stage, ms in (stage_ms or {}).items())


def version_text(version: Mapping[str, Any] | None) -> str:
    if not version:
        return ""
    parts = [f"{k}={version[k]}" for k in ("revision", "etag", "modified_time", "last_modified") if version.get(k)]
    return ", ".join(parts)


def run_link(run: Mapping[str, Any]) -> str | None:
    """The run's page in Airflow's UI (runs made outside Airflow, e.g. by the CLI, have none)."""
    if not run.get("dag_id") or (run.get("run_type") or "") == "inline":
        return None
    return f"/dags/{quote(run['dag_id'])}/runs/{quote(run['run_id'], safe='')}"


def outcome(run: Mapping[str, Any]) -> str:
    """The run's outcome (success / partial / failed) when the run log records one, else its status."""
    counts = run.get("counts") or {}
    return str(run.get("outcome") or counts.get("outcome") or run.get("status") or "")


def _value_text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) if value else "—"
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_value_text(v)}" for k, v in value.items()) or "—"
    return str(value)


def params_rows(params: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The run's parameters as (name, value) rows; defaults shown as "—" / "no"."""
    return [(name.replace("_", " "), _value_text(value)) for name, value in (params or {}).items()]


def counts_groups(counts: Mapping[str, Any] | None) -> list[tuple[str, list[tuple[str, str]]]]:
    """Counts as (group, [(name, value)]) tables; the source's own counters flattened last."""
    counts = dict(counts or {})
    named = {k for _, keys in _COUNT_GROUPS for k in keys}
    groups = []
    for title, keys in _COUNT_GROUPS:
        rows = [(k.replace("_", " "), _value_text(counts[k])) for k in keys if k in counts]
        if rows:
            groups.append((title, rows))
    other = [(k.replace("_", " "), _value_text(v)) for k, v in counts.items() if k not in named | _NOT_COUNTS]
    if other:
        groups.append(("Other", other))
    stats = counts.get("source_stats")
    if isinstance(stats, Mapping) and stats:
        rows = [(k.replace("_", " "), _value_text(v)) for k, v in stats.items() if k != "errors"]
        groups.append(("Source (connector's counters)", rows))
    return groups


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[:limit] + "…"


def _item_reason(item: Mapping[str, Any]) -> str:
    """A failed item's reason code: ``parse:malformed`` out of "parse: parse:malformed ...", else
    the recorded reason's first word, else the error's leading word."""
    reason = str(item.get("reason") or "")
    stage, _, rest = reason.partition(": ")
    if rest.split():
        return rest.split()[0].rstrip(",;")
    if stage.split():
        return stage.split()[0].rstrip(":,;")
    match = re.match(r"[\w.]+", item.get("error") or "")
    return match.group(0) if match else "error"


def _source_stats(counts: Mapping[str, Any]) -> Mapping[str, Any]:
    stats = counts.get("source_stats")
    return stats if isinstance(stats, Mapping) else {}


def _derived_reasons(counts: Mapping[str, Any]) -> tuple[Counter[str], dict[str, str]]:
    """Reasons read off the connector's counters, for runs logged before outcomes were judged."""
    stats = _source_stats(counts)
    found: Counter[str] = Counter()
    details: dict[str, str] = {}
    for name, n in (stats.get("errors") or {}).items():
        found[str(name)] += int(n)
    robots = stats.get("robots")
    for origin, status in robots.items() if isinstance(robots, Mapping) else ():
        if str(status).lower() not in _OK_ROBOTS:
            found[f"robots_{status}"] += 1
            details.setdefault(f"robots_{status}", f"robots.txt of {origin}: {status}")
    if counts.get("listing_complete") is False:
        found["listing_incomplete"] += 1
        details.setdefault("listing_incomplete", "the listing did not finish: nothing was deleted")
    return found, details


def error_reasons(run: Mapping[str, Any], items: Iterable[Mapping[str, Any]] = ()) -> list[Reason]:
    """Everything that went wrong in a run, counted. The run log's own reasons when it records
    them (``counts.reasons``, judged at commit); for older runs, the connector's error counters,
    robots.txt it could not read, an incomplete listing and the failed items by reason. Each
    reason with an example (a failed item and its error). Empty: nothing went wrong."""
    counts = run.get("counts") or {}
    recorded = counts.get("reasons") if isinstance(counts.get("reasons"), Mapping) else None
    if recorded:
        found: Counter[str] = Counter({str(k): int(v) for k, v in recorded.items() if isinstance(v, int)})
        details: dict[str, str] = {}
    else:
        found, details = _derived_reasons(counts)
    for item in items:
        if item.get("action") == "failed":
            reason = _item_reason(item)
            if not recorded:
                found[reason] += 1
            example = f"{item.get('item_key')}: {_first_line(item.get('error') or item.get('reason') or '')}"
            # the recorded name may carry the stage ("fetch:http_404") the item's code lacks
            same = [n for n in found if reason in (n, n.rpartition(":")[2]) or n == reason.rpartition(":")[2]]
            if same:
                details.setdefault(same[0], example)
    # the run's error (a stage that failed); not the outcome's note said again
    if run.get("error") and run.get("error") != counts.get("outcome_note"):
        found["run_error"] = 1
        details["run_error"] = _first_line(str(run["error"]))
    return [Reason(name, n, details.get(name, "")) for name, n in found.most_common()]


def window_text(run: Mapping[str, Any]) -> str:
    start, end = run.get("window_start"), run.get("window_end")
    if not start and not end:
        return "no window: every item the listing found was considered"
    return f"items modified from {when(start) or 'the beginning'} to before {when(end) or 'now'}"


def deferred_text(run: Mapping[str, Any]) -> str | None:
    """Items left for a later run because of ``max_items``, in words (None: none were)."""
    counts = run.get("counts") or {}
    params = run.get("params") or {}
    stats = _source_stats(counts)
    limit = params.get("max_items")
    deferred = counts.get("deferred")
    if isinstance(deferred, int) and deferred:
        cap = f" (max_items {limit})" if limit else ""
        return f"{deferred} item{'s' if deferred != 1 else ''} deferred to a later run{cap}"
    if stats.get("truncated"):
        cap = f"max_items {limit}" if limit else "the source's item limit"
        return f"the listing stopped at {cap}: more items remain for later runs (their number was not counted)"
    return None


def _strip_title(text: str, title: str | None, heading_path: Iterable[str]) -> str:
    """The chunk's text without the title / headings the chunker put at its start (the page
    shows them beside it: "Frequently asked questions Frequently asked questions")."""
    body = text.lstrip()
    for head in [title or "", *heading_path]:
        if head and body.startswith(head):
            body = body[len(head) :].lstrip(" \n:—-")
    return body


def snippet(hit: Mapping[str, Any], limit: int = 320) -> str:
    body = _strip_title(hit.get("text") or "", hit.get("title"), hit.get("heading_path") or ())
    return body if len(body) <= limit else body[:limit].rsplit(" ", 1)[0] + " …"


def highlight(text: str, terms: Iterable[str]) -> Markup:
    """``text`` escaped, then each search term marked (case-insensitive), as safe HTML."""
    escaped = str(escape(text))
    words = sorted({str(escape(t)) for t in terms if t.strip()}, key=len, reverse=True)
    if not words:
        return Markup(escaped)
    pattern = re.compile("|".join(re.escape(w) for w in words), re.IGNORECASE)
    # an escaped entity (&amp;) must not be cut by a mark: match only outside entities
    pieces = re.split(r"(&[#\w]+;)", escaped)
    marked = "".join(p if p.startswith("&") and p.endswith(";") else pattern.sub(_mark, p) for p in pieces)
    return Markup(marked)


def _mark(match: re.Match[str]) -> str:
    return f"<mark>{match.group(0)}</mark>"


def hit_label(hit: Mapping[str, Any]) -> str:
    """Unique enough to tell hits of one page apart: the title and the chunk's heading path."""
    title = hit.get("title") or hit.get("url") or hit.get("doc_id") or ""
    path = [h for h in (hit.get("heading_path") or []) if h and h != title]
    label = " › ".join([str(title), *path])
    seq = hit.get("sequence")
    # chunks under one heading share its path: their place in the document tells them apart
    return f"{label} · part {seq + 1}" if isinstance(seq, int) else label
