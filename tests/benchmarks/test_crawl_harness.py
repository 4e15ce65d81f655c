"""The crawl benchmark's harness: goals, URL agreement, the Scrapy command, and one real
``cli sync`` pair (crawl only, then full sync and a no-change resync) against nginx."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks._crawl_compare import agreement, judge_goals, relative_paths, settings_rows
from benchmarks._crawl_scrapy import SPIDER, _closing_stats, scrapy_command, scrapy_settings
from benchmarks._crawl_tributary import source_options, sources_yaml
from benchmarks.crawl import _Bench, _nginx
from tests.web.nginx import requires_nginx


def test_goals_are_judged_against_scrapys_first_crawl_rate() -> None:
    goals = judge_goals(scrapy_pps=20.0, crawl_pps=40.0, sync_pps=19.0, resync_pps=61.0, resync_share=0.013)
    verdicts = {g.name: g.met for g in goals}
    assert verdicts == {
        "full sync >= 1.0x Scrapy crawl": False,  # 0.95x
        "crawl only >= 2x Scrapy": True,  # exactly 2x counts
        "no-change resync bytes <= 1.3% of first sync": True,
        "no-change resync >= 3x Scrapy first crawl": True,
    }
    assert "0.95x" in goals[0].text() and "NOT met" in goals[0].text()


def test_url_sets_are_compared_after_one_canonicalisation() -> None:
    base = "http://127.0.0.1:1"
    ours = relative_paths([f"{base}/a.html", f"{base}/b.html#top"], base, lambda u: u.split("#")[0])
    theirs = relative_paths([f"{base}/a.html", f"{base}/c.html"], base, lambda u: u.split("#")[0])
    found = agreement(ours, theirs)
    assert (found.common, found.only_a, found.only_b) == (1, ["/b.html"], ["/c.html"])
    assert found.jaccard == pytest.approx(1 / 3)
    assert "1 only Tributary ['/b.html']" in found.text("Tributary", "Scrapy")


def test_scrapy_runs_a_standalone_spider_with_the_settings_on_its_command_line(tmp_path: Path) -> None:
    settings = scrapy_settings(tmp_path / "cache", 8)
    cmd = scrapy_command(tmp_path / "spider.py", tmp_path / "urls.jl", settings, "http://h", "/x/")
    at = cmd.index("runspider")  # after `scrapy` (or `python -m scrapy` where no script is installed)
    assert cmd[at + 1 : at + 4] == [str(tmp_path / "spider.py"), "-O", f"{tmp_path / 'urls.jl'}:jsonlines"]
    pairs = {cmd[i + 1] for i, arg in enumerate(cmd) if arg == "-s"}
    assert {"CONCURRENT_REQUESTS=8", "DOWNLOAD_DELAY=0", "ROBOTSTXT_OBEY=True", "AUTOTHROTTLE_ENABLED=False"} <= pairs
    assert "HTTPCACHE_POLICY=scrapy.extensions.httpcache.RFC2616Policy" in pairs
    assert "allow=/x/" in cmd
    # the spider file imports nothing from this repository
    compile(SPIDER, "spider.py", "exec")
    assert "plugins" not in SPIDER and "benchmarks" not in SPIDER


def test_scrapys_closing_stats_are_read_from_its_log() -> None:
    log = (
        "2026-12-02 INFO: Dumping Scrapy stats:\n{'downloader/request_count': 530,\n"
        " 'elapsed_time_seconds': 21.5,\n 'httpcache/hit': 12,\n 'log_count/INFO': 10}\n"
    )
    assert _closing_stats(log) == {
        "downloader/request_count": 530.0,
        "elapsed_time_seconds": 21.5,
        "httpcache/hit": 12.0,
    }


def test_both_crawlers_settings_are_shown_side_by_side() -> None:
    rows = settings_rows(scrapy_settings(Path("c"), 8), source_options("http://h", 8, ""))
    by = {r["concern"]: r for r in rows}
    assert by["pages in flight"] == {"concern": "pages in flight", "scrapy": "8", "tributary": "8"}
    assert by["delay between requests (s)"]["tributary"] == "0"
    assert by["robots.txt"]["tributary"] == "True"


def _site(root: Path) -> None:
    root.mkdir()
    (root / "index.html").write_text('<html><body><a href="a.html">a</a> <a href="b/c.html">c</a></body></html>')
    (root / "a.html").write_text("<html><body><h1>A</h1><p>alpha text</p><a href='./'>home</a></body></html>")
    (root / "b").mkdir()
    (root / "b" / "c.html").write_text("<html><body><h1>C</h1><p>gamma text</p></body></html>")


@requires_nginx
def test_crawl_only_indexes_nothing_and_a_resync_sends_only_validations(tmp_path: Path) -> None:
    _site(tmp_path / "site")
    with _nginx(tmp_path / "site", tmp_path / "nginx") as (server, switch):
        bench = _Bench(server, tmp_path / "work", include="")
        entry = json.loads(bench.sources.read_text())["sources"][0]
        assert entry["options"]["concurrency"] == 8 and entry["options"]["use_sitemaps"] is False
        crawl, crawl_done = bench.sync("crawl only", "home-dry", dry_run=True)
        assert crawl.pages == 3 and crawl_done.counts["chunks_written"] == 0
        assert bench.urls_of("home-dry", crawl_done.run_id) == {server.base + p for p in ("/", "/a.html", "/b/c.html")}
        sync, sync_done = bench.sync("full sync", "home", dry_run=False)
        assert sync.pages == 3 and sync_done.counts["chunks_written"] >= 3
        switch('add_header Cache-Control "no-cache";')
        resync, _ = bench.sync("resync", "home", False, sync.traffic.bytes_sent)
    assert resync.pages == 3 and resync.traffic.statuses.get(304) == 3
    assert resync.share is not None and 0 < resync.share < 1
    assert resync.row("site")["bytes_vs_first"].endswith("%")


def test_the_sources_file_is_one_web_source() -> None:
    parsed = json.loads(sources_yaml(source_options("http://h", 8, "/x/")))
    (entry,) = parsed["sources"]
    assert entry["kind"] == "web" and entry["options"]["include"] == ["/x/"]
    assert entry["options"]["redis_url"] == ""
