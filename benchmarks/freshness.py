"""Freshness (issue 37): an edit in Feishu until its chunk is searchable, pushed events against the
scheduled poll, and the API requests each mode spends per edit.

One real stack (``tests/support/events_stack.py``: api-server, scheduler, dag-processor,
triggerer, LocalExecutor on PostgreSQL) and one Feishu source (the simulator: ``docs`` documents
in ``folders`` folders, indexed and subscribed by a first sync) with ``events: {mode: callback}``
at its defaults (30 s debounce) and the simulator pushing encrypted, signed events to the real
receiver.

Events: ``edits`` edits, one every ``spacing`` seconds, each to a different document and each
adding a word of its own; a watcher searches the index every second for the words not yet found
(so a latency is edit -> chunk searchable, to within a second). Requests: every business request
the simulator served during the phase (listing, metas, fetches, subscriptions; token requests
apart), divided by the edits.

Polling: callbacks stopped, ``poll_edits`` edits, then one run of the DAG as the schedule starts
it (a whole listing): its duration R (from Airflow's run record) and requests, split into the
listing (paid by every poll, changed or not) and the fetches of the edited documents. An edit
waits for the next scheduled poll, U(0, interval), then R: p50 = interval/2 + R, p95 = 0.95
interval + R; computed for ``@hourly`` (the Feishu example source) and ``@daily`` (the default
schedule). Requests per edit at a stated edit rate (100 edits a day): polling pays
polls_per_day x listing + the fetches; events pay what the phase measured, plus one safety-net
poll a day and the subscriptions' re-checks (docs / recheck_days a day).
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["run"]

KEY, TOKEN = "bench-encrypt-key-7c1e", "bench-verify-token-40d2"
EDITS_PER_DAY = 100  # the stated edit rate for requests per edit
RECHECK_DAYS = 7.0  # options.subscriptions.recheck_days default


def _entry(root: str) -> dict[str, Any]:
    return {
        "kind": "feishu",
        "name": "bench",
        "conn_id": "feishu_bench",
        "schedule": "0 0 1 1 *",  # no scheduled run inside the benchmark: the poll is started by hand
        "batch_size": 50,
        "events": {"mode": "callback"},  # the defaults: debounce 30 s
        "options": {"folders": [root], "types": ["docx"], "deferrable": False},
    }


def _drive(sim: Any, docs: int, folders: int) -> tuple[str, list[str]]:
    root = sim.add_folder("基准")
    subs = [sim.add_folder(f"目录{i}", root) for i in range(folders)]
    tokens = [
        sim.add("docx", f"文档{i}", subs[i % folders], f"# 文档{i}\n第 {i} 篇文档的正文，讲述部署与回滚。")
        for i in range(docs)
    ]
    return root, tokens


def _requests(counters: dict[str, int]) -> int:
    return sum(n for k, n in counters.items() if k.endswith("_requests") and k != "token_requests")


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}


class Watcher(threading.Thread):
    """Searches the index every second for each pending word; records when it first appears."""

    def __init__(self, stack: Any, source_id: str) -> None:
        super().__init__(daemon=True)
        self.stack, self.source_id = stack, source_id
        self.pending: dict[str, float] = {}  # word -> edit time
        self.found: dict[str, float] = {}  # word -> latency (s)
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def expect(self, word: str, edited_at: float) -> None:
        with self.lock:
            self.pending[word] = edited_at

    def run(self) -> None:
        while not self.stop.wait(1.0):
            with self.lock:
                todo = dict(self.pending)
            for word, edited_at in todo.items():
                if self.stack.search(self.source_id, word):
                    with self.lock:
                        self.found[word] = time.time() - edited_at
                        self.pending.pop(word, None)


def _edit(sim: Any, token: str, word: str) -> None:
    sim.edit(token, f"# 更新\n这篇文档刚刚改过，关键词 {word}。")


def _words(rng: random.Random, n: int, tag: str) -> list[str]:
    return [f"{tag}{i:03d}{''.join(rng.choices('bcdfghjkmnpqrstvwxz', k=5))}" for i in range(n)]


def _event_phase(stack: Any, sim: Any, tokens: list[str], edits: int, spacing: float) -> dict[str, Any]:
    # the permission DAG's own first interval runs when the stack starts (a whole permission
    # sync, the same in both modes): counting starts once it is over
    stack.wait("the startup permission sync", lambda: _settled(stack.dag_runs("perms_feishu_bench")), timeout=900)
    rng = random.Random(37)
    targets, words = rng.sample(tokens, edits), _words(rng, edits, "ev")
    watcher = Watcher(stack, "feishu:bench")
    watcher.start()
    before, started = dict(sim.counters), time.time()
    runs_before = {r["dag_run_id"] for r in stack.dag_runs("sync_feishu_bench")}
    for token, word in zip(targets, words, strict=True):
        _edit(sim, token, word)
        watcher.expect(word, time.time())
        time.sleep(spacing)
    stack.wait("every edit searchable", lambda: len(watcher.found) == edits, timeout=1800)
    watcher.stop.set()
    runs = [r for r in stack.dag_runs("sync_feishu_bench") if r["dag_run_id"] not in runs_before]
    latencies = sorted(watcher.found.values())
    return {
        "latencies": latencies,
        "requests": _requests(_delta(dict(sim.counters), before)),
        "by_api": _delta(dict(sim.counters), before),
        "runs": len(runs),
        "run_types": sorted({r["run_type"] for r in runs}),
        "wall_s": time.time() - started,
    }


def _settled(runs: list[dict[str, Any]]) -> bool:
    return bool(runs) and all(r["state"] in ("success", "failed") for r in runs)


def _run_seconds(run: dict[str, Any]) -> float:
    import datetime as dt

    start = dt.datetime.fromisoformat(run["start_date"].replace("Z", "+00:00"))
    end = dt.datetime.fromisoformat(run["end_date"].replace("Z", "+00:00"))
    return (end - start).total_seconds()


def _poll_phase(stack: Any, sim: Any, tokens: list[str], edits: int) -> dict[str, Any]:
    sim.events.url = None  # callbacks stopped: only the poll finds these edits
    rng = random.Random(38)
    for token, word in zip(rng.sample(tokens, edits), _words(rng, edits, "pl"), strict=True):
        _edit(sim, token, word)
    before = dict(sim.counters)
    resp = stack.http.post("/api/v2/dags/sync_feishu_bench/dagRuns", json={"logical_date": None, "conf": {}})
    resp.raise_for_status()
    run_id = resp.json()["dag_run_id"]

    def done() -> dict[str, Any] | None:
        run = stack.http.get(f"/api/v2/dags/sync_feishu_bench/dagRuns/{run_id}").json()
        return run if run["state"] in ("success", "failed") else None

    run = stack.wait("the poll run", done, timeout=1800)
    assert run["state"] == "success", stack.tails()
    delta = _delta(dict(sim.counters), before)
    listing = delta.get("list_requests", 0) + delta.get("root_meta_requests", 0)
    return {"run_s": _run_seconds(run), "requests": _requests(delta), "listing": listing, "by_api": delta}


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def _rows(ev: dict[str, Any], poll: dict[str, Any], docs: int, poll_edits: int) -> list[dict[str, Any]]:
    lat = ev["latencies"]
    fetch_per_edit = (poll["requests"] - poll["listing"]) / poll_edits
    upkeep = docs / RECHECK_DAYS  # get_subscribe re-checks a day
    events_per_edit = ev["requests"] / len(lat) + (poll["listing"] + upkeep) / EDITS_PER_DAY
    rows = [
        {
            "mode": "events (callback, debounce 30 s)",
            "edits": len(lat),
            "p50 s": round(_pct(lat, 50), 1),
            "p95 s": round(_pct(lat, 95), 1),
            "max s": round(max(lat), 1),
            "runs": ev["runs"],
            "requests measured": ev["requests"],
            "requests / edit": round(events_per_edit, 2),
        }
    ]
    for name, interval in (("@hourly", 3600.0), ("@daily", 86400.0)):
        polls = 86400.0 / interval
        rows.append(
            {
                "mode": f"polling {name} (computed: U(0, {interval:.0f}) + R)",
                "edits": poll_edits,
                "p50 s": round(interval / 2 + poll["run_s"], 1),
                "p95 s": round(0.95 * interval + poll["run_s"], 1),
                "max s": round(interval + poll["run_s"], 1),
                "runs": f"{polls:.0f}/day",
                "requests measured": poll["requests"],
                "requests / edit": round((polls * poll["listing"]) / EDITS_PER_DAY + fetch_per_edit, 2),
            }
        )
    return rows


def run(quick: bool = False) -> dict[str, Any]:
    from tests.simulators.feishu import FeishuSimulator
    from tests.support.events_stack import events_stack

    docs, folders, edits, spacing, poll_edits = (60, 3, 20, 2.0, 5) if quick else (300, 6, 100, 2.0, 10)
    load_before = os.getloadavg()
    sim = FeishuSimulator(app_id="cli_freshbench", app_secret="s3cret-fresh-bench", export_pending_polls=1)
    root, tokens = _drive(sim, docs, folders)
    conns = {
        "AIRFLOW_CONN_FEISHU_BENCH": {
            "conn_type": "feishu", "login": sim.app_id, "password": sim.app_secret, "host": "{feishu}",
            "extra": {"encrypt_key": KEY, "verification_token": TOKEN},
        }
    }  # fmt: skip
    with (
        tempfile.TemporaryDirectory(prefix="freshness-") as tmp,
        events_stack(Path(tmp), [_entry(root)], conns, simulators={"feishu": sim}) as stack,
    ):
        assert sim.events.configure(stack.receiver("feishu:bench"), encrypt_key=KEY, verification_token=TOKEN)
        ev = _event_phase(stack, sim, tokens, edits, spacing)
        poll = _poll_phase(stack, sim, tokens, poll_edits)
    load_after = os.getloadavg()
    rows = _rows(ev, poll, docs, poll_edits)
    met = rows[0]["p95 s"] < 60 and rows[0]["requests / edit"] < rows[1]["requests / edit"]
    summary = (
        f"{docs} documents in {folders} folders; {edits} edits one every {spacing:g} s. Events: p50 "
        f"{rows[0]['p50 s']} s, p95 {rows[0]['p95 s']} s over {ev['runs']} runs ({', '.join(ev['run_types'])}), "
        f"{ev['requests']} requests ({ev['by_api']}). Poll run R = {poll['run_s']:.1f} s, {poll['requests']} requests "
        f"of which {poll['listing']} listing ({poll['by_api']}). Requests per edit at {EDITS_PER_DAY} edits a day: "
        f"polling = polls_per_day x listing / edits + fetches per edit; events = measured / edits + (one daily "
        f"safety-net poll's listing + {docs}/{RECHECK_DAYS:g} subscription re-checks a day) / edits. "
        f"Goal (p95 < 60 s, fewer requests per edit than hourly polling): {'MET' if met else 'NOT met'}. "
        f"Load average before {load_before[0]:.1f} / {load_before[1]:.1f}, after {load_after[0]:.1f} / "
        f"{load_after[1]:.1f} (2 cores shared with other sessions)."
    )
    return {
        "title": "Freshness: Feishu edit -> chunk searchable, events vs polling",
        "peer": "the same edits found by the scheduled poll (computed from a measured poll run)",
        "rows": rows,
        "summary": summary,
        "goal_met": met,
        "raw": {"events": ev, "poll": poll, "load": [load_before, load_after]},
    }
