"""Per-host spacing as the server saw it: two worker processes sharing one Redis, and the
in-process fallback. Gaps are read from nginx's own access log (request start times)."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis

from include.ratelimit import Decision, Rate
from plugins.connectors.web.politeness import LocalPoliteness, RedisPoliteness
from tests.web.helpers import Run, make_connector
from tests.web.nginx import requires_nginx, serve_nginx

pytestmark = [requires_nginx, pytest.mark.slow]

DELAY = 0.3
# nginx logs request start times with millisecond resolution.
TOLERANCE = 0.002


def _site(root: Path, pages: int) -> None:
    root.mkdir(parents=True)
    links = "".join(f'<a href="p{i}.html">p{i}</a>' for i in range(pages))
    (root / "index.html").write_text(f"<html><body><p>Index</p>{links}</body></html>")
    for i in range(pages):
        (root / f"p{i}.html").write_text(f"<html><body><p>Page {i}</p><a href='/'>home</a></body></html>")


def _gaps(starts: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(sorted(starts))]


@pytest.mark.redis
def test_two_processes_share_the_host_delay_through_redis(redis_url: str, tmp_path: Path) -> None:
    root = tmp_path / "www"
    _site(root, 5)
    with serve_nginx(root, tmp_path / "nginx") as server:
        workers = []
        for name in ("worker_a", "worker_b"):
            config = {
                "name": name,
                "stage_dir": str(tmp_path / name),
                "seeds": [server.base + "/"],
                "delay_seconds": DELAY,
                "concurrency": 4,
                "allowlist": ["127.0.0.1"],
                "redis_url": redis_url,
                "cache_path": str(tmp_path / f"{name}.sqlite"),
                "user_agent": f"Tributary-{name}/1.0",
            }
            workers.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.web.polite_worker", json.dumps(config)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        outputs = []
        for proc in workers:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            outputs.append(json.loads(out.strip().splitlines()[-1]))
        log = server.access_log()
    for result in outputs:
        assert len(result["keys"]) == 6  # each worker crawled the whole site
    agents = {e.user_agent for e in log}
    assert agents == {"Tributary-worker_a/1.0", "Tributary-worker_b/1.0"}
    assert len(log) == 2 * (6 + 2)  # pages + robots.txt + sitemap.xml, per worker
    gaps = _gaps([e.start for e in log])
    assert min(gaps) >= DELAY - TOLERANCE, [(e.start, e.path, e.user_agent) for e in sorted(log, key=lambda e: e.start)]


def test_in_process_fallback_spaces_concurrent_requests(tributary_home: Path, tmp_path: Path) -> None:
    root = tmp_path / "www"
    _site(root, 4)
    with serve_nginx(root, tmp_path / "nginx") as server:
        run = Run(
            make_connector(seeds=[server.base + "/"], delay_seconds=DELAY, concurrency=4, redis_url=""), tmp_path / "s"
        )
        log = server.access_log()
    assert run.discovery.all_keys is not None and len(run.discovery.all_keys) == 5
    gaps = _gaps([e.start for e in log])
    assert len(gaps) == len(log) - 1 == 6
    assert min(gaps) >= DELAY - TOLERANCE, gaps


@pytest.mark.redis
def test_a_slow_down_seen_by_one_worker_holds_the_host_for_the_other(redis_url: str) -> None:
    """A 429's Retry-After pauses the host for every worker, and doubles its delay for a while."""
    first, second = RedisPoliteness(redis_url), RedisPoliteness(redis_url)  # two workers' own clients
    host = f"slow-{uuid.uuid4().hex[:8]}.example:80"
    key = f"tributary:web:polite:{host}"

    async def scenario() -> list[Decision]:
        await first.penalize(host, retry_after=20.0, delay=0.5)
        paused = second.limiter.reserve(key, (Rate(1, 0.5),))
        # the next 429 doubles the floor again (1 s, then 2 s): it lives in Redis, not in `first`
        await second.penalize(host, retry_after=0.0, delay=0.5)
        other_host = first.limiter.reserve(f"{key}-other", (Rate(1, 0.5),))
        await first.close()
        await second.close()
        return [paused, other_host]

    paused, other_host = asyncio.run(scenario())
    assert not paused.admitted and 19.0 < paused.wait <= 20.0 and "slow-down" in paused.reason
    assert other_host.admitted  # another host is untouched
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        members = set(client.zrange(key, 0, -1))
        assert "~pause" in members and "~floor:2000000" in members  # 0.5 s delay: 1 s, doubled to 2 s
    finally:
        client.close()


def test_in_process_politeness_has_a_store_per_crawl() -> None:
    """Two crawls in one process without Redis each keep their own slots (as before)."""
    one, two = LocalPoliteness(), LocalPoliteness()

    async def scenario() -> tuple[bool, bool]:
        async with one.slot("h.example:80", 30.0, hold_seconds=1.0):
            pass
        after_one = one.limiter.reserve("tributary:web:polite:h.example:80", (Rate(1, 30.0),)).admitted
        after_two = two.limiter.reserve("tributary:web:polite:h.example:80", (Rate(1, 30.0),)).admitted
        return after_one, after_two

    assert asyncio.run(scenario()) == (False, True)
