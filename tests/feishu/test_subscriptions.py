"""Drive event subscriptions follow the index (issue 37, point 4), against the simulator."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest

from include.config import SourceConfig
from include.settings import get_settings
from include.stores.subscriptions import SubscriptionStore
from plugins.connectors.feishu.client import FeishuClient
from plugins.connectors.feishu.subscriptions import SubscriptionKeeper, is_subscribed, subscribe
from plugins.engine import run_pipeline
from tests.simulators.feishu import FeishuSimulator, demo_drive

INDEXED = ("docx", "doc", "sheet", "bitable", "file", "md")


def source(root: str, *, events: bool = True, **options) -> SourceConfig:
    opts = {"folders": [root], "export_poll_interval": 0.05, "export_poll_max_interval": 0.2, **options}
    return SourceConfig(
        kind="feishu",
        name="drive",
        conn_id="feishu_default",
        options=opts,
        batch_size=4,
        events={"mode": "callback" if events else "off"},
    )


@pytest.fixture
def store(tributary_home) -> Iterator[SubscriptionStore]:
    settings = get_settings()
    settings.ensure_dirs()
    subscriptions = SubscriptionStore(settings.state_url)
    yield subscriptions
    subscriptions.close()


@pytest.fixture
def drive(sim: FeishuSimulator, feishu_conn: str, tributary_home) -> dict[str, str]:
    return demo_drive(sim)


def test_first_run_subscribes_each_indexed_file_and_the_folder_then_only_the_difference(
    sim: FeishuSimulator, drive: dict[str, str]
) -> None:
    first = run_pipeline(source(drive["root"]))
    assert first.status == "success"
    subs = first.counts["subscriptions"]
    assert (subs["subscribed"], subs["failed"], subs["active"]) == (7, 0, 7)
    assert sim.events.subscribed == {
        **{drive[k]: sim.items[drive[k]].type for k in INDEXED},
        drive["root"]: "folder",
    }

    # nothing changed: not one subscription request
    before = sim.counters["subscribe_requests"]
    second = run_pipeline(source(drive["root"]))
    assert second.counts["subscriptions"]["requests"] == 0
    assert sim.counters["subscribe_requests"] == before

    # a new file is subscribed alone; a trashed one leaves the index and its row goes
    new = sim.add("docx", "新文档", drive["root"], "# 新文档\n订阅测试。")
    sim.trash(drive["doc"])
    third = run_pipeline(source(drive["root"]))
    subs = third.counts["subscriptions"]
    assert (subs["subscribed"], subs["unsubscribed"], subs["requests"], subs["active"]) == (1, 1, 2, 7)
    assert new in sim.events.subscribed
    store = SubscriptionStore(get_settings().state_url)
    try:
        assert drive["doc"] not in store.all("feishu:drive") and new in store.all("feishu:drive")
    finally:
        store.close()


def test_events_off_sends_no_subscription_request(sim: FeishuSimulator, drive: dict[str, str]) -> None:
    run = run_pipeline(source(drive["root"], events=False))
    assert run.status == "success" and "subscriptions" not in run.counts
    assert sim.counters["subscribe_requests"] == 0 and sim.events.subscribed == {}


def test_a_refused_file_is_counted_not_fatal_and_not_retried_every_run(
    sim: FeishuSimulator, drive: dict[str, str]
) -> None:
    sim.events.refuse_subscribe.add(drive["sheet"])
    first = run_pipeline(source(drive["root"]))
    assert first.status == "success"
    subs = first.counts["subscriptions"]
    assert (subs["subscribed"], subs["failed"], subs["errors"]) == (6, 1, {"FeishuPermissionError": 1})
    second = run_pipeline(source(drive["root"]))
    assert second.counts["subscriptions"]["requests"] == 0  # waits for the re-check interval


def test_recheck_renews_a_lapsed_subscription_and_retries_failed_ones(
    sim: FeishuSimulator, client: FeishuClient, store: SubscriptionStore
) -> None:
    folder = sim.add_folder("根")
    kept, lapsed, refused = (sim.add("docx", f"d{i}", folder, "x") for i in range(3))
    sim.events.refuse_subscribe.add(refused)
    indexed = {kept: "docx", lapsed: "docx", refused: "docx"}
    counts = SubscriptionKeeper(client, store, "feishu:t").sync(indexed, [folder])
    assert (counts.subscribed, counts.failed) == (3, 1)
    del sim.events.subscribed[lapsed]  # dropped at the service (e.g. the app lost access once)
    sim.events.refuse_subscribe.clear()
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=8)
    counts = SubscriptionKeeper(client, store, "feishu:t", now=later).sync(indexed, [folder])
    assert (counts.checked, counts.renewed, counts.subscribed, counts.failed) == (2, 1, 1, 0)
    assert set(sim.events.subscribed) == {kept, lapsed, refused, folder}


def test_the_request_cap_defers_the_rest_to_the_next_run(
    sim: FeishuSimulator, client: FeishuClient, store: SubscriptionStore
) -> None:
    docs = {sim.add("docx", f"d{i}", "", "x"): "docx" for i in range(5)}
    first = SubscriptionKeeper(client, store, "feishu:t", max_requests=3).sync(docs, [])
    assert (first.subscribed, first.deferred, first.requests) == (3, 2, 3)
    second = SubscriptionKeeper(client, store, "feishu:t", max_requests=3).sync(docs, [])
    assert (second.subscribed, second.deferred, second.active) == (2, 0, 5)


def test_subscribe_routes_check_file_type_and_event_type(sim: FeishuSimulator, client: FeishuClient) -> None:
    from plugins.connectors.feishu.errors import FeishuNotFoundError, FeishuParamError

    doc, folder = sim.add("docx", "d", "", "x"), sim.add_folder("f")
    subscribe(client, doc, "docx")
    subscribe(client, folder, "folder")  # sends event_type=file.created_in_folder_v1
    assert is_subscribed(client, doc, "docx") and sim.events.subscribed == {doc: "docx", folder: "folder"}
    with pytest.raises(FeishuParamError):
        subscribe(client, doc, "wiki")
    with pytest.raises(FeishuNotFoundError):
        subscribe(client, "doxcnMissing0000000000000", "docx")
    response = client._http.post(
        f"/drive/v1/files/{doc}/subscribe",
        params={"file_type": "docx", "event_type": "file.created_in_folder_v1"},
        headers={"Authorization": f"Bearer {client.tokens.get()}"},
    )
    assert response.status_code == 400  # a file subscription takes no event_type


def test_the_source_page_shows_the_subscriptions_held(
    sim: FeishuSimulator, drive: dict[str, str], tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx

    from plugins.tributary_airflow.ui import create_app
    from tests.support.airflow import write_sources
    from tests.support.server import serve_asgi

    config = source(drive["root"])
    sim.events.refuse_subscribe.add(drive["md"])
    run_pipeline(config)
    entry = config.model_dump(mode="json", include={"kind", "name", "conn_id", "options", "batch_size", "events"})
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "sources.yaml", [entry])))
    with serve_asgi(create_app(require_auth=False)) as url:
        page = httpx.get(f"{url}/sources/feishu:drive", timeout=30).text
    assert '<span id="subscriptions-active">6</span>' in page
    assert '<span class="warning" id="subscriptions-failing">1 refused</span>' in page
    assert "6 subscribed, 0 unsubscribed, 0 renewed, 1 failed" in page
