"""Part (c) of ``python -m benchmarks acl``: permission-sync requests for 5,000 Feishu documents.

The Feishu simulator (``tests/simulators/_feishu_perms.py``) on 127.0.0.1 serves 5,000 docx
documents in 10 folders with random collaborators and link shares. Measured, by the
simulator's own counters:

- **permission sync**: what ``sync_permissions`` hands the connector (the stored key and URL,
  batches of 500): collaborators + public settings per document, owners by batch meta query;
- **content sync**: the fetch stage's read, where the discovery's metadata already carries the
  owner (no meta query);
- **group sync**: departments, chats and their members, once per cadence, not per document;
- the **peer**: one collaborator call per document (the naive reader). It cannot tell a link
  share or the owner, so it would leave tenant-shared documents unreadable to the tenant.

and the time the per-API budgets (``budget.py``) imply for the permission sync at the assumed
1,000 requests/minute per API.
"""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

from plugins.connectors.base import AccessRequest, ConnectorContext, DiscoveryRequest

_BATCH = 500  # the permission sync's read batch (plugins.engine.permissions)
_PER_MINUTE = 1000  # budget.py's assumed limit for perm_members and perm_public


def _drive(n: int) -> tuple[Any, list[str]]:
    from tests.simulators.feishu import FeishuSimulator

    rng = random.Random(35)
    sim = FeishuSimulator(app_id="cli_bench_acl", app_secret="bench-acl-secret-0123456789")
    folders = [sim.add_folder(f"Team {i}") for i in range(10)]
    people = [f"ou_p{i:03d}" for i in range(200)]
    chats = [f"oc_c{i}" for i in range(10)]
    for c in chats:
        sim.perms.chats[c] = rng.sample(people, 20)
    for i in range(n):
        token = sim.add("docx", f"Doc {i}", folders[i % 10], "x")
        roll = rng.random()
        if roll < 0.2:
            sim.perms.link_share[token] = "tenant_readable"
        members = [("openid", p) for p in rng.sample(people, rng.randint(0, 4))]
        members += [("openchat", c) for c in rng.sample(chats, rng.randint(0, 2))]
        sim.perms.members[token] = members
    return sim, folders


def _counted(sim: Any, keys: tuple[str, ...]) -> dict[str, int]:
    return {k: sim.counters[f"{k}_requests"] for k in keys}


def run_feishu(quick: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from include.config import SourceConfig
    from plugins.connectors.feishu.connector import FeishuConnector
    from tests.support.server import serve_asgi

    n = 500 if quick else 5000
    sim, folders = _drive(n)
    apis = ("perm_members", "perm_public", "meta", "list")
    with serve_asgi(sim.app) as url:
        conn_env = {"conn_type": "http", "login": sim.app_id, "password": sim.app_secret, "host": url}
        os.environ["AIRFLOW_CONN_FEISHU_BENCH_ACL"] = json.dumps(conn_env)
        unlimited = {
            api: [[100000, 1]] for api in (*apis, "contact_departments", "contact_users", "chats", "chat_members")
        }
        options = {"folders": folders, "tenant_url": sim.tenant_url, "rate_limits": unlimited}
        source = SourceConfig(kind="feishu", name="bench", conn_id="feishu_bench_acl", options=options)
        with FeishuConnector(source, ConnectorContext(redis_url=None)) as conn:
            changes = conn.discover(DiscoveryRequest(known={})).changes
            listed = _counted(sim, apis)
            started = time.perf_counter()
            bare = [AccessRequest(c.item_key, c.url) for c in changes]
            for i in range(0, len(bare), _BATCH):
                conn.read_access(bare[i : i + _BATCH])
            perm_seconds = time.perf_counter() - started
            after_perm = _counted(sim, apis)
            conn.read_access([AccessRequest(c.item_key, c.url, dict(c.metadata)) for c in changes])
            after_fetch = _counted(sim, apis)
            groups = conn.group_memberships()
    perm = {k: after_perm[k] - listed[k] for k in apis}
    fetch = {k: after_fetch[k] - after_perm[k] for k in apis}
    perm_total, fetch_total = sum(perm.values()), sum(fetch.values())
    budget_minutes = max(perm["perm_members"], perm["perm_public"]) / _PER_MINUTE
    rows = [
        {"part": "c", "case": "permission sync (key + URL)", "documents": n, "requests": perm_total,
         "per_document": round(perm_total / n, 3), "by_api": perm, "seconds_on_loopback": round(perm_seconds, 2),
         "minutes_at_budget": round(budget_minutes, 1)},
        {"part": "c", "case": "content sync read (discovery metadata)", "documents": n, "requests": fetch_total,
         "per_document": round(fetch_total / n, 3), "by_api": fetch},
        {"part": "c", "case": "group sync (once per cadence)", "documents": n, "requests": groups.requests,
         "groups": len(groups.members)},
        {"part": "c", "case": "peer: one collaborator call per document", "documents": n, "requests": n,
         "per_document": 1.0, "note": "cannot see link shares or the owner"},
    ]  # fmt: skip
    summary = (
        f"Feishu permission sync of {n} documents: {perm_total} requests ({perm_total / n:.3f}/doc: "
        f"collaborators + public settings per document, owners {perm['meta']} batch queries) against "
        f"{n} for the one-call-per-document peer, which cannot see link shares; "
        f"{budget_minutes:.1f} min at the assumed 1,000/min per API; group sync {groups.requests} requests"
    )
    return rows, {"summary": summary, "measured": True, "per_document": round(perm_total / n, 3)}
