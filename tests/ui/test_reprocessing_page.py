"""The run page says why unchanged items were re-processed (issue 36), in real headless Chromium.

A ``files`` source of Markdown and PDF notes is synced, the PDF parser registered again under a
new version, and synced again: the second run's page must name the reason on exactly the PDFs'
rows of its items table and count it in its counts table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from include.config import SourceConfig
from plugins.engine import run_pipeline
from plugins.parsers import registry
from plugins.tributary_airflow.ui import create_app
from tests.support.airflow import write_sources
from tests.support.server import serve_asgi
from tests.ui.cdp import Browser, chromium_binary
from tests.web.fault_server import pdf_bytes

ENTRY = {"kind": "files", "name": "versions", "schedule": "@daily"}


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.md").write_text("# Notes\n\nThe weir gates open at dawn.\n", encoding="utf-8")
    (docs / "report.pdf").write_bytes(pdf_bytes("Tide tables for the estuary"))
    monkeypatch.setenv("TRIBUTARY_HOME", str(tmp_path / "tributary"))
    for var in ("TRIBUTARY_STATE_URL", "TRIBUTARY_INDEX_PATH", "TRIBUTARY_STAGING_DIR", "TRIBUTARY_REDIS_URL"):
        monkeypatch.delenv(var, raising=False)
    entry = {**ENTRY, "options": {"root": str(docs)}}
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "sources.yaml", [entry])))
    config = SourceConfig(**entry)  # type: ignore[arg-type]
    run_pipeline(config, run_id="before")
    registry.load_builtins()
    old = registry.get_parser("application/pdf")
    assert old is not None
    monkeypatch.setitem(registry._BY_MEDIA_TYPE, "application/pdf", dataclasses.replace(old, version="99.0"))
    run_pipeline(config, run_id="after")
    browser = Browser(binary, width=1280, height=900)
    try:
        with serve_asgi(create_app(require_auth=False)) as url:
            yield {"url": url, "browser": browser, "why": f"parser pdf {old.version} -> 99.0"}
    finally:
        browser.close()


def test_the_run_page_names_why_each_item_was_reprocessed(served: dict[str, Any]) -> None:
    browser: Browser = served["browser"]
    browser.goto(served["url"] + "/runs/after?source=files%3Aversions")
    rows = browser.eval("[...document.querySelectorAll('#items tr')].map(r => r.innerText)")
    flagged = [row for row in rows if served["why"] in row]
    assert len(flagged) == 1 and "report.pdf" in flagged[0] and "forced re-processing" in flagged[0]
    assert any("notes.md" in row and "not modified" in row for row in rows)
    counts = browser.eval("document.querySelector('#counts').innerText")
    assert f"{served['why']} 1" in counts and "{" not in counts
