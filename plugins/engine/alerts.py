"""Alerting: one Slack-compatible summary per failed sync run, posted to a webhook, and the
same message for a run that succeeded but should not pass silently.

A run "succeeds" when one bad document never fails a batch, so a run in which most documents
failed is still a success in Airflow. The summary task (``finish_stage``) therefore alerts when a
run ends with failed items above the source's threshold (``alert_failed_items``: a count, default
10; ``alert_failed_share``: a share of the items the run attempted, default 0.25, counted once
at least 2 failed; ``null`` turns either off), and when items became quarantined in this run
(their failure streak reached ``quarantine_after``: later runs skip them until they change).

The webhook comes from a Connection, read through ``include.connections`` (Airflow's secrets
backends: ``tributary_alerts`` unless ``TRIBUTARY_ALERTS_CONN_ID`` names another), in any of
these shapes:

- ``extra: {"webhook_url": "https://hooks.slack.com/services/T/B/X"}``
- an HTTP connection with ``host`` = the full URL, or ``schema``/``host``/``port`` + a path in
  ``password`` (the shape Slack's own provider uses: host ``https://hooks.slack.com/services``,
  password ``T000/B000/XXXX``).

No connection: nothing is posted and nothing fails. The webhook URL is a secret and is never
logged. Posting errors are logged and swallowed: an alert must not turn one failure into two.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx

from include.connections import get_connection

__all__ = [
    "acl_unknown_breach",
    "alert_finished_run",
    "build_failure_summary",
    "build_partial_summary",
    "failed_item_breaches",
    "newly_quarantined",
    "post_failure_summary",
    "resolve_webhook_url",
    "slack_payload",
]

log = logging.getLogger("tributary.alerts")

DEFAULT_CONN_ID = "tributary_alerts"
_MAX_ERRORS = 5
# Defaults of the per-source options (include.config.EngineOptions declares the same). Ten failed
# documents in one run is more than the routine noise of a healthy source (a transient 5xx, one
# corrupt upload) and few enough to look at; a quarter of what a run attempted means something
# systematic (an expired permission, a parser regression, a site redesign) even on a small run.
# One failure alone is one bad document: the quarantine alert covers it if it persists.
DEFAULT_FAILED_ITEMS = 10
DEFAULT_FAILED_SHARE = 0.25
DEFAULT_ACL_UNKNOWN = 1  # documents made private because their permissions could not be read
_MIN_FAILED_FOR_SHARE = 2
DEFAULT_QUARANTINE_AFTER = 5  # as plugins.engine.discover reads it


def _conn_id() -> str:
    return os.environ.get("TRIBUTARY_ALERTS_CONN_ID", DEFAULT_CONN_ID)


def resolve_webhook_url(conn_id: str | None = None) -> str | None:
    """The webhook URL from the Connection (``include.connections``), or None when there is none."""
    try:
        conn = get_connection(conn_id or _conn_id())
    except Exception as exc:  # AirflowNotFoundException and friends: alerting is optional
        log.debug("no alert connection %s: %s", conn_id or _conn_id(), type(exc).__name__)
        return None
    if conn.extra.get("webhook_url"):
        return str(conn.extra["webhook_url"])
    host = (conn.host or "").strip()
    if not host:
        return None
    if "://" not in host:
        scheme = conn.schema or "https"
        host = f"{scheme}://{host}" + (f":{conn.port}" if conn.port else "")
    if conn.password:
        host = host.rstrip("/") + "/" + conn.password.lstrip("/")
    return host


def _default_base_url() -> str:
    """Airflow's UI address when the caller passes none. The engine reads no Airflow
    configuration: the Airflow layer passes ``[api] base_url`` (``plugins.tributary_airflow.
    callbacks.airflow_base_url``); without it, the same setting's environment form is used."""
    return (os.environ.get("AIRFLOW__API__BASE_URL") or "http://localhost:8080").rstrip("/")


def build_failure_summary(
    *,
    source: str,
    dag_id: str,
    run_id: str,
    failed_stage: str | None,
    run: Mapping[str, Any] | None,
    items: Sequence[Mapping[str, Any]],
    reason: str | None = None,
    base_url: str | None = None,
) -> dict[str, Any]:
    """Everything the alert says, as data (the Slack payload is rendered from this).

    ``base_url`` is Airflow's UI address for the links (default: :func:`_default_base_url`).
    """
    counts = dict((run or {}).get("counts") or {})
    tally = Counter(i["action"] for i in items)
    if not counts and tally:
        counts = dict(tally)
    errors: list[str] = []
    if run and run.get("error"):
        errors.extend(e for e in str(run["error"]).split("\n") if e.strip())
    errors.extend(f"{i['item_key']}: {i['error']}" for i in items if i.get("error"))
    base = (base_url or _default_base_url()).rstrip("/")
    return {
        "source": source,
        "dag_id": dag_id,
        "run_id": run_id,
        "failed_stage": failed_stage or "unknown",
        "reason": reason,
        "counts": counts,
        # the run's judged reasons (connect, robots_unreachable, http_404, parse:<code>) and why
        "reasons": dict(counts.get("reasons") or {}),
        "why": counts.get("outcome_note") or None,
        "errors": errors[:_MAX_ERRORS],
        "error_count": len(errors),
        "run_url": f"{base}/dags/{quote(dag_id)}/runs/{quote(run_id, safe='')}",
        "audit_url": f"{base}/tributary/runs/{quote(run_id, safe='')}",
    }


def _title(summary: Mapping[str, Any]) -> str:
    if summary.get("outcome", "failed") == "failed":
        return f":red_circle: Tributary sync of {summary['source']} failed at {summary['failed_stage']}"
    return f":large_orange_circle: Tributary sync of {summary['source']} succeeded with {summary['outcome']}"


def slack_payload(summary: Mapping[str, Any]) -> dict[str, Any]:
    """Slack incoming-webhook JSON: ``text`` (fallback / other chat tools) plus Block Kit blocks.

    A failed run and a run that succeeded with too many failed or newly quarantined items share
    the layout; only the title, the second field and the quarantine section differ.
    """
    counts = _counts_text(summary["counts"])
    reasons = ", ".join(f"{k} {v}" for k, v in (summary.get("reasons") or {}).items())
    if summary.get("why"):
        reasons = f"{reasons} ({summary['why']})" if reasons else str(summary["why"])
    title = _title(summary)
    errors = "\n".join(f"• {e[:300]}" for e in summary["errors"]) or "(no error text recorded)"
    more = summary["error_count"] - len(summary["errors"])
    if more > 0:
        errors += f"\n… and {more} more"
    failed = summary.get("outcome", "failed") == "failed"
    second = ("*Failed stage*", summary["failed_stage"]) if failed else ("*Outcome*", summary["outcome"])
    quarantined = _quarantine_text(summary.get("quarantined") or [], summary.get("quarantine_count", 0))
    text = (
        f"{title}\nrun {summary['run_id']} ({summary['dag_id']})\ncounts: {counts}\n"
        f"{'reasons: ' + reasons + chr(10) if reasons else ''}"
        f"errors:\n{errors}\n{quarantined + chr(10) if quarantined else ''}"
        f"<{summary['run_url']}|Airflow run> · <{summary['audit_url']}|item lineage>"
    )
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
        {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": f"*Source*\n{summary['source']}"},
                {"type": "mrkdwn", "text": f"{second[0]}\n{second[1]}"},
                {"type": "mrkdwn", "text": f"*Run*\n<{summary['run_url']}|{summary['run_id']}>"},
                {"type": "mrkdwn", "text": f"*Counts*\n{counts}"},
            ],
        },
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*First errors*\n{errors}"[:3000]}},
    ]
    if reasons:
        blocks.insert(2, {"type": "section", "text": {"type": "mrkdwn", "text": f"*Reasons*\n{reasons}"[:3000]}})
    if quarantined:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": quarantined[:3000]}})
    blocks.append(
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": f"<{summary['audit_url']}|Item lineage for this run>"}],
        }
    )
    return {"text": text, "blocks": blocks}


# what the message counts, in this order (the run record's other counts stay on the run page)
_COUNT_FIELDS = ("new", "changed", "unchanged", "deleted", "failed", "skipped", "deferred", "chunks_written")


def _counts_text(counts: Mapping[str, Any]) -> str:
    shown = [f"{k}={counts[k]}" for k in _COUNT_FIELDS if counts.get(k)]
    return " ".join(shown) or ("nothing done" if counts else "none recorded")


def _quarantine_text(keys: list[str], total: int) -> str:
    if not total:
        return ""
    lines = "\n".join(f"• {k[:300]}" for k in keys)
    more = f"\n… and {total - len(keys)} more" if total > len(keys) else ""
    return f"*Newly quarantined* ({total}, skipped by later runs until they change)\n{lines}{more}"


def post_failure_summary(summary: Mapping[str, Any], conn_id: str | None = None) -> bool:
    """Post the summary; True when a webhook accepted it, False when none is configured or it failed."""
    url = resolve_webhook_url(conn_id)
    if not url:
        return False
    try:
        response = httpx.post(url, json=slack_payload(summary), timeout=10.0)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        # never log the URL: for Slack it is the credential
        log.warning("failure alert for %s not delivered: %s", summary.get("run_id"), type(exc).__name__)
        return False
    log.info("failure alert for %s posted", summary.get("run_id"))
    return True


# ------------------------------------------------------------------------ runs that succeeded


def _option(options: Mapping[str, Any], key: str, default: float | None) -> float | None:
    value = options.get(key, default)
    return None if value is None else float(value)


def failed_item_breaches(counts: Mapping[str, Any], options: Mapping[str, Any]) -> list[str]:
    """Which failed-item thresholds a finished run's counts reach (``[]``: none, stay silent)."""
    failed = int(counts.get("failed") or 0)
    if failed == 0 or counts.get("dry_run"):
        return []
    # "fetched" counts the items that got through (indexed, or parsed to unchanged text)
    attempted = int(counts.get("fetched") or 0) + failed
    share = failed / attempted if attempted else 1.0
    breaches = []
    limit = _option(options, "alert_failed_items", DEFAULT_FAILED_ITEMS)
    if limit is not None and failed >= limit:
        breaches.append(f"{failed} failed items (alert_failed_items={limit:g})")
    ratio = _option(options, "alert_failed_share", DEFAULT_FAILED_SHARE)
    if ratio is not None and failed >= _MIN_FAILED_FOR_SHARE and share >= ratio:
        breaches.append(f"{failed} of {attempted} attempted items failed ({share:.0%}, alert_failed_share={ratio:g})")
    return breaches


def acl_unknown_breach(counts: Mapping[str, Any], options: Mapping[str, Any]) -> list[str]:
    """A run that made documents private because their permissions could not be read
    (``acl_unknown``) says so: a missing scope or a revoked app right hides documents from every
    searcher until it is fixed. ``alert_acl_unknown`` (default 1; null: off) is the threshold."""
    unknown = int(counts.get("acl_unknown") or 0)
    limit = _option(options, "alert_acl_unknown", DEFAULT_ACL_UNKNOWN)
    if counts.get("dry_run") or not unknown or limit is None or unknown < limit:
        return []
    return [f"{unknown} documents private: permissions unreadable (acl_unknown, alert_acl_unknown={limit:g})"]


def newly_quarantined(store: Any, source: str, run_id: str, quarantine_after: int) -> list[Any]:
    """Items whose failure streak reached ``quarantine_after`` in this run.

    The streak grows once per failing run (``commit_stage``), so the run that takes it from
    ``quarantine_after - 1`` to ``quarantine_after`` is the one that quarantined the item;
    a quarantined item retried by ``only_keys`` and failing again is not new. Items with nothing
    to index (``parse:empty``: an empty file, a JavaScript-only page) are recorded as skipped,
    not failed, and their quarantine is no news either.
    """
    return sorted(
        (
            st
            for st in store.items(source).values()
            if st.last_failure_run == run_id
            and st.failure_count == quarantine_after
            and st.last_error_reason != "parse:empty"
        ),
        key=lambda st: st.item_key,
    )


def build_partial_summary(
    *,
    source: str,
    dag_id: str,
    run_id: str,
    run: Mapping[str, Any] | None,
    items: Sequence[Mapping[str, Any]],
    breaches: list[str],
    quarantined: list[Any],
    base_url: str | None = None,
) -> dict[str, Any]:
    """The summary of a run that succeeded with failed-item breaches and/or newly quarantined items."""
    failed = [i for i in items if i["action"] == "failed"]
    summary = build_failure_summary(
        source=source, dag_id=dag_id, run_id=run_id, failed_stage=None, run=run, items=failed, base_url=base_url
    )
    parts = list(breaches)
    if quarantined:
        parts.append(f"{len(quarantined)} newly quarantined item{'s' if len(quarantined) != 1 else ''}")
    summary.update(
        outcome="; ".join(parts),
        quarantined=[f"{st.item_key}: {st.last_error_reason or 'error'}" for st in quarantined[:_MAX_ERRORS]],
        quarantine_count=len(quarantined),
    )
    return summary


def alert_finished_run(ctx: Any, store: Any, counts: Mapping[str, Any], *, base_url: str | None = None) -> bool:
    """Called by the summary task once the run is closed as "success": post the alert its
    failures call for, if any. True when an alert was delivered. ``base_url``: Airflow's UI
    address for the alert's links (see :func:`build_failure_summary`).

    Posted after the run is closed, so a re-run summary task (which finds the run closed and
    returns early) never posts it twice; a task killed between the two loses it, which is the
    lesser evil for a notification. Never raises: a broken alert must not fail a finished run.
    """
    try:
        return _alert_finished_run(ctx, store, counts, base_url)
    except Exception as exc:
        log.warning("alert check for run %s failed: %s", ctx.run_id, type(exc).__name__)
        return False


def _alert_finished_run(ctx: Any, store: Any, counts: Mapping[str, Any], base_url: str | None) -> bool:
    source = ctx.source
    options = source.options or {}
    breaches = failed_item_breaches(counts, options) + acl_unknown_breach(counts, options)
    quarantined: list[Any] = []
    if int(counts.get("failed") or 0):  # no failure in this run: nothing it can have quarantined
        after = int(options.get("quarantine_after", DEFAULT_QUARANTINE_AFTER))
        quarantined = newly_quarantined(store, source.source_id, ctx.run_id, after)
    if not breaches and not quarantined:
        return False
    summary = build_partial_summary(
        source=source.source_id,
        dag_id=ctx.dag_id or source.dag_id,
        run_id=ctx.run_id,
        run=store.get_run(ctx.run_id, source.source_id),
        items=store.run_items(ctx.run_id, action="failed", source=source.source_id),
        breaches=breaches,
        quarantined=quarantined,
        base_url=base_url,
    )
    log.warning("run %s of %s succeeded with %s", ctx.run_id, source.source_id, summary["outcome"])
    return post_failure_summary(summary)
