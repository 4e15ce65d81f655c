"""Pure helpers of the crawl benchmark: URL-set agreement, the goals' verdicts, the settings table."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Goal", "UrlAgreement", "agreement", "judge_goals", "relative_paths", "settings_rows"]


@dataclass(frozen=True, slots=True)
class UrlAgreement:
    common: int
    only_a: list[str]  # sorted
    only_b: list[str]

    @property
    def jaccard(self) -> float:
        union = self.common + len(self.only_a) + len(self.only_b)
        return self.common / union if union else 1.0

    def text(self, a: str, b: str, examples: int = 3) -> str:
        return (
            f"URL sets: Jaccard {self.jaccard:.4f}, {self.common} common, "
            f"{len(self.only_a)} only {a} {self.only_a[:examples]}, "
            f"{len(self.only_b)} only {b} {self.only_b[:examples]}"
        )


def relative_paths(urls: Iterable[str], base: str, canonical: Callable[[str], str]) -> set[str]:
    """The URLs canonicalised one way (the parent's, for both crawlers), minus the server's base."""
    return {canonical(u).removeprefix(base) for u in urls}


def agreement(a: set[str], b: set[str]) -> UrlAgreement:
    return UrlAgreement(common=len(a & b), only_a=sorted(a - b), only_b=sorted(b - a))


@dataclass(frozen=True, slots=True)
class Goal:
    name: str
    met: bool
    detail: str

    def text(self) -> str:
        return f"{self.name}: {'met' if self.met else 'NOT met'} ({self.detail})"


def _ratio(ours: float, theirs: float) -> float:
    return ours / theirs if theirs else float("inf")


def judge_goals(
    scrapy_pps: float, crawl_pps: float, sync_pps: float, resync_pps: float, resync_share: float
) -> list[Goal]:
    """Issue 24's goals, judged on one corpus. Rates are pages/s of whole processes; the resync
    share is the no-change resync's server bytes over the first full sync's (0.013 = 1.3%)."""
    sync_x, crawl_x, resync_x = (_ratio(v, scrapy_pps) for v in (sync_pps, crawl_pps, resync_pps))
    return [
        Goal(
            "full sync >= 1.0x Scrapy crawl",
            sync_x >= 1.0,
            f"{sync_pps:.1f} vs {scrapy_pps:.1f} pages/s, {sync_x:.2f}x",
        ),
        Goal("crawl only >= 2x Scrapy", crawl_x >= 2.0, f"{crawl_pps:.1f} vs {scrapy_pps:.1f} pages/s, {crawl_x:.2f}x"),
        Goal("no-change resync bytes <= 1.3% of first sync", resync_share <= 0.013, f"{100 * resync_share:.2f}%"),
        Goal(
            "no-change resync >= 3x Scrapy first crawl",
            resync_x >= 3.0,
            f"{resync_pps:.1f} vs {scrapy_pps:.1f} pages/s, {resync_x:.2f}x",
        ),
    ]


def settings_rows(scrapy: dict[str, str], tributary: dict[str, Any]) -> list[dict[str, str]]:
    """The two crawlers' settings side by side, one row per concern."""

    def trib(key: str) -> str:
        return str(tributary.get(key, "(default)"))

    return [
        {"concern": "pages in flight", "scrapy": scrapy["CONCURRENT_REQUESTS"], "tributary": trib("concurrency")},
        {
            "concern": "per host",
            "scrapy": scrapy["CONCURRENT_REQUESTS_PER_DOMAIN"],
            "tributary": f"{trib('concurrency')} (one host)",
        },
        {
            "concern": "delay between requests (s)",
            "scrapy": scrapy["DOWNLOAD_DELAY"],
            "tributary": trib("delay_seconds"),
        },
        {
            "concern": "adaptive throttling",
            "scrapy": f"AUTOTHROTTLE {scrapy['AUTOTHROTTLE_ENABLED']}",
            "tributary": "none",
        },
        {
            "concern": "robots.txt",
            "scrapy": f"ROBOTSTXT_OBEY {scrapy['ROBOTSTXT_OBEY']}",
            "tributary": trib("respect_robots"),
        },
        {
            "concern": "revisit",
            "scrapy": "HTTPCACHE " + scrapy["HTTPCACHE_POLICY"].rsplit(".", 1)[-1] + " (filesystem storage)",
            "tributary": "stored validators (If-None-Match / If-Modified-Since)",
        },
        {
            "concern": "sitemaps",
            "scrapy": "not used (CrawlSpider)",
            "tributary": f"use_sitemaps {trib('use_sitemaps')}",
        },
        {"concern": "log level", "scrapy": scrapy["LOG_LEVEL"], "tributary": "INFO (default)"},
        {"concern": "scope", "scrapy": "allowed_domains 127.0.0.1", "tributary": "scope host, allowlist 127.0.0.1"},
    ]
