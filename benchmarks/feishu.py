"""Feishu drive sync against the local simulator: ours vs the seed's (MemoryBear) client.

Three scenarios, each run for both clients on a fresh simulator:

1. *export batch* — N documents whose export renders for 1 s, one that fails with
   ``job_status`` 110, one large document that renders for 22 s. Ours creates every task, polls
   them concurrently with backoff (in the triggerer when deferred; "worker-slot s" counts only
   the creation and download steps that run in a worker) and records the failure with its
   status. The peer exports one document at a time, polls 10 x 2 s and ignores ``job_status``.
2. *token requests* — K worker processes start at once and list a folder. Ours shares the
   tenant token through Redis; the peer caches it per process.
3. *429 storm* — the next 40 calls (20 with ``--quick``) answer 429 with ``x-ogw-ratelimit-reset: 1``; how many
   documents survive.
4. *docx fast path* — 100 docx documents fetched by export (three calls or more each, 100/min
   per API) against ``docx_fetch: raw_content`` (one call each, 5/s): requests and wall time
   under the client's real default budgets.

Peer: ``benchmarks/_memorybear_feishu_seed.py`` (the seed's algorithm, faults included).
Redis: ``TRIBUTARY_REDIS_URL`` or ``redis://127.0.0.1:6379/14`` (flushed keys are per app id).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import time
import uuid
from typing import Any

from benchmarks._memorybear_feishu_seed import SeedFeishuClient, SeedFeishuError
from tests.simulators.feishu import FeishuSimulator
from tests.support.server import serve_asgi

REDIS_URL = os.environ.get("TRIBUTARY_REDIS_URL") or "redis://127.0.0.1:6379/14"


def _sim() -> FeishuSimulator:
    return FeishuSimulator(
        app_id=f"cli_bench_{uuid.uuid4().hex[:8]}", app_secret="bench-secret", export_pending_polls=0
    )


def _export_drive(sim: FeishuSimulator, n: int) -> tuple[str, list[tuple[str, str]], str, str]:
    folder = sim.add_folder("基准")
    docs = []
    for i in range(n):
        kind = "docx" if i % 2 == 0 else "sheet"
        content = f"# 文档{i}\n正文内容 {i}" if kind == "docx" else [["列"], [i]]
        docs.append((sim.add(kind, f"文档{i}", folder, content), kind))
    for token, _ in docs:
        sim.set_export(token, 0, pending_polls=0, render_seconds=1.0)
    failing = sim.add("docx", "无权限", folder, "x")
    sim.set_export(failing, 110, pending_polls=0, render_seconds=1.0)
    large = sim.add("docx", "大文档", folder, "# 大文档\n内容")
    sim.set_export(large, 0, pending_polls=0, render_seconds=22.0)
    return folder, [*docs, (failing, "docx"), (large, "docx")], failing, large


def _connector(sim: FeishuSimulator, url: str, folder: str, redis_url: str | None = None):
    from include.config import SourceConfig
    from plugins.connectors.base import ConnectorContext
    from plugins.connectors.feishu.connector import FeishuConnector

    os.environ["AIRFLOW_CONN_FEISHU_BENCH"] = (
        f'{{"conn_type": "http", "login": "{sim.app_id}", "password": "{sim.app_secret}", "host": "{url}"}}'
    )
    source = SourceConfig(kind="feishu", name="bench", conn_id="feishu_bench", options={"folders": [folder]})
    return FeishuConnector(source, ConnectorContext(redis_url=redis_url))


def _ours_export(n: int) -> dict[str, Any]:
    from include.contract import Change, ChangeKind

    sim = _sim()
    folder, docs, failing, large = _export_drive(sim, n)
    with serve_asgi(sim.app) as url, _connector(sim, url, folder) as conn:
        changes = [Change(t, ChangeKind.NEW, title=t, metadata={"feishu_type": k}) for t, k in docs]
        conn.client.tokens.get()
        start = time.perf_counter()
        tickets, refused = conn.start_exports(changes)
        slot = time.perf_counter() - start
        conn.poll_exports(tickets)  # the triggerer's part when deferred
        t_dl = time.perf_counter()
        fetched, failures = conn.finish_batch(changes, tickets)
        slot += time.perf_counter() - t_dl
        wall = time.perf_counter() - start
    reasons = {k: e.reason for k, e in failures + refused}
    return {
        "client": "tributary",
        "docs": len(docs),
        "fetched": len(fetched),
        "large_doc_fetched": any(d.item_key == large for d in fetched),
        "failure_recorded_as": reasons.get(failing, "-"),
        "wall_s": round(wall, 2),
        "worker_slot_s": round(slot, 2),
        "export_polls": sim.counters["export_polls"],
    }


def _peer_export(n: int) -> dict[str, Any]:
    sim = _sim()
    _folder, docs, failing, large = _export_drive(sim, n)

    async def run(url: str) -> tuple[list[str], dict[str, str], float]:
        client = SeedFeishuClient(sim.app_id, sim.app_secret, url)
        await client.get_tenant_access_token()
        got, errors = [], {}
        start = time.perf_counter()
        for token, kind in docs:
            try:
                await client.export_file(token, kind)
                got.append(token)
            except SeedFeishuError as exc:
                errors[token] = str(exc)
        wall = time.perf_counter() - start
        await client.aclose()
        return got, errors, wall

    with serve_asgi(sim.app) as url:
        got, errors, wall = asyncio.run(run(url))
    return {
        "client": "seed (MemoryBear)",
        "docs": len(docs),
        "fetched": len(got),
        "large_doc_fetched": large in got,
        "failure_recorded_as": "timeout after 20 s" if "did not complete" in errors.get(failing, "") else "-",
        "wall_s": round(wall, 2),
        "worker_slot_s": round(wall, 2),
        "export_polls": sim.counters["export_polls"],
    }


# ----------------------------------------------------------------------------- tokens


def _ours_token_worker(settings: dict, folder: str, start: Any, done: Any) -> None:
    from plugins.connectors.feishu.client import FeishuClient, FeishuSettings

    with FeishuClient(FeishuSettings(**settings)) as client:
        start.wait(60)
        done.put(len(list(client.list_folder(folder))))


def _peer_token_worker(app_id: str, secret: str, url: str, folder: str, start: Any, done: Any) -> None:
    async def run() -> int:
        client = SeedFeishuClient(app_id, secret, url)
        await client.get_tenant_access_token()
        data = await client._json("GET", "/drive/v1/files", params={"folder_token": folder, "page_size": 200})
        await client.aclose()
        return len(data.get("files") or [])

    start.wait(60)
    done.put(asyncio.run(run()))


def _token_requests(workers: int, ours: bool) -> dict[str, Any]:
    import dataclasses

    from plugins.connectors.feishu.client import FeishuSettings

    sim = _sim()
    folder = sim.add_folder("f")
    sim.add("docx", "d", folder, "x")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["benchmarks.feishu", "plugins.connectors.feishu.client"])
    start, done = ctx.Event(), ctx.Queue()
    with serve_asgi(sim.app) as url:
        if ours:
            settings = FeishuSettings(app_id=sim.app_id, app_secret=sim.app_secret, host=url, redis_url=REDIS_URL)
            args = (dataclasses.asdict(settings), folder, start, done)
            target = _ours_token_worker
        else:
            args = (sim.app_id, sim.app_secret, url, folder, start, done)
            target = _peer_token_worker
        procs = [ctx.Process(target=target, args=args) for _ in range(workers)]
        for p in procs:
            p.start()
        time.sleep(1.0)
        start.set()
        listed = [done.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(30)
    return {
        "client": "tributary (Redis)" if ours else "seed (MemoryBear)",
        "workers": workers,
        "listings_ok": sum(1 for n in listed if n == 1),
        "token_requests": sim.counters["token_requests"],
    }


# ----------------------------------------------------------------------------- 429 storm


def _storm(ours: bool, n: int = 6, burst: int = 40) -> dict[str, Any]:
    from include.contract import Change, ChangeKind

    sim = _sim()
    folder = sim.add_folder("storm")
    docs = [(sim.add("docx", f"文档{i}", folder, f"# {i}"), "docx") for i in range(n)]
    with serve_asgi(sim.app) as url:
        sim.burst(burst, reset=1)
        start = time.perf_counter()
        if ours:
            with _connector(sim, url, folder) as conn:
                changes = [Change(t, ChangeKind.NEW, title=t, metadata={"feishu_type": k}) for t, k in docs]
                fetched, _failures = conn.fetch_batch(changes)
            got = len(fetched)
        else:

            async def run() -> int:
                client = SeedFeishuClient(sim.app_id, sim.app_secret, url)
                ok = 0
                for token, kind in docs:
                    try:
                        await client.export_file(token, kind)
                        ok += 1
                    except (SeedFeishuError, KeyError, ValueError):
                        pass
                await client.aclose()
                return ok

            got = asyncio.run(run())
        wall = time.perf_counter() - start
    return {
        "client": "tributary" if ours else "seed (MemoryBear)",
        "docs": n,
        "fetched": got,
        "lost": n - got,
        "wall_s": round(wall, 2),
        "429s_served": sim.counters["rate_limited"],
    }


# ----------------------------------------------------------------------------- docx fast path


def _docx_fetch(mode: str, n: int = 100) -> dict[str, Any]:
    """``n`` docx documents fetched in-task, by export (create, poll, download: 100/min each, the
    render taking 1 s) or by ``raw_content`` (one call each, 5/s), both under the client's real
    default budgets (budget.DEFAULT_LIMITS), so the wall time is what those limits allow."""
    from include.contract import Change, ChangeKind

    sim = _sim()
    sim.export_render_seconds = 1.0
    folder = sim.add_folder("docx")
    tokens = [sim.add("docx", f"文档{i}", folder, f"# 文档{i}\n正文内容 {i}") for i in range(n)]
    with serve_asgi(sim.app) as url, _connector(sim, url, folder) as conn:
        conn.options.update(docx_fetch=mode, export_poll_interval=1.0)
        changes = [Change(t, ChangeKind.NEW, title=t, metadata={"feishu_type": "docx"}) for t in tokens]
        conn.client.tokens.get()
        start = time.perf_counter()
        fetched, failures = conn.fetch_batch(changes)
        wall = time.perf_counter() - start
    c = sim.counters
    requests = c["export_create_requests"] + c["export_poll_requests"] + c["export_download_requests"]
    requests += c["docx_get_requests"]
    return {
        "client": f"tributary docx_fetch={mode}",
        "docs": n,
        "fetched": len(fetched),
        "failed": len(failures),
        "requests": requests,
        "wall_s": round(wall, 2),
    }


def run(quick: bool) -> dict[str, Any]:
    n = 6 if quick else 20
    workers = 4 if quick else 10
    rows: list[dict[str, Any]] = []
    for fn in (_ours_export, _peer_export):
        rows.append({"scenario": f"export batch ({n}+2 docs)", **fn(n)})
    for ours in (True, False):
        rows.append({"scenario": f"token requests ({workers} processes)", **_token_requests(workers, ours)})
    burst = 20 if quick else 40
    for ours in (True, False):
        rows.append({"scenario": f"429 storm ({burst} x reset 1 s)", **_storm(ours, burst=burst)})
    for mode in ("export", "raw_content"):
        rows.append({"scenario": "100 docx: export vs raw_content", **_docx_fetch(mode)})
    ours_exp, peer_exp = rows[0], rows[1]
    summary = (
        f"Export batch: ours fetched {ours_exp['fetched']}/{ours_exp['docs']} in {ours_exp['wall_s']} s "
        f"holding a worker slot {ours_exp['worker_slot_s']} s, the 110 failure recorded as "
        f"`{ours_exp['failure_recorded_as']}`; the seed fetched {peer_exp['fetched']}/{peer_exp['docs']} in "
        f"{peer_exp['wall_s']} s (all of it in a worker), the large document lost to the fixed 20 s window. "
        f"Token requests: {rows[2]['token_requests']} (ours) vs {rows[3]['token_requests']} (seed) for "
        f"{workers} processes. 429 storm: ours lost {rows[4]['lost']}, the seed lost {rows[5]['lost']}. "
        f"100 docx: export {rows[6]['requests']} requests in {rows[6]['wall_s']} s, raw_content "
        f"{rows[7]['requests']} requests in {rows[7]['wall_s']} s."
    )
    return {
        "title": "Feishu drive sync: exports, shared token, rate limits",
        "peer": "MemoryBear Feishu client (seed algorithm, benchmarks/_memorybear_feishu_seed.py)",
        "rows": rows,
        "summary": summary,
    }
