"""Splitting a web source into host partitions never deletes a page (issue 32, point 17).

A partition crawls its own hosts; what it finds on another partition's hosts (a link, a redirect
target) is handed off. Hand-offs are uncapped (spilled to the run's staging past a bound), and a
hand-off the target partition did not reach is kept, not deleted, and counted as
``cross_partition_unreached``. Two real nginx hosts on 127.0.0.1 (a host is ``host:port``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from include.staging import StagingArea, StagingCorruptError, handoffs
from include.staging.handoffs import HandoffSpool, take_handoffs
from include.stores import open_state_store
from plugins.engine import run_pipeline
from plugins.engine.partitions import handoff_spill
from tests.web.nginx import NginxServer, requires_nginx, serve_nginx
from tests.web.test_multi_host import last_stats, web_source

pytestmark = [requires_nginx, pytest.mark.slow]


def _page(text: str, links: str = "") -> str:
    return f"<html><body><main><p>{text}</p>{links}</main></body></html>"


@contextmanager
def two_hosts(tmp: Path, a_index_links: str, b_pages: dict[str, str], a_extra: str = "") -> Iterator[list[NginxServer]]:
    """Host B (its index links none of ``b_pages``) and host A, whose index holds
    ``a_index_links`` (``{b}`` is B's base URL) and whose server block gets ``a_extra``."""
    (tmp / "b").mkdir()
    (tmp / "b" / "index.html").write_text(_page("Host B home, linking nothing."))
    for name, text in b_pages.items():
        (tmp / "b" / name).write_text(_page(text))
    with serve_nginx(tmp / "b", tmp / "nginx-b") as b:
        (tmp / "a").mkdir()
        (tmp / "a" / "index.html").write_text(_page("Host A home.", a_index_links.replace("{b}", b.base)))
        with serve_nginx(tmp / "a", tmp / "nginx-a", a_extra.replace("{b}", b.base)) as a:
            yield [a, b]


def _stored(source_id: str, key: str) -> bool:
    store = open_state_store()
    try:
        state = store.get_item(source_id, key)
        return state is not None and state.indexed
    finally:
        store.close()


def test_a_redirect_into_another_partition_is_handed_off_not_deleted(tmp_path: Path, tributary_home: Path) -> None:
    redirect = "location = /moved.html { return 301 {b}/moved.html; }"
    with two_hosts(
        tmp_path,
        '<a href="/moved.html">moved</a>',
        {"moved.html": "The page that moved from host A to host B."},
        a_extra=redirect,
    ) as (a, b):
        moved = f"{b.base}/moved.html"
        # one crawl task follows A/moved -> B/moved (B is the source's host) and indexes it
        assert run_pipeline(web_source([a, b], 1)).counts["new"] == 3
        assert _stored("web:hosts", moved)
        # two partitions: A's crawl hands the redirect target to B's partition
        partitioned = web_source([a, b], 2)
        summary = run_pipeline(partitioned)
        stats = last_stats(partitioned)
    assert summary.counts["deleted"] == 0
    assert _stored("web:hosts", moved)
    assert stats["cross_partition_unreached"] == 1 and stats["cross_partition_unreached_sample"] == [moved]
    assert stats.get("redirect_other_partition") == 1
    assert "redirect_out_of_scope" not in stats["errors"]


PAGES_ONLY_LINKED_FROM_A = 2100  # over the old hand-off cap of 2,000


def test_thousands_of_pages_linked_only_from_another_host_are_all_kept(
    tmp_path: Path, tributary_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"p{i}.html" for i in range(PAGES_ONLY_LINKED_FROM_A)]
    links = "".join(f'<a href="{{b}}/{n}">{n}</a>' for n in names)
    with two_hosts(tmp_path, links, {n: f"B page {n}." for n in names}) as (a, b):
        pages = PAGES_ONLY_LINKED_FROM_A + 2
        single = run_pipeline(web_source([a, b], 1, max_pages=pages + 10))
        assert single.counts["new"] == pages
        # spill past 500 hand-offs, so the partition's list goes to staging in several files
        monkeypatch.setattr(handoffs, "MEMORY_LIMIT", 500)
        partitioned = web_source([a, b], 2, max_pages=pages + 10)
        summary = run_pipeline(partitioned)
        stats = last_stats(partitioned)
    assert summary.counts["deleted"] == 0
    assert stats["cross_partition_unreached"] == PAGES_ONLY_LINKED_FROM_A
    assert stats["handoffs_spilled"] >= PAGES_ONLY_LINKED_FROM_A - 500
    assert all(_stored("web:hosts", f"{b.base}/{n}") for n in (names[0], names[-1], names[2050]))
    store = open_state_store()
    try:
        assert sum(1 for st in store.items("web:hosts").values() if st.indexed) == pages
    finally:
        store.close()


def test_spilled_handoffs_are_read_back_in_full_and_verified(tmp_path: Path) -> None:
    staging = StagingArea("dag", "run", tmp_path)
    spool = HandoffSpool(handoff_spill(staging, 3), memory_limit=2)
    for key in ["http://h/c", "http://h/a", "http://h/b", "http://h/a", "http://h/d"]:
        spool.add(key)
    stats = {"pages": 1, **spool.to_stats()}
    assert stats["handoffs"] == ["http://h/d"] and stats["handoffs_spilled"] == 4
    files = [f["path"] for f in stats["handoff_files"]]
    assert files == [staging.path("handoffs-part-0003-0000.txt.gz"), staging.path("handoffs-part-0003-0001.txt.gz")]
    merged = dict(stats)
    read = take_handoffs(merged)
    assert merged == {"pages": 1, "handoffs_spilled": 4}  # the list leaves the stats, the count stays
    assert sorted(read) == ["http://h/a", "http://h/a", "http://h/b", "http://h/c", "http://h/d"]

    staging.write_bytes("handoffs-part-0003-0001.txt.gz", b"replaced")  # not what the crawl spilled
    with pytest.raises(StagingCorruptError):
        list(take_handoffs(dict(stats)))
