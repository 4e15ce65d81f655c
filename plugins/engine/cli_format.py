"""Human text of the command line (``plugins.engine.cli``): a sync's summary, the runs table,
search scores and who a search ran as, a permission sync's summary. ``--json`` prints the
records themselves; these are for people."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from include.acl import ANONYMOUS, Principal
from plugins.engine.event_runs import trigger_text
from plugins.engine.lineage import warnings_text
from plugins.engine.principals import describe_principal

__all__ = [
    "RUN_COLUMNS",
    "access_text",
    "permissions_summary_text",
    "processed_text",
    "run_report_text",
    "runs_table_text",
    "score_text",
    "searcher_json",
    "searcher_text",
    "sync_summary_text",
]

# one column order for every row of ``runs`` (a dry run shows what it would do in the same columns)
RUN_COLUMNS = ("new", "changed", "unchanged", "deleted", "failed", "skipped")
_WOULD = {"new": "would_add", "changed": "would_update", "deleted": "would_delete"}


def _action_counts(counts: Mapping[str, Any]) -> dict[str, int]:
    if counts.get("dry_run"):
        return {c: int(counts.get(_WOULD.get(c, c)) or 0) for c in RUN_COLUMNS}
    return {c: int(counts.get(c) or 0) for c in RUN_COLUMNS}


def _count_lines(counts: Mapping[str, Any]) -> list[str]:
    """The lines a sync's summary and a run's report share: actions, chunks, reasons, why."""
    actions = _action_counts(counts)
    lines = ["  " + "  ".join(f"{k} {v}" for k, v in actions.items())]
    if counts.get("unchanged_forced"):
        lines[-1] += f"  (unchanged (forced) {counts['unchanged_forced']})"
    if counts.get("reembedded"):  # of "unchanged": new vectors from the indexed chunk texts
        lines[-1] += f"  (re-embedded {counts['reembedded']}: {counts.get('chunks_embedded', 0)} chunks embedded)"
    elif counts.get("would_reembed"):
        lines[-1] += f"  (would re-embed {counts['would_reembed']})"
    if not counts.get("dry_run"):
        lines.append(
            f"  chunks written {counts.get('chunks_written', 0)}, bytes fetched {counts.get('bytes_fetched', 0)}"
        )
    if counts.get("deferred"):
        lines.append(f"  deferred {counts['deferred']} items past max_items: the next run takes them")
    reasons = counts.get("reasons") or {}
    if reasons:
        lines.append("  reasons: " + ", ".join(f"{k} {v}" for k, v in reasons.items()))
    reprocessed = counts.get("reprocessed") or {}
    if reprocessed:  # items the source did not change, processed again (a new parser version ...)
        lines.append(
            f"  re-processed {sum(reprocessed.values())}: " + ", ".join(f"{k} ({v})" for k, v in reprocessed.items())
        )
    if counts.get("outcome_note"):
        lines.append(f"  why: {counts['outcome_note']}")
    return lines


def _dry_note(counts: Mapping[str, Any]) -> str:
    return " (dry run: nothing written; counts say what a real run would do)" if counts.get("dry_run") else ""


def sync_summary_text(run_id: str, source: str, counts: Mapping[str, Any], seconds: float) -> str:
    """A few lines: outcome, counts, reasons, duration, what to look at next."""
    outcome = str(counts.get("outcome") or "success")
    lines = [f"{source}: {outcome}{_dry_note(counts)} in {seconds:.1f} s — run {run_id}", *_count_lines(counts)]
    failed = _action_counts(counts)["failed"]
    lines.append(f"  next: run {run_id} --source {source}" + (" --action failed" if failed else ""))
    return "\n".join(lines)


# counts of a run's report beyond the summary's, in this order, as "name value" (0s left out)
_DETAIL_COUNTS = (
    "fetched",
    "parsed",
    "chunked",
    "batches",
    "chunks_unchanged",
    "chunks_deleted",
    "chunks_embedded",
    "chunks_vector_reused",
    "chunks_truncated",
    "missing_not_deleted",
    "staging_bytes",
)


def run_report_text(report: Mapping[str, Any]) -> str:
    """``run RUN_ID``: what the run was, its outcome and counts in words, then its items."""
    run, counts = report["run"], report["run"].get("counts") or {}
    start = _time(run.get("started_at"))
    when = start.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if start else "not started"
    lines = [
        f"run {run['run_id']} of {run['source']}: {run['status']}{_dry_note(counts)}",
        f"  {run['run_type'] or '?'} run, started {when}, took {_duration(run)}, "
        f"index {run['index_backend']}/{run['index_name']}",
    ]
    if started_by := trigger_text(run.get("params")):
        lines.append(f"  {started_by}")
    if run.get("window_start") or run.get("window_end"):
        lines.append(f"  window {run.get('window_start') or '…'} → {run.get('window_end') or '…'} (a backfill)")
    lines += _count_lines(counts)
    details = [f"{k.replace('_', ' ')} {counts[k]}" for k in _DETAIL_COUNTS if counts.get(k)]
    if counts.get("listing_complete") is False:
        # absence proves nothing then; items the source itself reported gone are still deleted
        details.append(
            "listing incomplete: deletions only of items the source reported gone"
            if counts.get("deleted")
            else "listing incomplete: nothing deleted"
        )
    if details:
        lines.append("  " + ", ".join(details))
    if run.get("error"):
        lines.append(f"  error: {run['error']}")
    for item in report["items"]:
        version = (item["version_after"] or item["version_before"] or {}).get("modified_time") or ""
        extra = f"  ERROR {item['error']}" if item["error"] else ""
        extra += f"  WARN {warnings_text(item['warnings'])}" if item["warnings"] else ""
        cells = [item["item_key"], version, item["reason"] or "", extra.strip()]
        lines.append(f"  {item['action']:9} " + "  ".join(c for c in cells if c))
    return "\n".join(lines)


def _time(value: Any) -> dt.datetime | None:
    """A run row's time (a datetime, or its ISO text as the lineage rows carry it)."""
    if isinstance(value, str) and value:
        value = dt.datetime.fromisoformat(value)
    if not isinstance(value, dt.datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _duration(run: Mapping[str, Any]) -> str:
    start, end = _time(run.get("started_at")), _time(run.get("ended_at"))
    if start is None or end is None:
        return "-"
    return f"{(end - start).total_seconds():.1f}s"


def runs_table_text(runs: Sequence[Mapping[str, Any]]) -> str:
    """``runs``: start time, duration, status and the action counts in one fixed column order."""
    head = f"{'started (UTC)':19} {'duration':>8} {'status':8} " + " ".join(f"{c:>9}" for c in RUN_COLUMNS)
    lines = [head + "  source / run"]
    for r in runs:
        start = _time(r.get("started_at"))
        when = start.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S") if start else "-"
        counts = r.get("counts") or {}
        status = str(r.get("status") or "") + ("*" if counts.get("dry_run") else "")
        cells = " ".join(f"{v:>9}" for v in _action_counts(counts).values())
        by = " (events)" if trigger_text(r.get("params")) else ""
        lines.append(f"{when:19} {_duration(r):>8} {status:8} {cells}  {r.get('source')} {r.get('run_id')}{by}")
    if any((r.get("counts") or {}).get("dry_run") for r in runs):
        lines.append("* dry run: the counts are what it would have done")
    return "\n".join(lines)


def score_text(hit: Mapping[str, Any]) -> str:
    """A hit's score with the precision it needs (an RRF score is ~1/60: ``.3f`` printed 0.000),
    and both ranks of a hybrid hit when the search reports them."""
    score = float(hit.get("score") or 0.0)
    text = f"{score:.4g}"
    ranks = [f"{k.removesuffix('_rank')} #{hit[k]}" for k in ("bm25_rank", "vector_rank") if hit.get(k) is not None]
    return text + (f" ({', '.join(ranks)})" if ranks else "")


def searcher_text(principal: Principal | None) -> str:
    """The first line of a search's output: as whom it ran, and so what it could see."""
    if principal is None:
        return "unrestricted search (--all): every document, whatever its permissions"
    if principal is ANONYMOUS:  # no --as (an --as NAME with no identity says its name below)
        return "as anonymous: public documents only (--as NAME searches as someone)"
    return f"as {describe_principal(principal)}"


def searcher_json(principal: Principal | None) -> dict[str, Any]:
    """``access`` (``unrestricted`` | ``anonymous`` | ``principal``) and who, for ``--json``."""
    if principal is None:
        return {"access": "unrestricted", "as": None}
    return {
        "access": "anonymous" if principal.anonymous else "principal",
        "as": {
            "name": principal.name,
            "mapped_by": principal.mapped_by,
            "users": sorted(principal.users),
            "groups": sorted(principal.groups),
            "tenants": sorted(principal.tenants),
            "notes": list(principal.notes),
        },
    }


def permissions_summary_text(source: str, groups: Mapping[str, Any], perms: Mapping[str, Any], seconds: float) -> str:
    """``permissions SOURCE``: documents checked and changed, why some are unknown, requests,
    groups synced (the ``to_dict()`` of ``GroupSyncResult`` and ``PermissionSyncResult``)."""
    lines = [
        f"{source}: permissions {perms.get('outcome', 'success')}, checked {perms.get('checked', 0)} "
        f"in {seconds:.1f} s — run {perms.get('run_id', '?')}",
        f"  changed {perms.get('changed', 0)}  unchanged {perms.get('unchanged', 0)}  "
        f"unknown {perms.get('unknown', 0)} (private)  requests {perms.get('requests', 0)}",
    ]
    errors = perms.get("errors") or {}
    if errors:
        lines.append("  unknown because: " + ", ".join(f"{k} {v}" for k, v in sorted(errors.items())))
    lines.append("  " + _groups_line(groups))
    return "\n".join(lines)


def _groups_line(groups: Mapping[str, Any]) -> str:
    if not groups.get("synced"):
        return "groups: none of its own (its acl block's static groups come from the principals file)"
    line = (
        f"groups synced {groups.get('groups', 0)} ({groups.get('memberships', 0)} memberships), "
        f"requests {groups.get('requests', 0)}"
    )
    if groups.get("complete") is False:
        line += f"; listing incomplete: {groups.get('kept_groups', 0)} groups keep their stored members"
    errors = groups.get("errors") or {}
    if errors:
        line += "; errors: " + ", ".join(f"{k} {v}" for k, v in sorted(errors.items()))
    return line


def processed_text(record: Mapping[str, Any] | None) -> str:
    """``item``'s line on what the indexed version went through (parser, chunker, model)."""
    if not record:
        return "processed with: not recorded (indexed before it was kept; recorded at its next re-process)"
    parser, chunker = record.get("parser") or {}, record.get("chunker") or {}
    engine = f" ({parser['engine']})" if parser.get("engine") else ""
    parts = [f"parser {parser.get('name')} {parser.get('version')}{engine}"]
    parts.append(f"chunker {chunker.get('name')} {chunker.get('version')}")
    if record.get("embedding"):
        parts.append(f"model {record['embedding'].get('model')}")
    return "processed with: " + ", ".join(parts)


def access_text(access: Mapping[str, Any] | None, shown: int = 5) -> str:
    """``item``'s line on who can see the document (the item page's "Who can see it")."""
    if access is None:
        return "who can see: not recorded (indexed before permissions were kept: run `permissions`)"
    if access.get("unknown_reason"):
        return f"who can see: nobody but an unrestricted search ({access['unknown_reason']})"
    entries = list(access.get("entries") or [])
    listed = ", ".join(entries[:shown]) + (
        f", +{access['entry_count'] - shown} more" if access["entry_count"] > shown else ""
    )
    noun = "entry" if access["entry_count"] == 1 else "entries"
    return f"who can see: {access['visibility']}, {access['entry_count']} {noun} ({listed})"
