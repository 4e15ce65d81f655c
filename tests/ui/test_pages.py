"""Every audit page in real headless Chromium (Debian's ``chromium`` over the DevTools protocol),
served in process on 127.0.0.1 over a real run log: DOM assertions on what a person sees, each
page measured at a 1,280 px wide window (nothing may scroll sideways), and a screenshot per page
saved as an artifact (``$TRIBUTARY_ARTIFACTS`` or the test's tmp dir; never compared by pixel).

The run log: three runs of a ``files`` source (a first sync with one broken PDF, an edit that
replaces a chunk, a dry run) and the record a web sync leaves when its site is down (what the
web connector writes: ``errors: {connect}``, ``robots: unreachable``). The Airflow-backed actions
(sync now, full resync, re-sync failed, pause) are ``test_source_actions.py``'s.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from include.config import SourceConfig
from include.stores import open_state_store
from plugins.engine import run_pipeline
from plugins.tributary_airflow.ui import create_app
from tests.support.airflow import write_sources
from tests.support.server import serve_asgi
from tests.ui.cdp import Browser, chromium_binary

SOURCE = "files:ops"
WIDTH = 1280
FAQ = "# Frequently asked questions\n\n## Access\n\nProduction access is approved by the team lead.\n"
FAQ_EDITED = "# Frequently asked questions\n\n## Access\n\nProduction access is approved by the on-call manager.\n"
# the record a web sync of a stopped site leaves (plugins/connectors/web/crawler.py's stats)
DOWN_COUNTS = {
    "new": 0,
    "changed": 0,
    "failed": 0,
    "fetched": 0,
    "listing_complete": False,
    "source_stats": {"pages": 0, "errors": {"connect": 1}, "robots": {"http://127.0.0.1:9": "unreachable"}},
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("pages")
    docs = tmp / "docs"
    docs.mkdir()
    (docs / "faq.md").write_text(FAQ, encoding="utf-8")
    (docs / "good.md").write_text("# Good\n\nA healthy document about salmon.\n", encoding="utf-8")
    (docs / "bad.pdf").write_bytes(b"%PDF-1.7\n not really a pdf")  # fails to parse, every run
    entry = {"kind": "files", "name": "ops", "options": {"root": str(docs)}, "schedule": "@daily"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRIBUTARY_HOME", str(tmp / "tributary"))
        for var in ("TRIBUTARY_STATE_URL", "TRIBUTARY_INDEX_PATH", "TRIBUTARY_STAGING_DIR", "TRIBUTARY_REDIS_URL"):
            mp.delenv(var, raising=False)
        mp.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp / "sources.yaml", [entry])))
        config = SourceConfig(**entry)
        first = run_pipeline(config, run_id="first")
        store = open_state_store()
        try:
            old_chunk = store.get_item(SOURCE, "faq.md").chunk_ids[0]
            (docs / "faq.md").write_text(FAQ_EDITED, encoding="utf-8")
            second = run_pipeline(config, run_id="second")
            store.start_run("web-down", "web:demo", run_type="manual", params={"max_items": None})
            store.finish_run("web-down", "success", DOWN_COUNTS, source="web:demo")
        finally:
            store.close()
        artifacts = Path(os.environ.get("TRIBUTARY_ARTIFACTS") or tmp / "artifacts")
        with serve_asgi(create_app(require_auth=False)) as url:
            yield {"url": url, "first": first, "second": second, "old_chunk": old_chunk, "artifacts": artifacts}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    b = Browser(binary, width=WIDTH, height=900)
    try:
        yield b
    finally:
        b.close()


def _open(browser: Browser, site: dict[str, Any], path: str, name: str) -> str:
    """Open a page, check it fits 1,280 px, save its screenshot; its visible text."""
    browser.goto(site["url"] + path)
    width = browser.eval("document.documentElement.scrollWidth")
    browser.screenshot(site["artifacts"] / f"page-{name}.png")
    assert width <= WIDTH, f"{path} is {width} px wide at a {WIDTH} px window"
    return browser.text()


def _texts(browser: Browser, selector: str) -> list[str]:
    return browser.eval(f"[...document.querySelectorAll({selector!r})].map(e => e.innerText.trim())")


def test_sources_list_shows_freshness_totals_and_failures(site: dict[str, Any], browser: Browser) -> None:
    text = _open(browser, site, "/", "sources")
    [row] = [r for r in _texts(browser, "#sources tr") if r.startswith(SOURCE)]
    assert "on time" in row and "@daily" in row and "partial" in row  # bad.pdf fails every run
    cells = browser.eval("[...document.querySelectorAll('#sources tr')[1].cells].map(c => c.innerText.trim())")
    assert cells[4:7] == ["2", "2", "1"], cells  # documents, chunks, failing (bad.pdf)
    assert "web:demo" in text and "no longer configured" in text  # history of a retired source
    # every run row links the diff with the run before it
    # (by the later run alone: the link must not match an older run's id before that run's own link)
    browser.eval("document.querySelector('a.diff-previous[href*=\"b=second\"]').click()")
    browser.wait_for("location.pathname === '/diff' && document.readyState === 'complete'")
    assert browser.eval("document.querySelector('h1').innerText") == "Diff first → second"


def test_source_page_shows_health_trend_and_actions(site: dict[str, Any], browser: Browser) -> None:
    text = _open(browser, site, f"/sources/{quote(SOURCE)}", "source")
    assert browser.eval("document.querySelector('#documents').innerText") == "2 documents"
    assert browser.eval("document.querySelector('#failing').innerText") == "1"
    assert browser.eval("document.querySelectorAll('#trend svg').length") == 3
    # one bar per run in the item chart, its tooltip naming the run
    tips = browser.eval(
        "[...document.querySelectorAll('#trend svg')[0].querySelectorAll('title')].map(t => t.textContent)"
    )
    assert any(t.startswith("first") for t in tips) and any(t.startswith("second") for t in tips)
    assert {"Sync now", "Full resync…", "Re-sync 1 failed item"} <= set(_texts(browser, "button, a.button"))
    # served outside Airflow: the DAG's state cannot be read, and the page says so instead of failing
    assert "Airflow's DAG sync_files_ops" in text


def test_full_resync_asks_first_naming_what_it_reprocesses(site: dict[str, Any], browser: Browser) -> None:
    _open(browser, site, f"/sources/{quote(SOURCE)}/confirm-full-resync", "confirm-full-resync")
    confirm = browser.eval("document.querySelector('#confirm-text').innerText")
    assert SOURCE in confirm and "every item" in confirm and "2 documents (2 chunks)" in confirm


def test_run_page_has_an_error_panel_tables_and_chunk_links(site: dict[str, Any], browser: Browser) -> None:
    text = _open(browser, site, "/runs/second?source=files%3Aops", "run")
    panel = browser.eval("document.querySelector('#errors').innerText")
    assert "parse:corrupt" in panel and "bad.pdf" in panel
    params = dict(r.split("\t") for r in _texts(browser, "#params tr"))
    assert params["full resync"] == "no" and params["only keys"] == "—"
    assert "chunks written" in browser.eval("document.querySelector('#counts').innerText")
    assert "{" not in browser.eval("document.querySelector('#counts').innerText")  # no JSON blob
    assert "no window: every item the listing found was considered" in text
    # the changed item's chunks: one added, one removed, each a link to its chunk page
    removed = browser.eval("[...document.querySelectorAll('a.chunk-removed')].map(a => a.href)")
    assert len(removed) == 1 and site["old_chunk"] in removed[0]
    assert browser.eval("document.querySelectorAll('a.chunk-added').length") == 1
    assert browser.eval("document.querySelector('#diff-previous').href").endswith(
        "diff?a=first&b=second&source=files%3Aops"
    )


def test_a_stopped_site_run_names_its_reasons(site: dict[str, Any], browser: Browser) -> None:
    _open(browser, site, "/runs/web-down?source=web%3Ademo", "run-web-down")
    rows = _texts(browser, "#errors tr")
    reasons = {r.split("\t")[0]: r.split("\t")[1] for r in rows[1:]}
    assert reasons == {"connect": "1", "robots_unreachable": "1", "listing_incomplete": "1"}, rows


def test_item_page_has_dates_durations_links(site: dict[str, Any], browser: Browser) -> None:
    _open(browser, site, "/items?source=files%3Aops&key=faq.md", "item")
    assert browser.eval("document.querySelector('#source-url').href").startswith("file://")
    assert browser.eval("document.querySelectorAll('#chunks a').length") == 1
    history = _texts(browser, "#history tr")[1:]
    assert len(history) == 2 and all(" UTC" in row and " ms" in row for row in history), history
    assert "{" not in "".join(history)


def test_chunk_page_has_place_neighbours_and_source(site: dict[str, Any], browser: Browser) -> None:
    store_chunk = site["second"]
    assert store_chunk.run_id == "second"
    _open(browser, site, "/items?source=files%3Aops&key=faq.md", "item-again")
    browser.eval("document.querySelector('#chunks a').click()")
    browser.wait_for("location.pathname.startsWith('/chunks/') && document.readyState === 'complete'")
    assert browser.eval("document.documentElement.scrollWidth") <= WIDTH
    browser.screenshot(site["artifacts"] / "page-chunk.png")
    assert browser.eval("document.querySelector('#heading-path').innerText") == "Frequently asked questions"
    assert browser.eval("document.querySelector('#position').innerText").startswith("chunk 1 of 1")
    assert "first" in browser.eval("document.querySelector('#neighbours').innerText")
    assert browser.eval("!!document.querySelector('#source-url')") and browser.eval(
        "!!document.querySelector('#stages')"
    )


def test_a_removed_chunk_names_the_run_that_removed_it(site: dict[str, Any], browser: Browser) -> None:
    text = _open(browser, site, f"/chunks/{site['old_chunk']}?source=files%3Aops", "chunk-removed")
    removed = browser.eval("document.querySelector('#removed').innerText")
    assert removed.startswith("Removed by run second on ") and "faq.md" in removed and "changed" in removed
    assert "Written by run\tfirst on " in text or "Written by run\nfirst on " in text, text
    assert "No chunk" not in text


def test_diff_shows_only_what_differs(site: dict[str, Any], browser: Browser) -> None:
    _open(browser, site, "/diff?a=first&b=second&source=files%3Aops", "diff")
    items = _texts(browser, "#item-diff tr")[1:]
    assert [r.split("\t")[0] for r in items] == ["faq.md", "good.md"], items  # bad.pdf failed alike
    deltas = dict((r.split("\t")[0], r.split("\t")[3]) for r in _texts(browser, "#counts-delta tr")[1:])
    assert deltas.get("new") == "-2" and deltas.get("changed") == "+1", deltas


def test_item_browser_filters_and_pages(site: dict[str, Any], browser: Browser) -> None:
    _open(browser, site, "/items?source=files%3Aops", "items")
    assert browser.eval("document.querySelector('#item-count').innerText") == "3 items"
    _open(browser, site, "/items?source=files%3Aops&failing=true", "items-failing")
    assert [r.split("\t")[0] for r in _texts(browser, "#item-list tr")[1:]] == ["bad.pdf"]
    _open(browser, site, "/items?source=files%3Aops&action=changed", "items-changed")
    assert [r.split("\t")[0].split("\n")[0] for r in _texts(browser, "#item-list tr")[1:]] == ["faq.md"]
    _open(browser, site, "/items?source=files%3Aops&parser=markdown&contains=oo", "items-parser")
    assert [r.split("\t")[0].split("\n")[0] for r in _texts(browser, "#item-list tr")[1:]] == ["good.md"]
    _open(browser, site, "/items?source=files%3Aops&changed_since=2999-01-01", "items-future")
    assert browser.eval("document.querySelector('#item-count').innerText") == "0 items"
    # two per page: the pager's next link leads to the third item
    _open(browser, site, "/items?source=files%3Aops&limit=2", "items-paged")
    browser.eval("document.querySelector('#next-page').click()")
    browser.wait_for("location.search.includes('page=2') && document.readyState === 'complete'")
    assert [r.split("\t")[0].split("\n")[0] for r in _texts(browser, "#item-list tr")[1:]] == ["good.md"]
    # each row links to its item page
    browser.eval("document.querySelector('#item-list a').click()")
    browser.wait_for("location.search.includes('key=good.md') && document.readyState === 'complete'")
    assert "Item good.md" in browser.text()


def test_search_page_highlights_labels_and_links(site: dict[str, Any], browser: Browser) -> None:
    _open(browser, site, "/search?q=production+access&source=files%3Aops", "search")
    marks = _texts(browser, "#hits td.snippet mark")
    assert {m.lower() for m in marks} == {"production", "access"}, marks
    [label] = _texts(browser, "#hits .hit-label")
    assert label.startswith("Frequently asked questions › Access") or label.startswith("Frequently asked questions")
    snippet = browser.eval("document.querySelector('#hits td.snippet').innerText")
    assert not snippet.startswith("Frequently asked questions"), snippet  # the title is not said twice
    assert browser.eval("document.querySelector('#hits a[href^=\"file://\"]').innerText").endswith("faq.md")
    assert browser.eval("document.querySelector('#hits td.score').innerText").startswith("BM25 ")
    # served without Airflow's auth there is no user: the page says the search was unrestricted
    assert (
        browser.eval("document.querySelector('#search-as').innerText")
        == "Searching unrestricted: every document, whatever its permissions"
    )
    # a hostile query is escaped before it is marked
    _open(browser, site, "/search?q=%3Cb%3Eaccess%3C%2Fb%3E&source=files%3Aops", "search-escaped")
    assert browser.eval("document.querySelectorAll('#hits td.snippet b').length") == 0


def test_filters_change_the_search(site: dict[str, Any], browser: Browser) -> None:
    _open(browser, site, "/search?q=access&source=files%3Aops&changed_since=2999-01-01", "search-future")
    assert "No hits." in browser.text()
    _open(browser, site, "/search?q=access&source=files%3Aops&changed_since=2000-01-01", "search-since")
    assert browser.eval("document.querySelectorAll('#hits tr').length") == 2


@pytest.mark.airflow
def test_unauthenticated_pages_go_to_the_login_and_the_api_stays_401(tributary_home: Path) -> None:
    """Without Airflow's session a browser's page request is sent to the login page; the JSON
    API (and any client not asking for HTML) keeps its 401 (``test_api_auth.py``)."""
    from airflow.api_fastapi.app import create_auth_manager

    from tests.support.airflow import ensure_airflow_db

    ensure_airflow_db()  # the validator looks revoked token ids up in the metadata DB
    create_auth_manager()  # the API server's, which says where its login page is
    with serve_asgi(create_app()) as url:
        page = httpx.get(f"{url}/sources/x?y=1", headers={"Accept": "text/html"}, follow_redirects=False)
        api = httpx.get(f"{url}/api/runs", headers={"Accept": "text/html"})
        scripted = httpx.get(f"{url}/runs/r1")
    assert page.status_code == 303 and page.headers["location"].startswith("/auth/")
    assert "login" in page.headers["location"] and "next=%2Fsources%2Fx%3Fy%3D1" in page.headers["location"]
    assert api.status_code == scripted.status_code == 401
