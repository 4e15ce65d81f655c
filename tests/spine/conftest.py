"""Fixtures shared by the engine tests of this folder."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Seven markdown notes of 30 paragraphs each (a files source of several batches)."""
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(7):
        body = "\n\n".join(f"Paragraph {j} of note {i} about canal locks and weirs." for j in range(30))
        (root / f"note{i}.md").write_text(f"# Note {i}\n\n{body}\n", encoding="utf-8")
    return root
