"""Failure alerting: one Slack-compatible summary per failed sync run, posted to a webhook.

The webhook comes from an Airflow Connection (``tributary_alerts`` unless
``TRIBUTARY_ALERTS_CONN_ID`` names another), in any of these shapes:

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
from collections.abc import Mapping
from typing import Any

__all__ = ["build_failure_summary", "post_failure_summary", "resolve_webhook_url", "slack_payload"]

log = logging.getLogger("tributary.alerts")

DEFAULT_CONN_ID = "tributary_alerts"
_MAX_ERRORS = 5


def _conn_id() -> str:
    return os.environ.get("TRIBUTARY_ALERTS_CONN_ID", DEFAULT_CONN_ID)


def resolve_webhook_url(conn_id: str | None = None) -> str | None:
    """The webhook URL from the Airflow Connection, or None when there is no such connection."""
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id or _conn_id())
    except Exception as exc:  # AirflowNotFoundException and friends: alerting is optional
        log.debug("no alert connection %s: %s", conn_id or _conn_id(), type(exc).__name__)
        return None
    extra = conn.extra_dejson or {}
    if extra.get("webhook_url"):
        return str(extra["webhook_url"])
    host = (conn.host or "").strip()
    if not host:
        return None
    if "://" not in host:
        scheme = conn.schema or "https"
        host = f"{scheme}://{host}" + (f":{conn.port}" if conn.port else "")
    if conn.password:
        host = host.rstrip("/") + "/" + conn.password.lstrip("/")
    return host


def _airflow_base_url() -> str:
    try:
        from airflow.configuration import conf

        base = conf.get("api", "base_url", fallback="") or ""
    except Exception:
        base = ""
    return (base or "http://localhost:8080").rstrip("/")


def build_failure_summary(
    *,
    source: str,
    dag_id: str,
    run_id: str,
    failed_stage: str | None,
    run: Mapping[str, Any] | None,
    items: list[Mapping[str, Any]],
    reason: str | None = None,
) -> dict[str, Any]:
    """Everything the alert says, as data (the Slack payload is rendered from this)."""
    from urllib.parse import quote

    counts = dict((run or {}).get("counts") or {})
    tally = Counter(i["action"] for i in items)
    if not counts and tally:
        counts = dict(tally)
    errors: list[str] = []
    if run and run.get("error"):
        errors.extend(e for e in str(run["error"]).split("\n") if e.strip())
    errors.extend(f"{i['item_key']}: {i['error']}" for i in items if i.get("error"))
    base = _airflow_base_url()
    return {
        "source": source,
        "dag_id": dag_id,
        "run_id": run_id,
        "failed_stage": failed_stage or "unknown",
        "reason": reason,
        "counts": counts,
        "errors": errors[:_MAX_ERRORS],
        "error_count": len(errors),
        "run_url": f"{base}/dags/{quote(dag_id)}/runs/{quote(run_id, safe='')}",
        "audit_url": f"{base}/tributary/runs/{quote(run_id, safe='')}",
    }


def slack_payload(summary: Mapping[str, Any]) -> dict[str, Any]:
    """Slack incoming-webhook JSON: ``text`` (fallback / other chat tools) plus Block Kit blocks."""
    counts = " ".join(f"{k}={v}" for k, v in summary["counts"].items()) or "none recorded"
    title = f":red_circle: Tributary sync of {summary['source']} failed at {summary['failed_stage']}"
    errors = "\n".join(f"• {e[:300]}" for e in summary["errors"]) or "(no error text recorded)"
    more = summary["error_count"] - len(summary["errors"])
    if more > 0:
        errors += f"\n… and {more} more"
    text = (
        f"{title}\nrun {summary['run_id']} ({summary['dag_id']})\ncounts: {counts}\n"
        f"errors:\n{errors}\n<{summary['run_url']}|Airflow run> · <{summary['audit_url']}|item lineage>"
    )
    return {
        "text": text,
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
            {
                "type": "section",
                "fields": [
                    {"type": "mrkdwn", "text": f"*Source*\n{summary['source']}"},
                    {"type": "mrkdwn", "text": f"*Failed stage*\n{summary['failed_stage']}"},
                    {"type": "mrkdwn", "text": f"*Run*\n<{summary['run_url']}|{summary['run_id']}>"},
                    {"type": "mrkdwn", "text": f"*Counts*\n{counts}"},
                ],
            },
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*First errors*\n{errors}"[:3000]}},
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"<{summary['audit_url']}|Item lineage for this run>"}],
            },
        ],
    }


def post_failure_summary(summary: Mapping[str, Any], conn_id: str | None = None) -> bool:
    """Post the summary; True when a webhook accepted it, False when none is configured or it failed."""
    url = resolve_webhook_url(conn_id)
    if not url:
        return False
    import httpx

    try:
        response = httpx.post(url, json=slack_payload(summary), timeout=10.0)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        # never log the URL: for Slack it is the credential
        log.warning("failure alert for %s not delivered: %s", summary.get("run_id"), type(exc).__name__)
        return False
    log.info("failure alert for %s posted", summary.get("run_id"))
    return True
