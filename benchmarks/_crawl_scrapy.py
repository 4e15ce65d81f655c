"""Scrapy the way its documentation runs it: a standalone spider file and ``scrapy runspider``.

The spider is written to a temporary directory and run from there (no project, no
``scrapy.cfg``, nothing of this repository on its path), with the settings on the command line
(``-s``) and the pages it saw written as JSON lines by Scrapy's feed exporter (``-O``). The
parent times the whole process from outside; URLs are canonicalised in the parent.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks._crawl_proc import timed_run

__all__ = ["SPIDER", "USER_AGENT", "ScrapyRun", "run_scrapy", "scrapy_command", "scrapy_settings", "scrapy_version"]

USER_AGENT = "scrapy-benchmark"

# A plain CrawlSpider as in Scrapy's tutorial: follow every link on the host (optionally only
# those matching ``allow``), emit one item per page the spider receives.
SPIDER = """\
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class DocsSpider(CrawlSpider):
    name = "docs"

    def __init__(self, base="", allow="", *args, **kwargs):
        self.start_urls = [base.rstrip("/") + "/"]
        self.allowed_domains = ["127.0.0.1"]
        self.rules = (Rule(LinkExtractor(allow=(allow,) if allow else ()), callback="parse_page", follow=True),)
        super().__init__(*args, **kwargs)

    def parse_start_url(self, response):
        return self.parse_page(response)

    def parse_page(self, response):
        yield {"url": response.url, "status": response.status, "cached": "cached" in response.flags}
"""


def scrapy_settings(cache_dir: Path, concurrency: int) -> dict[str, str]:
    """The ``-s`` settings: the same politeness and concurrency as the Tributary source."""
    return {
        "CONCURRENT_REQUESTS": str(concurrency),
        "CONCURRENT_REQUESTS_PER_DOMAIN": str(concurrency),
        "DOWNLOAD_DELAY": "0",
        "RANDOMIZE_DOWNLOAD_DELAY": "False",
        "AUTOTHROTTLE_ENABLED": "False",
        "ROBOTSTXT_OBEY": "True",
        "HTTPCACHE_ENABLED": "True",
        "HTTPCACHE_POLICY": "scrapy.extensions.httpcache.RFC2616Policy",
        "HTTPCACHE_DIR": str(cache_dir),
        "USER_AGENT": USER_AGENT,
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": "False",
    }


def _scrapy_executable() -> list[str]:
    """The ``scrapy`` console script next to this interpreter (the benchmark venv's)."""
    script = Path(sys.executable).with_name("scrapy")
    if script.exists():
        return [str(script)]
    found = shutil.which("scrapy")
    return [found] if found else [sys.executable, "-m", "scrapy"]


def scrapy_command(spider: Path, feed: Path, settings: dict[str, str], base: str, allow: str) -> list[str]:
    cmd = [*_scrapy_executable(), "runspider", str(spider), "-O", f"{feed}:jsonlines", "-a", f"base={base}"]
    if allow:
        cmd += ["-a", f"allow={allow}"]
    for key, value in settings.items():
        cmd += ["-s", f"{key}={value}"]
    return cmd


@dataclass(frozen=True, slots=True)
class ScrapyRun:
    wall: float  # whole process, start-up and shutdown included
    cpu: float  # CPU seconds the process used
    urls: frozenset[str]  # as Scrapy saw them (not canonicalised)
    cached: int  # pages served from the HTTP cache without a fresh download
    stats: dict[str, float]  # from Scrapy's closing stats dump, the numeric ones we report


def _feed_rows(feed: Path) -> list[dict[str, object]]:
    if not feed.exists():
        return []
    return [json.loads(line) for line in feed.read_text(encoding="utf-8").splitlines() if line.strip()]


def _closing_stats(log: str) -> dict[str, float]:
    """A few numbers from the 'Dumping Scrapy stats' block Scrapy logs at INFO on close."""
    wanted = ("elapsed_time_seconds", "downloader/request_count", "httpcache/hit", "httpcache/miss")
    stats: dict[str, float] = {}
    for line in log.splitlines():
        for key in wanted:
            prefix = f"'{key}': "
            if prefix in line:
                value = line.split(prefix, 1)[1].rstrip(",} ")
                try:
                    stats[key] = float(value)
                except ValueError:
                    continue
    return stats


def run_scrapy(workdir: Path, cache_dir: Path, base: str, allow: str, concurrency: int) -> ScrapyRun:
    """One ``scrapy runspider`` process, timed from outside; its log is kept in ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    spider = workdir / "spider.py"
    spider.write_text(SPIDER, encoding="utf-8")
    feed = workdir / "urls.jl"
    cmd = scrapy_command(spider, feed, scrapy_settings(cache_dir, concurrency), base, allow)
    timed = timed_run(cmd, cwd=workdir, timeout=1800)
    proc = timed.proc
    (workdir / "scrapy.log").write_text(proc.stderr, encoding="utf-8")
    if proc.returncode != 0:
        raise RuntimeError(f"scrapy runspider failed ({proc.returncode}): {proc.stderr[-3000:]}")
    rows = _feed_rows(feed)
    feed.unlink(missing_ok=True)  # -O overwrites anyway; the next run must not read this one's
    return ScrapyRun(
        wall=timed.wall,
        cpu=timed.cpu,
        urls=frozenset(str(r["url"]) for r in rows),
        cached=sum(1 for r in rows if r.get("cached")),
        stats=_closing_stats(proc.stderr),
    )


def scrapy_version(workdir: Path) -> str:
    """``scrapy version`` (also the benchmark's untimed warm-up of Scrapy's start-up)."""
    out = timed_run([*_scrapy_executable(), "version"], cwd=workdir, timeout=300).proc
    if out.returncode != 0:
        raise RuntimeError(f"scrapy is not runnable here: {out.stderr[-2000:]}")
    return out.stdout.strip()
