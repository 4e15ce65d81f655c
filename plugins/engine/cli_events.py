"""``events-url SOURCE``: the callback URL to paste into Feishu's console or a Yuque knowledge base.

The base URL is ``--base-url``, else the API server's ``[api] base_url`` (Airflow reads
``AIRFLOW__API__BASE_URL`` before ``airflow.cfg``, and so does this; the engine does not import
Airflow, so the file is read as the INI file it is), else ``http://127.0.0.1:8080``. A Yuque URL
carries the source's secret (the Connection's ``webhook_secret``): it is printed because it is
the thing to paste, and only to this terminal.
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

from include.config import SourceConfig
from include.connections import get_connection
from plugins.connectors.base import CallbackSetup, callback_setup
from plugins.engine import get_source

__all__ = ["add_events_parser", "api_base_url", "events_url"]

DEFAULT_BASE_URL = "http://127.0.0.1:8080"
PREFIX = "/tributary/events"


def api_base_url(environ: dict[str, str] | None = None) -> str:
    """Airflow's ``[api] base_url`` as Airflow resolves it (environment, then ``airflow.cfg``)."""
    env = os.environ if environ is None else environ
    if env.get("AIRFLOW__API__BASE_URL"):
        return env["AIRFLOW__API__BASE_URL"].rstrip("/")
    home = Path(env.get("AIRFLOW_HOME") or Path.home() / "airflow")
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(home / "airflow.cfg", encoding="utf-8")
    except configparser.Error:  # a file Airflow itself would refuse: fall back, say nothing here
        return DEFAULT_BASE_URL
    value = parser.get("api", "base_url", fallback="").strip()
    return value.rstrip("/") if value else DEFAULT_BASE_URL


def events_url(source: SourceConfig, setup: CallbackSetup, base_url: str, extras: dict[str, Any]) -> dict[str, Any]:
    """What to paste and enable for ``source`` (``extras``: its Connection's, for the secrets)."""
    url = f"{base_url.rstrip('/')}{PREFIX}/{source.kind}/{quote(source.name, safe='')}"
    missing = [name for name in setup.secret_extras if not extras.get(name)]
    if source.kind == "feishu" and "encrypt_key" in missing:
        missing.remove("encrypt_key")  # optional at Feishu; without it callbacks are unsigned
    if setup.url_secret_extra and extras.get(setup.url_secret_extra):
        url += f"?secret={quote(str(extras[setup.url_secret_extra]), safe='')}"
    return {
        "source": source.source_id,
        "url": url,
        "events_mode": source.events.mode,
        "conn_id": source.conn_id or setup.default_conn_id,
        "event_types": list(setup.event_types),
        "missing_extras": missing,
    }


def _text(info: dict[str, Any]) -> str:
    lines = [info["url"], ""]
    if info["source"].startswith("feishu:"):
        lines += [
            "Feishu/Lark developer console > Events and callbacks: set this as the request URL",
            "(the receiver answers the URL check), and add these events:",
            *(f"  {t}" for t in info["event_types"]),
            f"Encrypt Key and Verification Token go into the extras of Connection {info['conn_id']!r}",
            "(encrypt_key, verification_token).",
        ]
    else:
        lines += [
            "Yuque: knowledge base settings > developer > webhooks: add this URL (it carries the",
            f"secret, extra webhook_secret of Connection {info['conn_id']!r}); events: publish, update, delete.",
        ]
    if info["events_mode"] != "callback":
        lines.append(f"NOTE: the source's events.mode is {info['events_mode']!r}; set it to 'callback'.")
    if info["missing_extras"]:
        lines.append(f"NOTE: the Connection lacks {', '.join(info['missing_extras'])}: callbacks will be refused.")
    return "\n".join(lines)


def _extras(conn_id: str) -> dict[str, Any]:
    """The Connection's extras ({} and a line on stderr when unreadable). Airflow, imported here
    on first use, logs to the stdout of that moment: it is pointed at stderr meanwhile, so that
    stdout carries only the answer (``--json`` is read by scripts)."""
    stdout, sys.stdout = sys.stdout, sys.stderr
    try:
        return dict(get_connection(conn_id).extra)
    except Exception as exc:  # no such Connection, or its backend failed: print the URL anyway
        print(f"Connection {conn_id!r} unreadable ({type(exc).__name__}): the URL lacks its secret", file=sys.stderr)
        return {}
    finally:
        sys.stdout = stdout


def cmd_events_url(args: argparse.Namespace) -> int:
    try:
        source = get_source(args.source)
    except (KeyError, ValueError) as exc:
        print(f"unknown or invalid source {args.source!r}: {exc}", file=sys.stderr)
        return 2
    setup = callback_setup(source.kind)
    if setup is None:
        print(f"source {source.source_id} ({source.kind}) takes no callbacks", file=sys.stderr)
        return 2
    extras = _extras(source.conn_id or setup.default_conn_id)
    info = events_url(source, setup, args.base_url or api_base_url(), extras)
    print(json.dumps(info, indent=2) if args.json else _text(info))
    return 0


def add_events_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("events-url", parents=[common], help="the callback URL to paste for a source's events")
    p.add_argument("source", help="source id, e.g. yuque:kb")
    p.add_argument("--base-url", help=f"the API server's public URL (default: [api] base_url, else {DEFAULT_BASE_URL})")
    p.set_defaults(fn=cmd_events_url)
