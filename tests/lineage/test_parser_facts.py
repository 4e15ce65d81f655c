"""Parser facts in lineage (issue 23): a scanned PDF read by OCR says so (``ocr_used``, the
engine's name, the pages) in its run-item row, the CLI and the audit page; the engine a source
chose (``parser.engines.pdf``) is recorded per item; a typo in it fails the run at planning."""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import pytest
from PIL import Image, ImageDraw, ImageFont

from include.config import SourceConfig
from include.stores import open_state_store
from plugins.engine import run_pipeline
from plugins.engine.cli import main as cli
from plugins.parsers._ocr import ocr_available
from plugins.tributary_airflow.ui import create_app
from tests.support.server import serve_asgi

OCR_MISSING = ocr_available("eng")
needs_tesseract = pytest.mark.skipif(OCR_MISSING is not None, reason=f"OCR unavailable: {OCR_MISSING}")
SOURCE = "files:facts"
SENTENCE = "Inspection passed on every floor"


def _scanned_pdf(text: str) -> bytes:
    """One A4 page at 200 dpi that is only an image of ``text`` (no text layer): a scan."""
    page = Image.new("L", (1654, 2339), 255)
    ImageDraw.Draw(page).text((150, 200), text, fill=0, font=ImageFont.load_default(size=64))
    out = io.BytesIO()
    page.save(out, "PDF", resolution=200.0)
    return out.getvalue()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "scans"
    root.mkdir()
    (root / "scan.pdf").write_bytes(_scanned_pdf(SENTENCE))
    return root


def _source(root: Path, engine: str | None = None) -> SourceConfig:
    parser = {"engines": {"pdf": engine}} if engine else {}
    return SourceConfig(kind="files", name="facts", options={"root": str(root)}, parser=parser)


def _row(run_id: str, key: str) -> dict:
    store = open_state_store()
    try:
        return {r["item_key"]: r for r in store.run_items(run_id, source=SOURCE)}[key]
    finally:
        store.close()


@needs_tesseract
def test_an_ocr_read_scan_says_so_in_lineage_cli_and_page(tributary_home: Path, folder: Path, capsys) -> None:
    run = run_pipeline(_source(folder))  # default engine: auto, OCR for pages without a text layer
    assert run.counts["new"] == 1 and run.counts["failed"] == 0
    row = _row(run.run_id, "scan.pdf")
    assert row["parser_engine"] == "auto" and row["chars"] > 20
    assert row["warnings"]["ocr_used"] is True and row["warnings"]["ocr_pages"] == [1]
    assert "needs_ocr" not in row["warnings"]

    capsys.readouterr()
    assert cli(["run", run.run_id, "--source", SOURCE]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "scan.pdf" in ln)
    assert "ocr_used" in line
    assert cli(["chunk", row["chunks_added"][0]]) == 0
    assert "(engine auto)" in capsys.readouterr().out

    with serve_asgi(create_app(require_auth=False)) as url:
        page = httpx.get(f"{url}/runs/{run.run_id}", params={"source": SOURCE}, timeout=30)
    cells = page.text.split("scan.pdf</a>", 1)[1].split("</tr>", 1)[0]
    assert "· auto" in cells and "ocr_used" in cells


def test_engine_text_keeps_the_scan_as_needing_ocr(tributary_home: Path, folder: Path) -> None:
    run = run_pipeline(_source(folder, "text"))
    row = _row(run.run_id, "scan.pdf")
    assert (row["action"], row["reason"]) == ("skipped", "parse: parse:empty")
    assert row["warnings"] == {"needs_ocr": True, "ocr_pages": [1]}


def test_an_engine_no_parser_has_fails_the_run_when_planned(tributary_home: Path, folder: Path) -> None:
    with pytest.raises(ValueError, match=r"parser.engines.pdf: 'tesseract' is not one of auto, text, ocr"):
        run_pipeline(_source(folder, "tesseract"))
