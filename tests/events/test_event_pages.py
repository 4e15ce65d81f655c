"""The operator's view of events (issue 37, points 3 and 5): the run page and ``cli run`` /
``cli runs`` say a run was started by events (which, how many items); the source page and
``cli sources`` say its events mode, last event and counts. Pages in real headless Chromium,
served in process over a real run log and event store."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from include.config import SourceConfig
from include.stores import open_state_store
from include.stores.events import EventHint, EventStore
from plugins.engine import run_pipeline
from plugins.engine.cli import main
from plugins.tributary_airflow.ui import create_app
from tests.support.airflow import write_sources
from tests.support.server import serve_asgi
from tests.ui.cdp import Browser, chromium_binary

SOURCE = "files:ops"
ON = {"kind": "files", "name": "ops", "schedule": "@daily", "events": {"mode": "callback", "debounce_seconds": 0}}
OFF = {"kind": "files", "name": "quiet", "schedule": "@daily"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("event_pages")
    docs, quiet = tmp / "docs", tmp / "quiet"
    docs.mkdir()
    quiet.mkdir()
    (docs / "faq.md").write_text("# FAQ\n\nAsk the team lead.\n", encoding="utf-8")
    (docs / "good.md").write_text("# Good\n\nSalmon.\n", encoding="utf-8")
    (quiet / "a.md").write_text("# A\n\nQuiet.\n", encoding="utf-8")
    entries = [{**ON, "options": {"root": str(docs)}}, {**OFF, "options": {"root": str(quiet)}}]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRIBUTARY_HOME", str(tmp / "tributary"))
        for var in ("TRIBUTARY_STATE_URL", "TRIBUTARY_INDEX_PATH", "TRIBUTARY_STAGING_DIR", "TRIBUTARY_REDIS_URL"):
            mp.delenv(var, raising=False)
        mp.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp / "sources.yaml", entries)))
        config = SourceConfig(**entries[0])
        run_pipeline(config, run_id="first")
        run_pipeline(SourceConfig(**entries[1]), run_id="quiet-first")
        (docs / "faq.md").write_text("# FAQ\n\nAsk the on-call manager.\n", encoding="utf-8")
        state = open_state_store()
        try:
            events = EventStore(state)
            hints = [
                EventHint("ev-1", "faq.md", "changed", "publish"),
                EventHint("ev-2", "faq.md", "changed", "update"),
            ]
            events.record(SOURCE, hints[:1])
            events.record(SOURCE, hints[1:])  # the newest
            events.record(SOURCE, hints[:1])  # a redelivery
            events.count(SOURCE, "refused:bad_secret", 2)
            batch = events.claim_due(SOURCE, "sync", debounce_s=0, lease_s=900)
            assert batch is not None
        finally:
            state.close()
        by_events = run_pipeline(config, run_id="by-events", event_batches=[batch.batch_id])
        artifacts = Path(os.environ.get("TRIBUTARY_ARTIFACTS") or tmp / "artifacts")
        with serve_asgi(create_app(require_auth=False)) as url:
            yield {"url": url, "run": by_events, "artifacts": artifacts}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    b = Browser(binary, width=1280, height=900)
    try:
        yield b
    finally:
        b.close()


def _text(browser: Browser, selector: str) -> str:
    return str(browser.eval(f"document.querySelector({selector!r})?.innerText ?? ''"))


def test_the_run_page_says_which_events_started_the_run(site: dict[str, Any], browser: Browser) -> None:
    browser.goto(f"{site['url']}/runs/by-events?source={quote(SOURCE)}")
    browser.screenshot(site["artifacts"] / "page-event-run.png")
    assert _text(browser, "#trigger") == "started by events: 2 events (ev-1, ev-2), 1 item — changed 1"
    assert "trigger" not in _text(browser, "#params")  # said once, in words
    assert site["run"].counts["changed"] == 1
    browser.goto(f"{site['url']}/runs/first?source={quote(SOURCE)}")
    assert _text(browser, "#trigger") == ""  # a run nobody's events started says nothing of events


def test_the_source_page_shows_events_mode_last_event_and_counts(site: dict[str, Any], browser: Browser) -> None:
    browser.goto(f"{site['url']}/sources/{quote(SOURCE)}")
    browser.screenshot(site["artifacts"] / "page-event-source.png")
    said = _text(browser, "#events")
    assert said.startswith("callback · last event ")
    assert _text(browser, "#last-event").startswith("update at ")  # the newest stored event
    counts = {n: _text(browser, f"#events-{n}") for n in ("received", "coalesced", "runs", "duplicates", "refused")}
    assert counts == {"received": "2", "coalesced": "2", "runs": "1", "duplicates": "1", "refused": "bad_secret 2"}
    browser.goto(f"{site['url']}/sources/{quote('files:quiet')}")
    assert _text(browser, "#events") == "off: polling only"


def test_the_cli_says_it_in_words_and_in_json(site: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "by-events", "--source", SOURCE]) == 0
    assert "  started by events: 2 events (ev-1, ev-2), 1 item — changed 1" in capsys.readouterr().out.splitlines()
    assert main(["runs", "--source", SOURCE]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.endswith("(events)") for line in lines[1:]] == [True, False]  # newest first
    assert main(["runs", "--source", SOURCE, "--json"]) == 0
    newest = json.loads(capsys.readouterr().out)[0]
    assert newest["trigger"]["type"] == "events" and sorted(newest["trigger"]["event_ids"]) == ["ev-1", "ev-2"]
    assert main(["sources", "--json"]) == 0
    rows = {r["source"]: r for r in json.loads(capsys.readouterr().out)}
    on = rows[SOURCE]["events"]
    assert (on["mode"], on["received"], on["coalesced"], on["runs_started"], on["duplicates"]) == (
        "callback",
        2,
        2,
        1,
        1,
    )
    assert on["refused"] == {"bad_secret": 2} and on["last_event_type"] == "update"
    assert rows["files:quiet"]["events"] == {"mode": "off"}
    assert main(["sources"]) == 0
    text = capsys.readouterr().out
    assert "events callback; last update at " in text and "refused bad_secret 2" in text and "events off" in text


def test_the_json_api_carries_the_trigger(site: dict[str, Any]) -> None:
    runs = httpx.get(f"{site['url']}/api/runs", params={"source": SOURCE}).json()
    assert [r["run_id"] for r in runs] == ["by-events", "first"]
    assert runs[0]["trigger"]["type"] == "events" and runs[0]["trigger"]["items"] == 1
    assert runs[1]["trigger"] is None
    one = httpx.get(f"{site['url']}/api/runs/by-events", params={"source": SOURCE}).json()
    assert one["run"]["params"]["trigger"]["event_ids"] == ["ev-1", "ev-2"]
