"""Crawled pages are staged once, under the name the parser sees (extension kept)."""

from __future__ import annotations

from pathlib import Path

from include.config import SourceConfig
from plugins.engine import RunContext, run_pipeline


def test_each_crawled_page_is_staged_once_with_its_extension(tributary_home: Path, demo_site) -> None:
    _, url = demo_site
    src = SourceConfig.model_validate(
        {
            "kind": "web",
            "name": "staged",
            "options": {"seeds": [url], "delay_seconds": 0, "allowlist": ["127.0.0.1"], "use_sitemaps": False},
            "retain_raw": True,  # keep the run's raw/ folder to look at
        }
    )
    summary = run_pipeline(src)
    assert summary.counts["new"] >= 5 and summary.counts["failed"] == 0
    raw = Path(RunContext(source=src, run_id=summary.run_id).staging.path("raw"))
    files = sorted(p.name for p in raw.iterdir())
    # one file per fetched page (the crawl stages it; fetch reuses the same name), none as .bin
    assert len(files) == summary.counts["fetched"]
    assert all(name.endswith(".html") for name in files), files
