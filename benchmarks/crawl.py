"""Web crawler vs Scrapy on Python's HTML documentation (Debian ``python3-doc``) served by nginx.

Same machine, same nginx, same concurrency, zero delay, robots.txt obeyed by both. Measured in
one run:

- first crawl: pages fetched, wall time, pages/s, bytes the server sent (nginx access log);
- agreement of the URL sets both crawlers fetched (canonicalised the same way);
- no-change recrawl: Tributary with its stored validators (If-None-Match / If-Modified-Since);
  Scrapy with ``HTTPCACHE_POLICY = RFC2616Policy`` (its documented incremental mode). Measured
  twice: with nginx's default headers (no Cache-Control: RFC 2616 heuristics let Scrapy treat
  old files as fresh and skip the server entirely) and with ``Cache-Control: no-cache`` (every
  page must be revalidated, so both crawlers ask the server).

Run it in the benchmark environment, where Scrapy is installed::

    .venv-bench/bin/python -m benchmarks crawl [--quick]

Scrapy runs in a child process (a Twisted reactor cannot be restarted); wall time is Scrapy's
own ``elapsed_time_seconds`` stat, ours is the time of ``discover()``, both excluding start-up.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DOCS = Path("/usr/share/doc/python3-doc/html")
CONCURRENCY = 8
QUICK_PATTERN = r"/(tutorial|howto)/"


def _tributary_crawl(base: str, stage_dir: Path, cache_path: Path, known: dict | None, quick: bool) -> dict[str, Any]:
    from include.config import SourceConfig
    from include.staging import StagingArea
    from plugins.connectors.base import DiscoveryRequest
    from plugins.connectors.web.connector import WebConnector

    options: dict[str, Any] = {
        "seeds": [base + "/"],
        "delay_seconds": 0,
        "concurrency": CONCURRENCY,
        "allowlist": ["127.0.0.1"],
        "max_pages": 100_000,
        "use_sitemaps": False,
        "cache_path": str(cache_path),
        "redis_url": "",
        "retries": 1,
    }
    if quick:
        options["include"] = [QUICK_PATTERN]
    stage = StagingArea.at(stage_dir).stage_raw  # what the engine hands the connector
    connector = WebConnector(SourceConfig(kind="web", name="pydocs", options=options))
    start = time.perf_counter()
    found = connector.discover(DiscoveryRequest(known=known or {}, stage=stage))
    wall = time.perf_counter() - start
    fetched = {c.item_key for c in found.changes if c.kind.value in ("new", "changed")}
    return {
        "wall": wall,
        "fetched": fetched,
        "alive": set(found.all_keys or ()),
        "known": {c.item_key: c.version for c in found.changes if c.kind.value != "deleted"},
        "stats": found.stats,
    }


def _scrapy_crawl(base: str, cache_dir: Path, quick: bool) -> dict[str, Any]:
    args = {"base": base, "cache_dir": str(cache_dir), "quick": quick}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.crawl", "--scrapy-child", json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"scrapy child failed: {proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "wall": out["elapsed"],
        "scrapy_elapsed": out["scrapy_elapsed"],
        "fetched": set(out["urls"]),
        "stats": out["stats"],
    }


def _scrapy_child(args: dict[str, Any]) -> None:
    """Runs in the child process: one Scrapy crawl, prints JSON with URLs and stats."""
    from scrapy import signals
    from scrapy.crawler import CrawlerProcess
    from scrapy.linkextractors import LinkExtractor
    from scrapy.spiders import CrawlSpider, Rule

    from plugins.connectors.web.urls import canonicalize

    base, quick = args["base"], args["quick"]
    urls: list[str] = []
    allow = (QUICK_PATTERN,) if quick else ()

    class DocsSpider(CrawlSpider):
        name = "pydocs"
        allowed_domains = ["127.0.0.1"]  # noqa: RUF012 - Scrapy reads class attributes
        start_urls = [base + "/"]  # noqa: RUF012
        rules = (Rule(LinkExtractor(allow=allow), callback="parse_page", follow=True),)

        def parse_start_url(self, response):  # type: ignore[no-untyped-def]
            return self.parse_page(response)

        def parse_page(self, response):  # type: ignore[no-untyped-def]
            if response.status == 200:
                urls.append(canonicalize(response.url))
            return []

    settings = {
        "LOG_LEVEL": "ERROR",
        "ROBOTSTXT_OBEY": True,
        "CONCURRENT_REQUESTS": CONCURRENCY,
        "CONCURRENT_REQUESTS_PER_DOMAIN": CONCURRENCY,
        "DOWNLOAD_DELAY": 0,
        "RANDOMIZE_DOWNLOAD_DELAY": False,
        "AUTOTHROTTLE_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "HTTPCACHE_ENABLED": True,
        "HTTPCACHE_POLICY": "scrapy.extensions.httpcache.RFC2616Policy",
        "HTTPCACHE_DIR": args["cache_dir"],
        "USER_AGENT": "scrapy-benchmark",
        "REQUEST_FINGERPRINTER_IMPLEMENTATION": "2.7",
    }
    process = CrawlerProcess(settings)
    crawler = process.create_crawler(DocsSpider)
    marks: dict[str, float] = {}
    # Crawl time = spider opened -> first idle (no request left), like our discover(); Scrapy's
    # own elapsed_time_seconds adds engine start-up and shutdown on top.

    def opened(spider: Any) -> None:
        marks.setdefault("opened", time.perf_counter())

    def idle(spider: Any) -> None:
        marks.setdefault("idle", time.perf_counter())

    # Scrapy keeps weak references to handlers: these named functions live until start() returns.
    crawler.signals.connect(opened, signals.spider_opened)
    crawler.signals.connect(idle, signals.spider_idle)
    process.crawl(crawler)
    process.start()
    stats = crawler.stats.get_stats()
    print(
        json.dumps(
            {
                "elapsed": marks["idle"] - marks["opened"],
                "scrapy_elapsed": stats.get("elapsed_time_seconds"),
                "urls": sorted(set(urls)),
                "stats": {k: str(v) for k, v in stats.items()},
            }
        )
    )


def _server_bytes(server: Any, agent_prefix: str) -> tuple[int, int, dict[int, int]]:
    entries = [e for e in server.access_log() if e.user_agent.startswith(agent_prefix)]
    statuses: dict[int, int] = {}
    for e in entries:
        statuses[e.status] = statuses.get(e.status, 0) + 1
    return sum(e.bytes_sent for e in entries), len(entries), statuses


def run(quick: bool = False) -> dict[str, Any]:
    from tests.web.nginx import nginx_binary, serve_nginx

    if nginx_binary() is None:
        raise RuntimeError("nginx is required: apt-get install nginx-light")
    if not DOCS.exists():
        raise RuntimeError("Python's HTML docs are required: apt-get install python3-doc")
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    work = Path(tempfile.mkdtemp(prefix="bench-crawl-"))
    try:
        variants = (
            ("nginx defaults", ""),
            ("Cache-Control: max-age=0", 'add_header Cache-Control "max-age=0";'),
            ("Cache-Control: no-cache", 'add_header Cache-Control "no-cache";'),
        )
        for number, (variant, extra) in enumerate(variants):
            with serve_nginx(DOCS.resolve(), work / f"nginx-{number}", extra=extra) as server:
                tag = f"v{number}"
                # --- first crawls
                server.clear_log()
                ours = _tributary_crawl(server.base, work / f"stage-{tag}-1", work / f"cache-{tag}.sqlite", None, quick)
                ours_bytes, ours_requests, ours_status = _server_bytes(server, "Tributary")
                server.clear_log()
                scrapy = _scrapy_crawl(server.base, work / f"scrapy-cache-{tag}", quick)
                scrapy_bytes, scrapy_requests, scrapy_status = _server_bytes(server, "scrapy-benchmark")
                ours_urls = {u.removeprefix(server.base) for u in ours["fetched"]}
                scrapy_urls = {u.removeprefix(server.base) for u in scrapy["fetched"]}
                union = ours_urls | scrapy_urls
                agreement = len(ours_urls & scrapy_urls) / len(union) if union else 1.0
                if not rows:
                    rows.append(
                        {
                            "phase": "first crawl",
                            "crawler": "tributary",
                            "pages": len(ours_urls),
                            "requests": ours_requests,
                            "wall_s": round(ours["wall"], 2),
                            "pages_per_s": round(len(ours_urls) / ours["wall"], 1),
                            "server_bytes": ours_bytes,
                            "statuses": json.dumps(ours_status),
                        }
                    )
                    rows.append(
                        {
                            "phase": "first crawl",
                            "crawler": "scrapy",
                            "pages": len(scrapy_urls),
                            "requests": scrapy_requests,
                            "wall_s": round(scrapy["wall"], 2),
                            "pages_per_s": round(len(scrapy_urls) / scrapy["wall"], 1),
                            "server_bytes": scrapy_bytes,
                            "statuses": json.dumps(scrapy_status),
                        }
                    )
                    notes.append(
                        f"Scrapy's own elapsed_time_seconds for that crawl (start-up and shutdown included): "
                        f"{scrapy['scrapy_elapsed']:.2f} s. "
                        f"URL-set agreement (Jaccard) {agreement:.4f}: {len(ours_urls & scrapy_urls)} common, "
                        f"{len(ours_urls - scrapy_urls)} only Tributary {sorted(ours_urls - scrapy_urls)[:5]}, "
                        f"{len(scrapy_urls - ours_urls)} only Scrapy {sorted(scrapy_urls - ours_urls)[:5]}."
                    )
                first_ours_bytes, first_scrapy_bytes = ours_bytes, scrapy_bytes
                # --- no-change recrawls
                server.clear_log()
                again = _tributary_crawl(
                    server.base, work / f"stage-{tag}-2", work / f"cache-{tag}.sqlite", ours["known"], quick
                )
                re_bytes, re_requests, re_status = _server_bytes(server, "Tributary")
                server.clear_log()
                scrapy_again = _scrapy_crawl(server.base, work / f"scrapy-cache-{tag}", quick)
                sre_bytes, sre_requests, sre_status = _server_bytes(server, "scrapy-benchmark")
                for crawler, wall, sent, requests, status, first_bytes, covered in (
                    (
                        "tributary",
                        again["wall"],
                        re_bytes,
                        re_requests,
                        re_status,
                        first_ours_bytes,
                        len(again["alive"]),
                    ),
                    (
                        "scrapy",
                        scrapy_again["wall"],
                        sre_bytes,
                        sre_requests,
                        sre_status,
                        first_scrapy_bytes,
                        len(scrapy_again["fetched"]),
                    ),
                ):
                    rows.append(
                        {
                            "phase": f"no-change recrawl ({variant})",
                            "crawler": crawler,
                            "pages": covered,
                            "requests": requests,
                            "wall_s": round(wall, 2),
                            "pages_per_s": round(covered / wall, 1) if wall else "",
                            "server_bytes": sent,
                            "bytes_vs_first": f"{100 * sent / first_bytes:.2f}%" if first_bytes else "",
                            "statuses": json.dumps(status),
                        }
                    )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    first = {r["crawler"]: r for r in rows if r["phase"] == "first crawl"}
    summary = (
        f"{'Quick run (tutorial + howto only). ' if quick else ''}Concurrency {CONCURRENCY}, delay 0, robots.txt "
        f"obeyed, nginx on 127.0.0.1. First crawl: Tributary {first['tributary']['pages_per_s']} pages/s vs Scrapy "
        f"{first['scrapy']['pages_per_s']} pages/s. " + " ".join(notes) + " Recrawl bytes are what nginx sent "
        "(headers included) as a share of the same crawler's first crawl. 'pages' on a recrawl = pages the "
        "crawl confirmed alive (Tributary) / responses handed to the spider (Scrapy, from its cache or the server)."
    )
    return {
        "title": "Web crawl: Tributary vs Scrapy (Python docs)",
        "peer": "Scrapy 2.19.0",
        "rows": rows,
        "summary": summary,
    }


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--scrapy-child":
        _scrapy_child(json.loads(sys.argv[2]))
    else:
        print(json.dumps(run(quick="--quick" in sys.argv), indent=2, default=str))
