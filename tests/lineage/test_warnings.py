"""Parser warnings as lineage: a PDF with a scanned (image-only) page is indexed from its text
layer, and its ``needs_ocr`` reaches the run-item row, ``plugins.engine.lineage``'s reports, the CLI and
the audit pages (served on 127.0.0.1) instead of staying in the parser's metadata."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import httpx
import pytest

from include.config import SourceConfig
from include.settings import get_settings
from include.stores import RunItem, open_state_store
from plugins.engine import run_pipeline
from plugins.engine.cli import main as cli
from plugins.engine.lineage import item_history, parser_warnings, run_report
from plugins.tributary_airflow.ui import create_app
from tests.parsers.pdfgen import build_pdf
from tests.support.airflow import write_sources
from tests.support.server import serve_asgi

SOURCE = "files:scans"


@pytest.fixture
def scans(tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SourceConfig:
    root = tmp_path / "scans"
    root.mkdir()
    # page 1 is a full-page image without a text layer (a scan), page 2 has real text
    (root / "scan.pdf").write_bytes(
        build_pdf([[], [(72, 100, 11, "The inspection report continues on this page.")]], image_pages={0})
    )
    (root / "notes.md").write_text("# Notes\n\nPlain text, nothing to warn about.\n", encoding="utf-8")
    # OCR off (the ``text`` engine): the scanned page stays a page that needs OCR
    parser = {"engines": {"pdf": "text"}}
    entry = {"kind": "files", "name": "scans", "schedule": None, "options": {"root": str(root)}, "parser": parser}
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "sources.yaml", [entry])))
    return SourceConfig.model_validate(entry)


def _rows(run_id: str) -> dict[str, dict]:
    store = open_state_store()
    try:
        return {r["item_key"]: r for r in store.run_items(run_id, source=SOURCE)}
    finally:
        store.close()


def test_scanned_pdf_needs_ocr_reaches_lineage_cli_and_pages(scans: SourceConfig, capsys) -> None:
    run = run_pipeline(scans)
    assert run.counts["new"] == 2 and run.counts["failed"] == 0

    rows = _rows(run.run_id)
    assert rows["scan.pdf"]["action"] == "new"
    assert rows["scan.pdf"]["warnings"] == {"needs_ocr": True, "ocr_pages": [1]}
    assert rows["notes.md"]["warnings"] is None

    store = open_state_store()
    try:
        report = run_report(store, run.run_id, source=SOURCE)
        history = item_history(store, SOURCE, "scan.pdf")
    finally:
        store.close()
    assert report["warnings"] == {"needs_ocr": 1, "ocr_pages": 1}
    by_key = {i["item_key"]: i for i in report["items"]}
    assert by_key["scan.pdf"]["warnings"]["needs_ocr"] is True and by_key["notes.md"]["warnings"] == {}
    assert history["history"][-1]["warnings"]["ocr_pages"] == [1]

    capsys.readouterr()
    assert cli(["run", run.run_id, "--source", SOURCE]) == 0
    out = capsys.readouterr().out
    [line] = [ln for ln in out.splitlines() if "scan.pdf" in ln]
    assert "WARN needs_ocr, ocr_pages=[1]" in line
    assert not any("WARN" in ln for ln in out.splitlines() if "notes.md" in ln)
    assert cli(["item", SOURCE, "scan.pdf"]) == 0
    assert "WARN needs_ocr" in capsys.readouterr().out
    capsys.readouterr()
    assert cli(["run", run.run_id, "--source", SOURCE, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == {"needs_ocr": 1, "ocr_pages": 1}

    with serve_asgi(create_app(require_auth=False)) as url:
        page = httpx.get(f"{url}/runs/{run.run_id}", params={"source": SOURCE}, timeout=30)
        item = httpx.get(f"{url}/items", params={"source": SOURCE, "key": "scan.pdf"}, timeout=30)
        api = httpx.get(f"{url}/api/runs/{run.run_id}", params={"source": SOURCE}, timeout=30)
    assert page.status_code == item.status_code == api.status_code == 200
    assert "Parser warnings" in page.text and "needs_ocr (1 item)" in page.text
    row = page.text.split("scan.pdf</a>", 1)[1].split("</tr>", 1)[0]
    assert "needs_ocr, ocr_pages=[1]" in row
    assert "needs_ocr, ocr_pages=[1]" in item.text
    assert {i["item_key"]: i["warnings"] for i in api.json()["items"]}["scan.pdf"]["needs_ocr"] is True


def test_warnings_survive_a_content_unchanged_reparse(scans: SourceConfig) -> None:
    run_pipeline(scans)
    # touched, not edited: fetched and parsed again, same text (unchanged), same warnings
    pdf = Path(scans.options["root"]) / "scan.pdf"
    st = pdf.stat()
    os.utime(pdf, (st.st_atime, st.st_mtime + 60))
    again = run_pipeline(scans)
    row = _rows(again.run_id)["scan.pdf"]
    assert (row["action"], row["reason"]) == ("unchanged", "content hash unchanged")
    assert row["warnings"] == {"needs_ocr": True, "ocr_pages": [1]}
    assert _rows(again.run_id)["notes.md"]["warnings"] is None


def test_existing_run_log_gains_the_warnings_column(tributary_home: Path) -> None:
    store = open_state_store()
    store.close()
    db = Path(get_settings().state_url.removeprefix("sqlite:///"))
    with sqlite3.connect(db) as conn:  # the table as a release before this column created it
        conn.execute("ALTER TABLE tributary_run_items DROP COLUMN warnings")
        assert "warnings" not in {r[1] for r in conn.execute("PRAGMA table_info(tributary_run_items)")}
    store = open_state_store()
    try:
        store.start_run("r1", SOURCE)
        store.record_run_items("r1", SOURCE, [RunItem("a.pdf", "new", warnings={"needs_ocr": True})])
        assert store.run_items("r1", source=SOURCE)[0]["warnings"] == {"needs_ocr": True}
    finally:
        store.close()


def test_parser_warnings_picks_warning_keys_only() -> None:
    meta = {
        "pages": 3,
        "author": "x",
        "needs_ocr": True,
        "ocr_pages": [1, 3],
        "hidden_sheets_skipped": ["Secret"],
        "truncated_at_bytes": 10_000_000,
        "skipped_parts": ["embedded.xlsx"],
        "invalid_lines": 0,  # nothing was wrong
        "needs_ocr_x": True,  # not a warning key
        "warnings": ["x" * 5000],
    }
    found = parser_warnings(meta)
    assert set(found) == {
        "needs_ocr",
        "ocr_pages",
        "hidden_sheets_skipped",
        "truncated_at_bytes",
        "skipped_parts",
        "warnings",
    }
    assert found["ocr_pages"] == [1, 3]
    assert isinstance(found["warnings"], str) and len(found["warnings"]) <= 2001  # capped
    assert parser_warnings(None) == {} and parser_warnings({"pages": 1}) == {}
