"""The CLI for people and scripts (issue 34 point 6): short human summaries by default, the
full record with ``--json`` (machine-clean: it parses), one-line errors instead of tracebacks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from plugins.engine.cli import main
from plugins.engine.cli_format import runs_table_text, score_text, sync_summary_text
from tests.support.airflow import write_sources


@pytest.fixture
def files_source(tributary_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "rivers.md").write_text("# Rivers\n\nThe Rhine flows north.\n", encoding="utf-8")
    sources = write_sources(tmp_path / "s.yaml", [{"kind": "files", "name": "geo", "options": {"root": str(root)}}])
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(sources))
    return "files:geo"


def test_sync_prints_a_short_summary_and_json_the_record(files_source: str, capsys) -> None:
    capsys.readouterr()
    assert main(["sync", files_source]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) <= 6  # before: ~45 lines of JSON
    assert re.match(r"files:geo: success in \d+\.\d s — run inline__", lines[0])
    assert lines[1].split() == [
        "new",
        "1",
        "changed",
        "0",
        "unchanged",
        "0",
        "deleted",
        "0",
        "failed",
        "0",
        "skipped",
        "0",
    ]
    assert lines[-1].startswith("  next: run inline__")
    assert main(["sync", files_source, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)  # machine-clean: nothing but the record
    assert record["status"] == "success" and record["counts"]["unchanged"] == 1


def test_unknown_source_is_one_line_naming_the_known_ones(files_source: str, capsys) -> None:
    capsys.readouterr()
    assert main(["sync", "web:nope"]) == 2
    err = capsys.readouterr().err
    assert err == "unknown source 'web:nope'; known: files:geo\n"  # before: a KeyError traceback


def test_runs_has_start_duration_and_fixed_columns(files_source: str, capsys) -> None:
    main(["sync", files_source])
    main(["sync", files_source, "--dry-run"])
    capsys.readouterr()
    assert main(["runs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["started", "(UTC)", "duration", "status"]
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +\d+\.\ds success\* ", lines[1])  # the dry run, newest
    assert lines[-1].startswith("* dry run")


def test_runs_into_a_closed_pipe_has_no_traceback(files_source: str) -> None:
    assert main(["sync", files_source]) == 0
    code = "import sys; from plugins.engine.cli import main; sys.exit(main(['runs']))"
    proc = subprocess.run(
        f'{sys.executable} -c "{code}" | head -c 1', shell=True, capture_output=True, text=True, timeout=120
    )
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr


def test_summary_golden_for_a_failed_run() -> None:
    counts = {
        "outcome": "failed",
        "new": 0,
        "failed": 0,
        "reasons": {"connect": 1, "robots_unreachable": 1},
        "outcome_note": "nothing was reached (listing incomplete; connect 1, robots_unreachable 1)",
    }
    assert sync_summary_text("r1", "web:demo", counts, 2.04) == (
        "web:demo: failed in 2.0 s — run r1\n"
        "  new 0  changed 0  unchanged 0  deleted 0  failed 0  skipped 0\n"
        "  chunks written 0, bytes fetched 0\n"
        "  reasons: connect 1, robots_unreachable 1\n"
        "  why: nothing was reached (listing incomplete; connect 1, robots_unreachable 1)\n"
        "  next: run r1 --source web:demo"
    )
    table = runs_table_text([{"run_id": "r1", "source": "web:demo", "status": "failed", "counts": counts}])
    assert table.splitlines()[1].split()[:3] == ["-", "-", "failed"]


def test_scores_keep_their_precision() -> None:
    assert score_text({"score": 1.9e-06}) == "1.9e-06"  # before: [0.000]
    assert score_text({"score": 0.0325, "bm25_rank": 1, "vector_rank": 3}) == "0.0325 (bm25 #1, vector #3)"


def test_item_accepts_the_spellings_sync_accepts(
    tributary_home: Path, tmp_path: Path, monkeypatch, demo_site, capsys
) -> None:
    _, url = demo_site
    spec = {"kind": "web", "name": "site", "options": {"seeds": [url], "delay_seconds": 0, "allowlist": ["127.0.0.1"]}}
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(write_sources(tmp_path / "w.yaml", [spec])))
    assert main(["sync", "web:site", "--only-key", "faq.html"]) == 0
    capsys.readouterr()
    assert main(["item", "web:site", "faq.html", "--json"]) == 0  # before: "no item"
    found = json.loads(capsys.readouterr().out)
    assert found["history"][-1]["item_key"] == url + "faq.html"
    assert main(["item", "web:site", "missing.html"]) == 1
    assert capsys.readouterr().err == "no item 'missing.html' in web:site\n"
