"""Run outcomes that tell the truth (issue 34, points 1 and 7), over real runs of real sources.

Every run closes as ``success``, ``partial`` (some items failed or the source reported errors;
the rest committed) or ``failed`` (nothing reached: the site is down, the listing failed, every
fetch failed), with its reasons counted in the run record (``counts.reasons``) and one line saying
why (``counts.outcome_note``, also the run's ``error``). A forced re-sync of an unchanged page is
``unchanged`` (forced), and a dry run uses a real run's words with "would".

The web sources run against a small HTTP server on 127.0.0.1 whose answers each test sets, with
retries off, so an unreachable or failing page costs one request, not a back-off.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from include.config import SourceConfig
from include.index import open_index
from include.stores import open_state_store
from plugins.engine import get_source, run_pipeline
from tests.support.airflow import write_sources
from tests.support.finished_run import task_context


class Site:
    """A web site on 127.0.0.1 whose pages (path -> (status, html)) a test changes between runs."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[int, str]] = {}
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = site.pages.get(self.path, (404, "not found"))
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if self.path.endswith(".txt") else "text/html")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def _page(title: str, *links: str) -> str:
    anchors = "".join(f'<p><a href="{link}">{link}</a></p>' for link in links)
    return f"<html><head><title>{title}</title></head><body><h1>{title}</h1><p>About {title} and weirs.</p>{anchors}</body></html>"


@pytest.fixture
def site(tributary_home: Path) -> Iterator[Site]:
    served = Site()
    served.pages = {
        "/robots.txt": (200, "User-agent: *\nAllow: /\n"),
        "/": (200, _page("Home", "a.html", "b.html")),
        "/a.html": (200, _page("Locks", "/")),
        "/b.html": (200, _page("Weirs", "/")),
    }
    yield served
    served.close()


def _web(url: str) -> SourceConfig:
    options = {"seeds": [url], "delay_seconds": 0, "allowlist": ["127.0.0.1"], "use_sitemaps": False}
    return SourceConfig.model_validate(
        {"kind": "web", "name": "outcomes", "options": {**options, "retries": 0, "backoff_seconds": 0}}
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(source: SourceConfig, **params: Any) -> dict[str, Any]:
    """Sync once; the run's record as the run log keeps it (status, counts, error)."""
    summary = run_pipeline(source, params)
    store = open_state_store()
    try:
        run = store.get_run(summary.run_id, source.source_id)
        assert run is not None
        run["items"] = {i["item_key"].rsplit("/", 1)[-1]: i for i in store.run_items(summary.run_id)}
        return run
    finally:
        store.close()


def test_an_unreachable_site_fails_with_its_reasons(tributary_home: Path) -> None:
    run = _run(_web(f"http://127.0.0.1:{_closed_port()}/"))
    counts = run["counts"]
    assert run["status"] == counts["outcome"] == "failed"  # before: "success", every count 0
    assert counts["reasons"] == {"connect": 1, "robots_unreachable": 1}
    assert "nothing was reached" in counts["outcome_note"] and run["error"] == counts["outcome_note"]


def test_a_stopped_site_that_has_items_fails_and_deletes_nothing(site: Site) -> None:
    source = _web(site.url)
    assert _run(source)["status"] == "success"
    indexed = open_index(source.index).count()
    site.close()
    run = _run(source)
    assert run["status"] == "failed" and run["counts"]["listing_complete"] is False
    assert run["counts"]["reasons"].get("robots_unreachable") == 1
    assert open_index(source.index).count() == indexed  # an incomplete listing deletes nothing


def test_a_listing_error_fails_with_the_error_counted(tributary_home: Path, tmp_path: Path) -> None:
    root = tmp_path / "gone"  # the files source's root is not there: its listing raises
    with pytest.raises(FileNotFoundError):
        run_pipeline(SourceConfig(kind="files", name="outcomes", options={"root": str(root)}))
    run = open_state_store().runs("files:outcomes", limit=1)[0]
    assert run["status"] == "failed" and run["counts"]["reasons"] == {"error:FileNotFoundError": 1}


def test_robots_answering_503_fails_the_listing(site: Site) -> None:
    site.pages["/robots.txt"] = (503, "busy")
    run = _run(_web(site.url))
    assert run["status"] == "failed" and run["counts"]["reasons"]["robots_unreachable"] == 1


def test_every_fetch_failing_fails_the_run_and_keeps_the_index(site: Site) -> None:
    source = _web(site.url)
    assert _run(source)["counts"]["new"] == 3
    indexed = open_index(source.index).count()
    for path in ("/", "/a.html", "/b.html"):
        site.pages[path] = (500, "boom")
    run = _run(source)
    assert run["status"] == "failed" and run["counts"]["failed"] >= 1
    assert run["counts"]["reasons"] == {"fetch:http_500": run["counts"]["failed"]}
    assert run["counts"]["outcome_note"].startswith(f"all {run['counts']['failed']} items failed")
    assert open_index(source.index).count() == indexed


def test_some_fetches_failing_is_partial(site: Site) -> None:
    site.pages["/b.html"] = (500, "boom")
    run = _run(_web(site.url))
    counts = run["counts"]
    assert run["status"] == "partial" and (counts["new"], counts["failed"]) == (2, 1)
    # the crawler's own http_500 and the item's fetch:http_500 are one failure, counted once
    assert counts["reasons"] == {"fetch:http_500": 1}
    assert counts["outcome_note"].startswith("2 items synced, 1 failed or skipped for errors")


def test_a_clean_run_is_a_success_without_reasons(site: Site) -> None:
    run = _run(_web(site.url))
    assert (run["status"], run["counts"]["reasons"], run["error"]) == ("success", {}, None)


def test_a_forced_resync_of_an_unchanged_page_is_unchanged_forced(site: Site) -> None:
    source = _web(site.url)
    _run(source)
    run = _run(source, only_keys=[site.url + "a.html"])
    row, counts = run["items"]["a.html"], run["counts"]
    assert row["action"] == "unchanged" and "forced" in row["reason"]  # before: changed / forced re-processing
    assert (counts["changed"], counts["unchanged"], counts["unchanged_forced"]) == (0, 1, 1)
    assert row["chunks_kept"] and not row["chunks_added"] and not row["chunks_removed"]
    site.pages["/a.html"] = (200, _page("Locks and sluices", "/"))
    changed = _run(source, only_keys=[site.url + "a.html"])
    assert changed["items"]["a.html"]["action"] == "changed" and changed["counts"]["unchanged_forced"] == 0


def test_a_dry_run_uses_the_words_of_a_real_run(site: Site) -> None:
    source = _web(site.url)
    _run(source)
    run = _run(source, dry_run=True, full_resync=True)
    actions = {key: row["action"] for key, row in run["items"].items()}
    assert set(actions.values()) == {"changed"}  # before: every indexed page "new"
    assert all(row["reason"].startswith("dry run: would") for row in run["items"].values())
    counts = run["counts"]
    assert (counts["would_add"], counts["would_update"], counts["new"]) == (0, 3, 0)
    assert run["status"] == "success" and open_index(source.index).count() > 0


def test_a_failed_run_fails_the_airflow_summary_task_even_when_retried(
    tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from plugins.tributary_airflow.operators.sync import RunFailedError, RunSummaryOperator

    spec = {
        "kind": "web",
        "name": "down",
        "schedule": None,
        "options": _web(f"http://127.0.0.1:{_closed_port()}/").options,
    }
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "sources.yaml", [spec])))
    run_id = "manual__2026-12-05T08:00:00+00:00"
    summary = run_pipeline(get_source("web:down"), run_id=run_id)
    assert summary.counts["outcome"] == "failed"
    # the retried summary task finds the run closed: it must still fail, or the DAG run turns green
    operator = RunSummaryOperator(task_id="summary", source="web:down", counts=summary.counts)
    with pytest.raises(RunFailedError, match="nothing was reached"):
        operator.execute(task_context(run_id))
    assert open_state_store().get_run(run_id, "web:down")["status"] == "failed"
