"""The CLI answers from the real index and run log after a sync."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plugins.engine.cli import main
from tests.support.airflow import write_sources


@pytest.fixture
def synced(tributary_home: Path, tmp_path: Path, monkeypatch) -> str:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "rivers.md").write_text("# Rivers\n\nThe Rhine flows north into the North Sea.\n", encoding="utf-8")
    (root / "lakes.md").write_text("# Lakes\n\nLake Baikal is the deepest lake on Earth.\n", encoding="utf-8")
    sources = write_sources(tmp_path / "s.yaml", [{"kind": "files", "name": "geo", "options": {"root": str(root)}}])
    monkeypatch.setenv("TRIBUTARY_SOURCES", str(sources))
    assert main(["sync", "files:geo"]) == 0
    return "files:geo"


def _json(capsys, argv: list[str]) -> object:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_search_run_item_chunk(synced: str, capsys) -> None:
    found = _json(capsys, ["search", "deepest lake"])
    assert found["access"] == "anonymous"  # no --as: public documents only (a files source without acl is public)
    hits = found["hits"]
    assert hits[0]["title"] and "Baikal" in hits[0]["text"]
    runs = _json(capsys, ["runs", "--source", synced])
    run_id = runs[0]["run_id"]
    assert runs[0]["counts"]["new"] == 2
    run = _json(capsys, ["run", run_id, "--action", "new"])
    assert sorted(i["item_key"] for i in run["items"]) == ["lakes.md", "rivers.md"]
    item = _json(capsys, ["item", synced, "lakes.md"])
    assert item["history"][0]["action"] == "new" and item["state"]["chunk_ids"]
    chunk = _json(capsys, ["chunk", hits[0]["chunk_id"]])
    assert chunk["chunk"]["run_id"] == run_id and chunk["lineage"]["item_key"] == "lakes.md"
    capsys.readouterr()
    assert main(["search", "zebra crossing"]) == 1  # no hits: non-zero exit for scripts
    assert main(["sources"]) == 0 and "sync_files_geo" in capsys.readouterr().out
