"""A web source over several hosts, crawled in parallel partitions (one host never split).

Every host is a real nginx on its own 127.0.0.1 port (a host is ``host:port`` for politeness and
scope); the partitioned sync runs the same engine steps as the one-task crawl and must index the
same chunks, re-run its crawls idempotently, plan deletions from the merged listing, and keep the
per-host spacing through Redis.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from include.config import SourceConfig
from include.index import open_index
from include.stores import open_state_store
from plugins.connectors.base import source_partitions
from plugins.connectors.web.options import WebOptions
from plugins.engine import RunContext, run_pipeline
from plugins.engine.partitions import CrawlPartitionStep, PartialDiscovery, StartStep, discover_run
from tests.web.nginx import NginxServer, requires_nginx, serve_nginx

pytestmark = [requires_nginx, pytest.mark.slow]

HOSTS = 3
PAGES = 4  # per host, besides its index page
WORDS = ["amber", "birch", "cobalt", "dune", "ember", "fjord", "garnet", "harbor"]


def page_text(host: int, page: int) -> str:
    return f"Host {host} page {page}: the {WORDS[page % len(WORDS)]} ledger of site{host} entry{page}."


def build_site(root: Path, host: int, pages: int = PAGES) -> None:
    """One self-contained site: an index linking every page, each page linking home."""
    root.mkdir(parents=True, exist_ok=True)
    links = "".join(f'<a href="p{i}.html">p{i}</a> ' for i in range(pages))
    (root / "index.html").write_text(f"<html><body><main><h1>Site {host}</h1><p>Index.</p>{links}</main></body></html>")
    for i in range(pages):
        body = f"<h1>Page {i}</h1><p>{page_text(host, i)}</p><a href='/'>home</a>"
        (root / f"p{i}.html").write_text(
            f"<html><head><title>p{i}</title></head><body><main>{body}</main></body></html>"
        )


@contextmanager
def serve_sites(tmp: Path, hosts: int = HOSTS, pages: int = PAGES) -> Iterator[list[NginxServer]]:
    """``hosts`` sites, each served by its own nginx (its own port: its own host)."""
    with ExitStack() as stack:
        servers = []
        for h in range(hosts):
            build_site(tmp / f"www{h}", h, pages)
            servers.append(stack.enter_context(serve_nginx(tmp / f"www{h}", tmp / f"nginx{h}")))
        yield servers


def web_source(servers: list[NginxServer], parallelism: int, **options: Any) -> SourceConfig:
    opts: dict[str, Any] = {
        "seeds": [s.base + "/" for s in servers],
        "delay_seconds": 0,
        "allowlist": ["127.0.0.1"],
        "retries": 0,
        "use_sitemaps": False,
        "host_parallelism": parallelism,
        "redis_url": "",
        **options,
    }
    return SourceConfig.model_validate(
        {"kind": "web", "name": "hosts", "delete_after_missing_runs": 1, "mass_delete_threshold": 0.9, "options": opts}
    )


def chunk_ids(source: SourceConfig) -> set[str]:
    index = open_index(source.index)
    try:
        return index.chunk_ids(source=source.source_id)
    finally:
        index.close()


def last_stats(source: SourceConfig) -> dict[str, Any]:
    store = open_state_store()
    try:
        return dict(store.runs(source.source_id, limit=1)[0]["counts"]["source_stats"])
    finally:
        store.close()


def _home(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    monkeypatch.setenv("TRIBUTARY_HOME", str(path))


# ------------------------------------------------------------------------------ partitions


def test_partitions_never_split_a_host_and_respect_host_parallelism() -> None:
    seeds = [f"http://127.0.0.1:{8000 + h}/{p}" for h, p in itertools.product(range(5), ("a", "b"))]
    parts = WebOptions(seeds=seeds, host_parallelism=2).partitions()
    assert len(parts) == 2
    hosts = [h for p in parts for h in p.split(",")]
    assert sorted(hosts) == sorted({f"127.0.0.1:{8000 + h}" for h in range(5)})  # each host exactly once
    assert WebOptions(seeds=seeds, host_parallelism=8).partitions() == [f"127.0.0.1:{8000 + h}" for h in range(5)]
    assert WebOptions(seeds=seeds, host_parallelism=1).partitions() == []
    assert WebOptions(seeds=["https://a.example/", "https://a.example/x"]).partitions() == []
    # scope: domain partitions by registrable domain: two hosts of one domain stay together
    domain = WebOptions(
        seeds=["https://docs.example.com/", "https://blog.example.com/", "https://other.org/"], scope="domain"
    )
    assert domain.partitions() == ["example.com", "other.org"]


# ------------------------------------------------------------------------------ the sync


def test_partitioned_sync_indexes_what_the_one_task_crawl_indexes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve_sites(tmp_path) as servers:
        _home(monkeypatch, tmp_path / "sequential")
        sequential = web_source(servers, 1)
        one = run_pipeline(sequential)
        expected = chunk_ids(sequential)

        _home(monkeypatch, tmp_path / "partitioned")
        partitioned = web_source(servers, 4)
        many = run_pipeline(partitioned)
        got = chunk_ids(partitioned)
        stats = last_stats(partitioned)
    assert one.counts["new"] == many.counts["new"] == HOSTS * (PAGES + 1)
    assert got == expected and len(got) >= HOSTS * (PAGES + 1)
    parts = stats["partitions"]
    assert [p["hosts"] for p in parts] == [[s.base.removeprefix("http://")] for s in servers]
    assert [p["pages"] for p in parts] == [PAGES + 1] * HOSTS
    assert stats["pages"] == HOSTS * (PAGES + 1) and stats["cross_partition_unreached"] == 0


def test_a_partition_crawl_rerun_is_idempotent(tmp_path: Path, tributary_home: Path) -> None:
    with serve_sites(tmp_path) as servers:
        source = web_source(servers, 4)
        ctx = RunContext(source=source, run_id="rerun", run_type="inline")
        store = open_state_store()
        try:
            StartStep(ctx).run(store)
            first = CrawlPartitionStep(ctx, 1, source_partitions(source)[1])
            path = first.run(store).partial
            before = PartialDiscovery.read(path)
            again = CrawlPartitionStep(ctx, 1, first.partition).run(store)
            after = PartialDiscovery.read(again.partial)
            assert again.partial == path  # the same file, overwritten
            assert sorted(c.item_key for c in after.discovery.changes) == sorted(
                c.item_key for c in before.discovery.changes
            )
            assert after.discovery.all_keys == before.discovery.all_keys and after.digests == before.digests
            assert {k.rsplit("/", 1)[0] for k in after.discovery.all_keys or ()} == {servers[1].base}

            # planned: a crawl cleared after discover ran does not crawl (nor restage) again
            plan = discover_run(ctx, store)
            assert len(plan.batches) >= 1
            servers[1].clear_log()
            CrawlPartitionStep(ctx, 1, first.partition).run(store)
            assert servers[1].access_log() == []
        finally:
            store.close()


def test_deleting_a_page_on_one_host_with_partitions(tmp_path: Path, tributary_home: Path) -> None:
    with serve_sites(tmp_path) as servers:
        source = web_source(servers, 4)
        assert run_pipeline(source).counts["new"] == HOSTS * (PAGES + 1)
        # host 2 drops p3 from its index (still served): absent from a complete merged listing
        index = tmp_path / "www2" / "index.html"
        index.write_text(index.read_text().replace('<a href="p3.html">p3</a>', ""))
        # host 0 removes p1 outright: 404 is an explicit deletion
        (tmp_path / "www0" / "p1.html").unlink()
        second = run_pipeline(source)
    assert second.counts["deleted"] == 2 and second.counts.get("failed", 0) == 0
    gone = {f"{servers[2].base}/p3.html", f"{servers[0].base}/p1.html"}
    store = open_state_store()
    try:
        assert all(store.get_item(source.source_id, key) is None for key in gone)
        assert store.get_item(source.source_id, f"{servers[1].base}/p3.html") is not None
    finally:
        store.close()


@pytest.mark.redis
def test_per_host_politeness_goes_through_redis(tmp_path: Path, tributary_home: Path, redis_url: str) -> None:
    delay = 0.2
    with serve_sites(tmp_path) as servers:
        source = web_source(servers, 4, delay_seconds=delay, concurrency=4, redis_url=redis_url)
        summary = run_pipeline(source)
        logs = [s.access_log() for s in servers]
    assert summary.counts["new"] == HOSTS * (PAGES + 1)
    client = redis.Redis.from_url(redis_url)
    try:
        keys = {k.decode() if isinstance(k, bytes) else str(k) for k in client.keys("tributary:web:polite:*")}
    finally:
        client.close()
    assert keys == {f"tributary:web:polite:{s.base.removeprefix('http://')}" for s in servers}
    for log in logs:  # each host's requests kept the gap (nginx's own start times)
        starts = sorted(e.start for e in log)
        assert min(b - a for a, b in itertools.pairwise(starts)) >= delay - 0.002


def test_only_keys_fetch_each_named_page_once_across_partitions(tmp_path: Path, tributary_home: Path) -> None:
    with serve_sites(tmp_path) as servers:
        source = web_source(servers, 4)
        run_pipeline(source)
        for server in servers:
            server.clear_log()
        named = [f"{servers[2].base}/p1.html", f"{servers[0].base}/p3.html"]
        summary = run_pipeline(source, {"only_keys": named})
        pages = {s.base: [e.path for e in s.access_log() if e.path.endswith(".html")] for s in servers}
    assert summary.counts["unchanged"] + summary.counts["changed"] + summary.counts["new"] == 2
    assert pages == {servers[0].base: ["/p3.html"], servers[1].base: [], servers[2].base: ["/p1.html"]}


def test_a_page_linked_only_from_another_host_is_kept_not_deleted(tmp_path: Path, tributary_home: Path) -> None:
    with serve_sites(tmp_path) as servers:
        hidden = f"{servers[1].base}/hidden.html"
        (tmp_path / "www1" / "hidden.html").write_text(
            "<html><body><main><p>Only host 0 links here.</p></main></body></html>"
        )
        index = tmp_path / "www0" / "index.html"
        index.write_text(index.read_text().replace("</main>", f'<a href="{hidden}">hidden</a></main>'))
        # one crawl task follows the cross-host link and indexes the page
        assert run_pipeline(web_source(servers, 1)).counts["new"] == HOSTS * (PAGES + 1) + 1
        # partitions do not follow it: reported, and the indexed page is kept alive, not deleted
        summary = run_pipeline(web_source(servers, 4))
        stats = last_stats(web_source(servers, 4))
    assert summary.counts["deleted"] == 0
    assert stats["cross_partition_unreached"] == 1 and stats["cross_partition_unreached_sample"] == [hidden]
    assert stats["skipped_other_partition"] >= 1
    store = open_state_store()
    try:
        assert store.get_item("web:hosts", hidden) is not None
    finally:
        store.close()
