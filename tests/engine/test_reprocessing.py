"""Re-process only what a change affects (issue 36, point 5), end to end in-process.

A mixed ``files`` source (Markdown, HTML, PDF) is synced once; then one thing changes (the PDF
parser's version, the chunker's version, stored state from before records existed) and the next
sync must fetch, parse and write exactly the items that change affects, and say why.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from include.config import SourceConfig
from include.stores import StateStore, open_state_store
from plugins.chunkers import registry as chunkers
from plugins.connectors.files.connector import FilesConnector
from plugins.engine import run_pipeline
from plugins.engine.cli import main
from plugins.engine.cli_format import sync_summary_text
from plugins.parsers import registry as parsers
from tests.support.airflow import write_sources
from tests.web.fault_server import pdf_bytes

SID = "files:mixed"
TEXTS = {
    "a.md": "# Alpha\n\nThe alpha note is about river deltas and sediment.\n",
    "b.md": "# Beta\n\nBeta explains how salmon find their way upstream.\n",
    "c.html": "<html><body><main><h1>Gamma</h1><p>Gamma covers flood plains in spring.</p></main></body></html>",
}
PDFS = {"d.pdf": "Delta report on estuary tides", "e.pdf": "Epsilon survey of weirs and locks"}
ALL = {*TEXTS, *PDFS}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "mixed"
    root.mkdir()
    for name, text in TEXTS.items():
        (root / name).write_text(text, encoding="utf-8")
    for name, text in PDFS.items():
        (root / name).write_bytes(pdf_bytes(text))
    return root


@pytest.fixture
def fetches(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every item the files connector reads, by key (what a sync fetched)."""
    seen: Counter[str] = Counter()
    fetch = FilesConnector.fetch

    def counting(self: FilesConnector, change):  # type: ignore[no-untyped-def]
        seen[change.item_key] += 1
        return fetch(self, change)

    monkeypatch.setattr(FilesConnector, "fetch", counting)
    return seen


def _source(root: Path) -> SourceConfig:
    return SourceConfig(kind="files", name="mixed", options={"root": str(root)}, batch_size=2)


def _sync(source: SourceConfig) -> tuple[str, dict]:
    summary = run_pipeline(source)
    assert summary.status == "success"
    return summary.run_id, summary.counts


def _bump_parser(monkeypatch: pytest.MonkeyPatch, name: str, version: str) -> str:
    """Register parser ``name`` again under ``version`` (as an upgraded release would); its old version."""
    parsers.load_builtins()
    old = ""
    for table in (parsers._BY_MEDIA_TYPE, parsers._BY_EXTENSION):
        for key, spec in list(table.items()):
            if spec.name == name:
                old = spec.version
                monkeypatch.setitem(table, key, dataclasses.replace(spec, version=version))
    assert old and old != version
    return old


def _lineage(store: StateStore, run_id: str) -> dict[str, dict]:
    return {row["item_key"]: row for row in store.run_items(run_id, source=SID)}


def test_a_new_pdf_parser_version_reprocesses_exactly_the_pdfs(
    tributary_home: Path, folder: Path, fetches: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _source(folder)
    first_run, first = _sync(src)
    assert first["new"] == 5 and set(fetches) == ALL
    store = open_state_store()
    before = store.items(SID)
    assert {k: st.processed_with["parser"]["name"] for k, st in before.items() if st.processed_with} == {
        "a.md": "markdown", "b.md": "markdown", "c.html": "html", "d.pdf": "pdf", "e.pdf": "pdf",
    }  # fmt: skip
    assert before["d.pdf"].processed_with["chunker"] == {
        "name": "token",
        "version": chunkers.get_chunker("token").version,
    }
    old = _bump_parser(monkeypatch, "pdf", "99.0")
    fetches.clear()

    run_id, counts = _sync(src)
    why = f"parser pdf {old} -> 99.0"
    assert dict(fetches) == {"d.pdf": 1, "e.pdf": 1}  # fetched again although their files did not change
    assert (counts["fetched"], counts["parsed"], counts["chunked"]) == (2, 2, 2)
    assert counts["chunks_written"] == 0  # same text, same chunks: nothing rewritten in the index
    assert counts["reprocessed"] == {why: 2} and counts["unchanged"] == 5
    rows = _lineage(store, run_id)
    assert {k for k, r in rows.items() if r["reason"] and why in r["reason"]} == set(PDFS)
    assert {rows[k]["parser_version"] for k in PDFS} == {"99.0"}
    assert all(rows[k]["reason"] == "not modified" for k in TEXTS)
    after = store.items(SID)
    assert {k for k in ALL if after[k].last_indexed_run == run_id} == set(PDFS)
    assert {k for k in ALL if after[k].last_indexed_run == first_run} == set(TEXTS)
    assert after["d.pdf"].processed_with["parser"]["version"] == "99.0"
    assert {k: after[k].processed_with for k in TEXTS} == {k: before[k].processed_with for k in TEXTS}
    summary = sync_summary_text(run_id, SID, counts, 1.0)
    assert f"re-processed 2: {why} (2)" in summary

    fetches.clear()
    assert _sync(src)[1]["fetched"] == 0 and not fetches  # recorded: the next run trusts them again


def test_items_stored_before_records_are_not_all_reprocessed_on_upgrade(
    tributary_home: Path, folder: Path, fetches: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _source(folder)
    _sync(src)
    store = open_state_store()
    with store.engine.begin() as conn:  # what a release before processed_with left behind
        conn.execute(sa.text("UPDATE tributary_items SET processed_with = NULL"))
    _bump_parser(monkeypatch, "pdf", "99.0")
    fetches.clear()
    counts = _sync(src)[1]
    assert counts["fetched"] == 0 and not fetches and counts["reprocessed"] == {}
    # the next natural re-process records it: an edited PDF is read by the new parser ...
    (folder / "d.pdf").write_bytes(pdf_bytes("Delta report on estuary tides, revised"))
    _sync(src)
    assert store.items(SID)["d.pdf"].processed_with["parser"]["version"] == "99.0"
    assert store.items(SID)["e.pdf"].processed_with is None
    # ... and from then on it follows the parser's versions, the others stay as they were
    _bump_parser(monkeypatch, "pdf", "100.0")
    fetches.clear()
    counts = _sync(src)[1]
    assert dict(fetches) == {"d.pdf": 1} and counts["reprocessed"] == {"parser pdf 99.0 -> 100.0": 1}


def test_a_new_chunker_version_reprocesses_every_item_and_says_so(
    tributary_home: Path, folder: Path, fetches: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _source(folder)
    _sync(src)
    spec = chunkers.get_chunker("token")
    monkeypatch.setitem(chunkers._CHUNKERS, "token", dataclasses.replace(spec, version=f"{spec.version}.1"))
    chunkers._STAMPS.clear()  # the chunks' lineage stamps carry the version
    fetches.clear()
    run_id, counts = _sync(src)
    why = f"chunker token {spec.version} -> {spec.version}.1"
    # the parsed documents are not kept between runs (staging is removed): re-fetched, re-parsed
    assert set(fetches) == ALL and counts["reprocessed"] == {why: 5}
    store = open_state_store()
    assert {st.processed_with["chunker"]["version"] for st in store.items(SID).values()} == {f"{spec.version}.1"}
    assert all(why in r["reason"] for r in _lineage(store, run_id).values())


def test_dry_run_and_json_say_why_an_item_would_be_reprocessed(
    tributary_home: Path, folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    sources = write_sources(tmp_path / "s.yaml", [{"kind": "files", "name": "mixed", "options": {"root": str(folder)}}])
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(sources))
    assert main(["sync", SID]) == 0
    old = _bump_parser(monkeypatch, "pdf", "99.0")
    why = f"parser pdf {old} -> 99.0"
    capsys.readouterr()
    assert main(["sync", SID, "--dry-run", "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)
    rows = _lineage(open_state_store(), dry["run_id"])
    assert {k for k, r in rows.items() if why in (r["reason"] or "")} == set(PDFS)
    assert main(["sync", SID, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"]["reprocessed"] == {why: 2}
    assert main(["sync", SID]) == 0 and "re-processed" not in capsys.readouterr().out
    assert main(["item", SID, "d.pdf", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"]["processed_with"]["parser"]["version"] == "99.0"
    assert main(["item", SID, "d.pdf"]) == 0
    assert "processed with: parser pdf 99.0 (auto), chunker token" in capsys.readouterr().out
