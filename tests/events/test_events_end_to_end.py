"""Issue 37 end to end: the simulators push their callbacks to the real receiver inside a running
Airflow (api-server, scheduler, dag-processor, triggerer), and each kind of change reaches the
index through Airflow's own event scheduling, without listing the source.

Sources (``tests/support/events_stack.py`` starts them and syncs each once first):
- ``feishu:drive``, events on, Encrypt Key set: encrypted and signed callbacks, through a proxy
  that answers 503 to the first deliveries (the simulator retries on Feishu's schedule,
  compressed), every event delivered twice and out of order;
- ``feishu:plain``, events on, no Encrypt Key: plain callbacks;
- ``yuque:kb``, events on: the knowledge base's webhook with the URL secret;
- ``feishu:quiet``, events off: nothing of this changes anything for it.
Then hostile callers through the same API server: a bad signature, a replayed event, an expired
timestamp, a 10 MB body, an unknown event type, an event for another source, 1,000 callbacks in
a second: all refused or counted as duplicates, none stored, so none can start a run.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response

from include.contract import document_id
from include.stores.access import AccessStore
from include.stores.events import EventStore
from plugins.connectors.yuque.versions import item_key
from tests.simulators._feishu_events import encrypt_body, sign
from tests.simulators.feishu import FeishuSimulator, demo_drive
from tests.simulators.yuque import YuqueSimulator
from tests.support.events_stack import EventsStack, events_stack
from tests.support.server import serve_asgi

pytestmark = [pytest.mark.airflow, pytest.mark.postgres, pytest.mark.slow]

KEY, TOKEN, PLAIN_TOKEN = "e2e-encrypt-key-6d1f", "e2e-verify-token-91ac", "e2e-plain-token-22bd"
YUQUE_TOKEN, YUQUE_SECRET = "yuque-e2e-token-0123456789", "yuque-webhook-secret-5c3e9a"
NEVER = "0 0 1 1 *"  # the first interval ends next new year: no scheduled run during the test
# Feishu's 15 s / 5 min / 1 h / 6 h re-pushes: 0.15 s / 3 s / 36 s / 216 s. The answer deadline
# is longer than Feishu's 3 s: the API server's first callback loads the sources file and the
# connectors (seen over 3 s at CI's load), and retries are tested through the proxy's 503s.
FAST = {"time_scale": 0.01, "timeout": 30.0}


def _feishu(name: str, root: str, *, events: bool = True) -> dict[str, Any]:
    return {
        "kind": "feishu",
        "name": name,
        "conn_id": f"feishu_{name}",
        "schedule": NEVER,
        "batch_size": 8,
        "events": {"mode": "callback" if events else "off", "debounce_seconds": 2},
        "options": {
            "folders": [root],
            "types": ["doc", "docx", "sheet", "bitable", "file"],
            "deferrable": False,
            "docx_fetch": "raw_content",
            "export_poll_interval": 0.05,
            "export_poll_max_interval": 0.2,
        },
    }


def _conn(sim: FeishuSimulator, name: str, **extra: str) -> dict[str, Any]:
    return {
        "conn_type": "feishu",
        "login": sim.app_id,
        "password": sim.app_secret,
        "host": "{" + name + "}",
        "extra": extra,
    }


class FlakyProxy:
    """Forwards to the receiver, answering 503 to the first ``fail`` requests (a receiver that
    was briefly down): what makes the simulator retry."""

    def __init__(self, target: str, fail: int) -> None:
        self.target, self.fail, self.refused = target, fail, 0
        self.app = FastAPI()
        self.app.add_api_route("/{path:path}", self.forward, methods=["POST"])

    async def forward(self, path: str, request: Request) -> Response:
        if self.refused < self.fail:
            self.refused += 1
            return Response(status_code=503)
        headers = {k: v for k, v in request.headers.items() if k.lower().startswith(("x-lark", "content-type"))}
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await client.post(f"{self.target}/{path}", content=await request.body(), headers=headers)
        return Response(answer.content, status_code=answer.status_code, media_type="application/json")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("events-e2e")
    drive_sim, plain_sim, quiet_sim = (FeishuSimulator(app_id=f"cli_e2e{n}", app_secret=f"s3cret-{n}") for n in "apq")
    for sim in (drive_sim, plain_sim, quiet_sim):
        sim.export_pending_polls = 1
    drive, plain, quiet = demo_drive(drive_sim), demo_drive(plain_sim), demo_drive(quiet_sim)
    yuque = YuqueSimulator()
    yuque.add_account("alice", token=YUQUE_TOKEN)
    kb = yuque.add_repo("alice", "kb", "知识库")
    guide = yuque.add_doc(kb, "入职指南", body="# 入职指南\n\n新同事第一天请到前台领取工牌。")
    faq = yuque.add_doc(kb, "常见问题", body="# 常见问题\n\n报销在每月五日前提交。")
    for n in range(5):  # one deletion in seven docs stays under the mass-delete guard's 20%
        yuque.add_doc(kb, f"周报 {n}", body=f"# 周报 {n}\n\n本周完成了第 {n} 项。")
    sources = [
        _feishu("drive", drive["root"]),
        _feishu("plain", plain["root"]),
        _feishu("quiet", quiet["root"], events=False),
        {
            "kind": "yuque", "name": "kb", "conn_id": "yuque_kb", "schedule": NEVER,
            "options": {"namespaces": ["alice/kb"]}, "events": {"mode": "callback", "debounce_seconds": 2},
            "index": {"backend": "sqlite", "name": "yuque"},
        },
    ]  # fmt: skip
    conns = {
        "AIRFLOW_CONN_FEISHU_DRIVE": _conn(drive_sim, "drive", encrypt_key=KEY, verification_token=TOKEN),
        "AIRFLOW_CONN_FEISHU_PLAIN": _conn(plain_sim, "plain", verification_token=PLAIN_TOKEN),
        "AIRFLOW_CONN_FEISHU_QUIET": _conn(quiet_sim, "quiet", verification_token="unused-token-000"),
        "AIRFLOW_CONN_YUQUE_KB": {
            "conn_type": "yuque", "host": "{yuque}", "password": YUQUE_TOKEN,
            "extra": {"webhook_secret": YUQUE_SECRET, "backoff_initial": 0.01, "backoff_max": 0.05},
        },
    }  # fmt: skip
    simulators = {"drive": drive_sim, "plain": plain_sim, "quiet": quiet_sim, "yuque": yuque}
    with events_stack(root, sources, conns, simulators=simulators) as stack:
        proxy = FlakyProxy(stack.base_url, fail=1)
        with serve_asgi(proxy.app) as proxy_url:
            via_proxy = stack.receiver("feishu:drive").replace(stack.base_url, proxy_url)
            knobs = {"encrypt_key": KEY, "verification_token": TOKEN, "duplicates": 1, "reorder_window": 0.5, **FAST}
            # the challenge met the proxy's 503: the URL is not kept (the console refuses it too)
            assert not drive_sim.events.configure(via_proxy, **knobs)
            assert drive_sim.events.configure(via_proxy, **knobs)  # answered by the real receiver
            proxy.fail, proxy.refused = 1, 0  # the first event delivery answers 503: re-pushed
            assert plain_sim.events.configure(stack.receiver("feishu:plain"), verification_token=PLAIN_TOKEN, **FAST)
            yuque.webhooks.configure(kb, f"{stack.receiver('yuque:kb')}?secret={YUQUE_SECRET}", **FAST)
            yield {
                "stack": stack, "drive_sim": drive_sim, "plain_sim": plain_sim, "quiet_sim": quiet_sim,
                "yuque": yuque, "drive": drive, "plain": plain, "quiet": quiet, "kb": kb, "guide": guide,
                "faq": faq, "proxy": proxy,
            }  # fmt: skip


def _listings(world: dict[str, Any]) -> dict[str, int]:
    """Folder listings of the Feishu drives; Yuque docs listings that are not incremental."""
    full = [
        r
        for r in world["yuque"].requests
        if r["path"].endswith("/docs") and not ({"changed_at_gte", "deleted"} & set(r["query"]))
    ]
    return {
        "drive": world["drive_sim"].counters["list_requests"],
        "plain": world["plain_sim"].counters["list_requests"],
        "yuque full docs listings": len(full),
    }


def _settled(runs: list[dict[str, Any]]) -> bool:
    return bool(runs) and all(r["state"] in ("success", "failed") for r in runs)


def _stats(stack: EventsStack, source_id: str) -> dict[str, Any]:
    store = stack.store()
    try:
        return EventStore(store).stats(source_id).to_dict()
    finally:
        store.close()


def _title(stack: EventsStack, source_id: str, key: str) -> str | None:
    store = stack.store()
    try:
        item = store.get_item(source_id, key)
        return item.title if item else None
    finally:
        store.close()


def _members(stack: EventsStack, source_id: str, key: str) -> frozenset[str]:
    store = stack.store()
    try:
        found = AccessStore(store).get(source_id, [key])
        return found[key].access.users if key in found else frozenset()
    finally:
        store.close()


def test_subscriptions_were_made_by_the_first_sync_and_not_for_events_off(world: dict[str, Any]) -> None:
    drive_sim, quiet_sim, drive = world["drive_sim"], world["quiet_sim"], world["drive"]
    indexed = {drive[k] for k in ("docx", "doc", "sheet", "bitable", "file", "md")}
    assert set(drive_sim.events.subscribed) == {*indexed, drive["root"]}
    assert quiet_sim.counters["subscribe_requests"] == 0 and quiet_sim.events.subscribed == {}


def test_edit_rename_delete_and_permission_change_reach_the_index_without_a_listing(world: dict[str, Any]) -> None:
    stack, drive_sim, drive = world["stack"], world["drive_sim"], world["drive"]
    # the permission DAGs' own first interval runs when the stack starts (their periodic sync
    # lists what it checks): the count of listings starts once those runs are over
    perms = [f"perms_{c.kind}_{c.name}" for c in stack.sources.values()]
    stack.wait("the startup permission syncs", lambda: all(_settled(stack.dag_runs(d)) for d in perms), timeout=900)
    before = _listings(world)
    drive_sim.edit(drive["docx"], "# 产品介绍\n事件驱动的新鲜度 zephyrcallback")
    drive_sim.rename(drive["sheet"], "销售数据 2027")
    drive_sim.share(drive["md"], ("openid", "ou_e2e_newcomer"))
    drive_sim.trash(drive["doc"])
    world["plain_sim"].edit(world["plain"]["docx"], "# 产品介绍\n明文回调 quokkaplain")
    yuque = world["yuque"]
    yuque.edit_doc(world["guide"], body="# 入职指南\n\n第一天先去 IT 领电脑 marmotwebhook。")
    yuque.delete_doc(world["faq"])

    sid = "feishu:drive"
    ykb = "yuque:kb"
    guide_id = document_id(ykb, item_key(world["kb"].id, world["guide"].id))
    reached = {
        "the edit": lambda: stack.search(sid, "zephyrcallback") == {document_id(sid, drive["docx"])},
        "the rename": lambda: _title(stack, sid, drive["sheet"]) == "销售数据 2027",
        "the trashed doc gone": lambda: not stack.search(sid, "部署步骤"),
        "the new collaborator": lambda: any("ou_e2e_newcomer" in u for u in _members(stack, sid, drive["md"])),
        "the plain edit": lambda: bool(stack.search("feishu:plain", "quokkaplain")),
        "the Yuque edit": lambda: stack.search(ykb, "marmotwebhook") == {guide_id},
        "the Yuque delete": lambda: not stack.search(ykb, "报销"),
    }
    for what, check in reached.items():  # slow runs on a loaded machine: waited for, never timed
        stack.wait(what, check, timeout=900)
    # no folder listed, no Yuque repo listed: each change came by its event and was re-read by
    # its metas (Feishu) or its doc's detail (Yuque)
    assert _listings(world) == before

    # every sync run was started by events (asset-triggered); the permissions DAG also ran its
    # first scheduled interval when the stack started, and the permission event's run beside it
    for dag in ("sync_feishu_drive", "sync_feishu_plain", "sync_yuque_kb"):
        runs = stack.dag_runs(dag)
        assert runs and {r["run_type"] for r in runs} == {"asset_triggered"}, (dag, runs)
    assert "asset_triggered" in {r["run_type"] for r in stack.dag_runs("perms_feishu_drive")}
    # retries, duplicates and reordering: re-pushed after a 503, each event delivered twice
    sender = drive_sim.events.sender
    assert sender is not None and sender.idle(30)
    assert world["proxy"].refused == 1 and any(a.attempt > 0 and a.status == 200 for a in sender.log)
    stats = _stats(stack, sid)
    assert stats["received"] == 4 and stats["duplicates"] >= 4, stats


def test_events_off_source_is_untouched(world: dict[str, Any]) -> None:
    stack, quiet_sim = world["stack"], world["quiet_sim"]
    quiet_sim.events.subscribed[world["quiet"]["docx"]] = "docx"  # even if it were subscribed
    answer = httpx.post(
        stack.receiver("feishu:quiet"), json={"challenge": "x", "token": "t", "type": "url_verification"}
    )
    assert answer.status_code == 404
    assert not quiet_sim.events.configure(stack.receiver("feishu:quiet"), verification_token="unused-token-000")
    assert stack.dag_runs("sync_feishu_quiet") == []
    assert _stats(stack, "feishu:quiet")["received"] == 0


def _signed(payload: dict[str, Any], *, key: str = KEY, ts: int | None = None) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"encrypt": encrypt_body(key, json.dumps(payload).encode())}).encode()
    stamp, nonce = str(ts if ts is not None else int(time.time())), secrets.token_hex(8)
    return body, {
        "Content-Type": "application/json",
        "X-Lark-Request-Timestamp": stamp,
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": sign(stamp, nonce, key, body),
    }


def _event(sim: FeishuSimulator, token: str, event_type: str = "drive.file.edit_v1", **header: Any) -> dict[str, Any]:
    payload = sim.events.envelope(event_type, {"file_token": token, "file_type": "docx"})
    payload["header"].update(header)
    return payload


async def _burst(url: str, requests: list[tuple[bytes, dict[str, str]]]) -> list[int]:
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=50)) as client:
        answers = await asyncio.gather(*(client.post(url, content=b, headers=h) for b, h in requests))
    return [a.status_code for a in answers]


def test_hostile_callbacks_are_refused_and_counted_and_start_nothing(world: dict[str, Any]) -> None:
    stack, sim, drive = world["stack"], world["drive_sim"], world["drive"]
    sid, url = "feishu:drive", stack.receiver("feishu:drive")
    stats = _stats(stack, sid)
    runs = {dag: len(stack.dag_runs(dag)) for dag in ("sync_feishu_drive", "perms_feishu_drive")}
    token = drive["docx"]
    post = httpx.Client(timeout=60)

    body, headers = _signed(_event(sim, token))
    forged = {**headers, "X-Lark-Signature": "0" * 64}
    assert post.post(url, content=body, headers=forged).status_code == 401  # bad signature
    # a replay: an event the receiver already took, pushed again (a duplicate while its
    # create_time is fresh, expired once it is older than max_skew_seconds)
    body, headers = _signed(sim.events.sent[0])
    replayed = post.post(url, content=body, headers=headers).status_code
    assert replayed in (200, 403)
    old = int(time.time()) - 3600
    body, headers = _signed(_event(sim, token), ts=old)
    assert post.post(url, content=body, headers=headers).status_code == 403  # expired timestamp
    huge = b'{"encrypt": "' + b"A" * (10 * 1024 * 1024) + b'"}'
    assert post.post(url, content=huge, headers={"Content-Type": "application/json"}).status_code == 413
    body, headers = _signed(_event(sim, token, "drive.file.unheard_of_v9"))
    assert post.post(url, content=body, headers=headers).status_code == 400  # unknown event type
    other = _event(sim, token, app_id=world["plain_sim"].app_id)  # another app's event, right key
    body, headers = _signed(other)
    assert post.post(url, content=body, headers=headers).status_code in (401, 403)
    burst = [(_signed(_event(sim, token))[0], forged) for _ in range(1000)]
    started = time.monotonic()
    codes = asyncio.run(_burst(url, burst))
    elapsed = time.monotonic() - started
    assert set(codes) <= {401, 429}, sorted(set(codes))
    post.close()

    after = _stats(stack, sid)
    refused = {k: n - stats["refused"].get(k, 0) for k, n in after["refused"].items()}
    assert after["received"] == stats["received"]  # nothing hostile was stored
    assert after["pending"] == 0  # so the trigger has nothing to start a run with
    if replayed == 200:
        assert after["duplicates"] == stats["duplicates"] + 1
    assert refused.get("bad_signature", 0) >= 1001 - codes.count(429), refused
    assert refused.get("too_large") == 1 and refused.get("unknown_event_type") == 1, refused
    assert refused.get("expired", 0) == (1 if replayed == 200 else 2), refused
    assert sum(refused.values()) == 1005 + (replayed != 200), refused
    assert {dag: len(stack.dag_runs(dag)) for dag in runs} == runs
    print(f"1,000 forged callbacks answered in {elapsed:.1f} s; refusals {refused}")
