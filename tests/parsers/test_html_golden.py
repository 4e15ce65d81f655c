"""The HTML parser makes the same documents as before its parse path was reworked.

Digests (tests/parsers/golden/html_digests.json) were written by the parser as it was on main
before the rework (tests/parsers/html_golden.py); each page present on this machine must
still give its digest. Pages absent here (the PostgreSQL manual is a Debian package, the
real-document corpus lives in ../shared) are skipped with a reason; the generated ones always run.
"""

from __future__ import annotations

import json

import pytest

from plugins.parsers import _html_tree
from tests.parsers.html_golden import GOLDEN, PG_MANUAL, REALDOCS_HTML, digest, golden_pages

_EXPECTED: dict[str, str] = json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("whole_parse_max", [None, 0], ids=["as-configured", "every-page-pushed"])
def test_every_present_page_gives_its_golden_digest(monkeypatch, whole_parse_max) -> None:
    """Small pages are parsed in one call, large ones pushed a MiB at a time: both give the digests."""
    if whole_parse_max is not None:
        monkeypatch.setattr(_html_tree, "_WHOLE_PARSE_MAX", whole_parse_max)
    pages = list(golden_pages())
    changed = [name for name, data in pages if digest(name, data) != _EXPECTED[name]]
    assert not changed, f"{len(changed)} of {len(pages)} pages parse differently: {changed[:10]}"
    assert sum(name.startswith("generated/") for name, _ in pages) == 3


@pytest.mark.parametrize(("root", "prefix"), [(PG_MANUAL, "pg15/"), (REALDOCS_HTML, "realdocs/")])
def test_the_corpus_is_checked_whole(root, prefix) -> None:
    if not root.is_dir():
        pytest.skip(f"{root} absent (apt-get install postgresql-doc-15 / the ../shared corpus)")
    present = {name for name, _ in golden_pages() if name.startswith(prefix)}
    assert present == {name for name in _EXPECTED if name.startswith(prefix)}
