"""Items with nothing to index (``parse:empty``) are skipped, not failing: a fully scanned PDF
keeps its ``needs_ocr`` warning in lineage, and none of them is ever quarantined, while a
genuinely broken file next to them still is."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from include.config import SourceConfig
from include.stores import open_state_store
from plugins.engine import run_pipeline
from plugins.tributary_airflow.ui import create_app
from tests.parsers.pdfgen import build_pdf
from tests.support.server import serve_asgi

_SHELL = '<html><head><script src="/app.js"></script></head><body><div id="root"></div></body></html>'


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    # every page a full-page image without a text layer: the common scanned PDF
    (root / "scan.pdf").write_bytes(build_pdf([[], [], []], image_pages={0, 1, 2}))
    (root / "app.html").write_text(_SHELL, encoding="utf-8")  # a single-page-app shell
    (root / "bad.pdf").write_bytes(b"%PDF-1.7\n not really a pdf")  # genuinely failing
    (root / "good.md").write_text("# Good\n\nA healthy document.\n", encoding="utf-8")
    return root


def _source(root: Path, **options: object) -> SourceConfig:
    # OCR off (the ``text`` engine): a scan is what it was before OCR, an item that needs it;
    # tests/lineage/test_parser_facts.py covers the OCR'd case
    parser = {"engines": {"pdf": "text"}}
    return SourceConfig(kind="files", name="skips", options={"root": str(root), **options}, parser=parser)


def _rows(run_id: str) -> dict[str, dict]:
    store = open_state_store()
    try:
        return {r["item_key"]: r for r in store.run_items(run_id, source="files:skips")}
    finally:
        store.close()


def test_fully_scanned_pdf_is_skipped_with_its_needs_ocr_warning(tributary_home: Path, folder: Path) -> None:
    run = run_pipeline(_source(folder))  # PDFs parse in the isolated child: details cross its pipe
    assert (run.counts["new"], run.counts["skipped"], run.counts["failed"]) == (1, 2, 1)
    rows = _rows(run.run_id)
    scan = rows["scan.pdf"]
    assert scan["action"] == "skipped" and scan["reason"] == "parse: parse:empty"
    assert "needs OCR" in scan["error"]
    assert scan["warnings"] == {"needs_ocr": True, "ocr_pages": [1, 2, 3]}
    assert rows["app.html"]["action"] == "skipped" and rows["app.html"]["warnings"] is None
    assert rows["bad.pdf"]["action"] == "failed" and rows["bad.pdf"]["warnings"] is None

    with serve_asgi(create_app(require_auth=False)) as url:  # the audit page, on 127.0.0.1
        page = httpx.get(f"{url}/runs/{run.run_id}", params={"source": "files:skips"}, timeout=30)
    assert page.status_code == 200 and "needs_ocr (1 item)" in page.text
    row = page.text.split("scan.pdf</a>", 1)[1].split("</tr>", 1)[0]
    assert "parse:empty" in row and "needs_ocr, ocr_pages=[1, 2, 3]" in row


def test_nothing_to_index_is_never_quarantined(tributary_home: Path, folder: Path) -> None:
    src = _source(folder, quarantine_after=2)
    for _ in range(2):
        run_pipeline(src)
    store = open_state_store()
    try:
        for key in ("scan.pdf", "app.html"):  # seen, parsed, nothing to index: no failure streak
            st = store.get_item(src.source_id, key)
            assert st.failure_count == 0 and st.last_error_reason == "parse:empty" and not st.indexed
        assert store.get_item(src.source_id, "bad.pdf").failure_count == 2
    finally:
        store.close()

    third = run_pipeline(src)
    rows = _rows(third.run_id)
    # looked at again (fetched and parsed), still skipped for the same reason, not quarantined
    for key in ("scan.pdf", "app.html"):
        assert (rows[key]["action"], rows[key]["reason"]) == ("skipped", "parse: parse:empty")
    assert rows["scan.pdf"]["warnings"]["needs_ocr"] is True
    # the genuinely broken file is quarantined as before: not fetched, skipped with that reason
    assert (rows["bad.pdf"]["action"], rows["bad.pdf"]["reason"]) == ("skipped", "quarantined after 2 failures")
    assert (third.counts["skipped"], third.counts["failed"]) == (3, 0)
