"""The cluster benchmark's generated site: page count, every page reachable by links from the
index, realistic and distinct pages, and the same bytes every time (no cluster is started)."""

from __future__ import annotations

import re
from collections import deque
from pathlib import Path

import pytest

from benchmarks._cluster_site import build_site, page_path, paragraph_pool

_HREF = re.compile(r'href="([^"]+)"')


@pytest.fixture(scope="module")
def pool() -> list[str]:
    try:
        return paragraph_pool(limit_files=40)  # a few manual pages are enough paragraphs for a test
    except RuntimeError as exc:
        pytest.skip(str(exc))


def _reachable(root: Path) -> set[str]:
    """Breadth-first over the links, as the crawler walks them (``/`` is the index)."""
    seen, todo = {"index.html"}, deque(["index.html"])
    while todo:
        text = (root / todo.popleft()).read_text(encoding="utf-8")
        for href in _HREF.findall(text):
            rel = href.lstrip("/") or "index.html"
            if rel not in seen:
                assert (root / rel).is_file(), f"broken link {href}"
                seen.add(rel)
                todo.append(rel)
    return seen


def test_every_page_is_written_and_reachable_from_the_index(tmp_path: Path, pool: list[str]) -> None:
    info = build_site(tmp_path / "site", 345, pool)
    files = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("*.html")}
    assert info.pages == 345
    assert files == {page_path(i) for i in range(345)}
    assert _reachable(tmp_path / "site") == files


def test_pages_are_3_to_20_kb_and_distinct(tmp_path: Path, pool: list[str]) -> None:
    info = build_site(tmp_path / "site", 200, pool)
    bodies = [p.read_bytes() for p in (tmp_path / "site").rglob("*.html")]
    assert info.min_bytes >= 3000 and info.max_bytes <= 20 * 1024
    assert min(map(len, bodies)) == info.min_bytes
    assert len(set(bodies)) == len(bodies) == 200
    # distinct text too, not only distinct links: no two pages have the same paragraphs
    texts = {b"".join(re.findall(rb"<p>.*?</p>", b)) for b in bodies}
    assert len(texts) == 200


def test_the_same_page_count_gives_the_same_bytes(tmp_path: Path, pool: list[str]) -> None:
    one = build_site(tmp_path / "one", 120, pool)
    two = build_site(tmp_path / "two", 120, pool)
    assert one.digest == two.digest
    assert (tmp_path / "one" / page_path(77)).read_bytes() == (tmp_path / "two" / page_path(77)).read_bytes()
    # a larger site keeps the shared pages' text; only the last parents gain links to new children
    bigger = build_site(tmp_path / "big", 121, pool)
    assert bigger.digest != one.digest
    assert (tmp_path / "big" / page_path(119)).read_bytes() == (tmp_path / "one" / page_path(119)).read_bytes()
